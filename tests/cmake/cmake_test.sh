#!/usr/bin/env bash
# naarpc from a CMake project (docs/using.md): configures, builds and installs
# naarpc with CMake (Release, -j2) into a prefix under TEST_TMPDIR, runs the
# installed CLI (describe, serve, call), then builds
# a separate consumer project (tests/cmake/consumer) with find_package(naarpc)
# and naarpc_generate(), runs it (a software NAA called in-process on the
# emulated transport), and compiles and runs a program against the
# pkg-config file.
set -euo pipefail

runfiles="${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}"
# The naarpc source tree (runfiles are symlinks into it); CMake writes only
# into its build directory.
naarpc="$(readlink -f "$runfiles/CMakeLists.txt")"
naarpc="${naarpc%/CMakeLists.txt}"
tmp="${TEST_TMPDIR:?}"
prefix="$tmp/prefix"
mkdir -p "$tmp/home"
run() { env -i "HOME=$tmp/home" "PATH=/usr/bin:/bin" "TMPDIR=$tmp" "$@"; }

start=$SECONDS
run cmake -S "$naarpc" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DNAARPC_WERROR=ON >"$tmp/configure.log" ||
  { cat "$tmp/configure.log"; exit 1; }
run cmake --build "$tmp/build" -j2 -- --no-print-directory >"$tmp/build.log" 2>&1 ||
  { tail -50 "$tmp/build.log"; exit 1; }
run cmake --install "$tmp/build" >/dev/null
echo "cmake_test: naarpc configured, built and installed in $((SECONDS - start)) s"

# Installed: the public headers only, and they include nothing else of naarpc.
ls "$prefix/include/naarpc" | diff - <(cd "$naarpc/include/naarpc" && ls *.h)
if grep -rn '#include "\(runtime\|codegen\|idl\)/' "$prefix/include"; then
  echo "cmake_test: an installed header includes a non-public header" >&2
  exit 1
fi

# The installed CLI: describe an IDL file, then serve it and call it on the
# emulated transport (the server's listening line gives its port).
cli="$prefix/bin/naarpc"
idl="$runfiles/tests/cli/testdata/types.naa.yaml"
run "$cli" describe "$idl" | grep -q '^service Types'
coproc serve { exec env -i "HOME=$tmp/home" "PATH=/usr/bin:/bin" "$cli" serve --idl "$idl" \
  --transport emulated --address 127.0.0.1 --port 0 --kernel increment; }
read -r -t 60 line <&"${serve[0]}" || { echo "cmake_test: naarpc serve printed nothing" >&2; exit 1; }
port="$(sed -n 's/^naarpc serve: listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' <<<"$line")"
[[ -n "$port" ]] || { echo "cmake_test: unexpected line from naarpc serve: $line" >&2; exit 1; }
out="$(run "$cli" call --idl "$idl" --transport emulated --target "127.0.0.1:$port" U16 \
  --in 'x=[1, 2, 65535]')"
kill -TERM "$serve_PID"
wait "$serve_PID"
grep -q '^y = \[2, 3, 0\]' <<<"$out" || { echo "cmake_test: naarpc call printed: $out" >&2; exit 1; }
echo "cmake_test: the installed naarpc CLI described, served and called"

start=$SECONDS
run cmake -S "$runfiles/tests/cmake/consumer" -B "$tmp/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/consumer_configure.log" ||
  { cat "$tmp/consumer_configure.log"; exit 1; }
run cmake --build "$tmp/consumer" -j2 >"$tmp/consumer_build.log" 2>&1 ||
  { tail -50 "$tmp/consumer_build.log"; exit 1; }
out="$("$tmp/consumer/consumer")"
echo "$out"
grep -q '^consumer: ok' <<<"$out"
test -f "$tmp/consumer/naarpc_generated/saxpy.naa_mock.h"
echo "cmake_test: consumer (find_package + naarpc_generate) built and ran in $((SECONDS - start)) s"

# pkg-config: compile and link a program with the flags it prints.
cat >"$tmp/pc_main.cc" <<'EOC'
#include <cstdio>

#include "naarpc/naarpc.h"

int main() {
  auto transport = naarpc::NewTransport("emulated");
  if (!transport.ok()) return 1;
  std::printf("pkg-config consumer: ok\n");
  return 0;
}
EOC
flags="$(run env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs naarpc)"
# shellcheck disable=SC2086  # a word list
run g++ -std=c++20 -Wall -Wextra -Werror "$tmp/pc_main.cc" $flags -o "$tmp/pc_main"
"$tmp/pc_main" | grep -q '^pkg-config consumer: ok'
echo "cmake_test: PASS"
