#!/usr/bin/env bash
# naarpc from a CMake project, as docs/using.md says (its blocks, taken from
# the page by tests/docs/doctest.py): configures, builds and installs naarpc
# with CMake (Release, warnings as errors) into a prefix under TEST_TMPDIR,
# runs the installed CLI (describe, serve, call), then builds the page's
# consumer project (find_package(naarpc), naarpc_generate() into a library)
# with tests/consumer's IDL and program, runs it (a software NAA called
# in-process on the emulated transport), checks that a second
# naarpc_generate() of one IDL is refused, and builds and runs the same
# program with the page's pkg-config commands.
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
# A block of docs/using.md, its placeholder paths replaced by this test's.
doc_block() {
  /usr/bin/python3 "$runfiles/tests/docs/doctest.py" extract docs/using.md "$1" |
    sed -e "s|/path/to/naarpc|$naarpc|g" -e "s|/opt/naarpc|$prefix|g"
}

# docs/using.md's build and install commands, with warnings as errors.
start=$SECONDS
doc_block cmake-install | sed 's|-DCMAKE_BUILD_TYPE=Release|& -DNAARPC_WERROR=ON|' >"$tmp/install.sh"
(cd "$tmp" && run bash -euo pipefail install.sh >"$tmp/build.log" 2>&1) ||
  { cat "$tmp/install.sh"; tail -50 "$tmp/build.log"; exit 1; }
echo "cmake_test: naarpc configured, built and installed in $((SECONDS - start)) s (docs/using.md)"

# Installed: the public headers only, and they include nothing else of naarpc.
(cd "$prefix/include/naarpc" && find . -type f | sort) |
  diff - <(cd "$naarpc/include/naarpc" && find . -name '*.h' | sort)
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

# docs/using.md's consumer project, with tests/consumer's IDL and program.
start=$SECONDS
app="$tmp/app"
mkdir -p "$app"
doc_block cmake-consumer >"$app/CMakeLists.txt"
cp "$runfiles/tests/consumer/saxpy.naa.yaml" "$app/"
cp "$runfiles/tests/consumer/consumer_main.cc" "$app/app.cc"
run cmake -S "$app" -B "$tmp/app_build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/consumer_configure.log" ||
  { cat "$tmp/consumer_configure.log"; exit 1; }
run cmake --build "$tmp/app_build" -j2 >"$tmp/consumer_build.log" 2>&1 ||
  { tail -50 "$tmp/consumer_build.log"; exit 1; }
out="$("$tmp/app_build/app")"
echo "$out"
grep -q '^consumer: ok' <<<"$out"
test -f "$tmp/app_build/naarpc_generated/saxpy.naa_mock.h"
echo "cmake_test: consumer (find_package + naarpc_generate) built and ran in $((SECONDS - start)) s"

# A second target generating the same IDL is refused, naming the owner.
mkdir -p "$tmp/twice"
cp "$runfiles/tests/consumer/saxpy.naa.yaml" "$tmp/twice/"
cat >"$tmp/twice/CMakeLists.txt" <<'EOC'
cmake_minimum_required(VERSION 3.20)
project(twice LANGUAGES CXX)
find_package(naarpc 0.1 REQUIRED)
add_library(a STATIC)
naarpc_generate(TARGET a IDL saxpy.naa.yaml)
add_library(b STATIC)
naarpc_generate(TARGET b IDL saxpy.naa.yaml)
EOC
if run cmake -S "$tmp/twice" -B "$tmp/twice_build" -DCMAKE_PREFIX_PATH="$prefix" \
    >"$tmp/twice.log" 2>&1; then
  echo "cmake_test: a second naarpc_generate of one IDL was accepted" >&2; exit 1
fi
tr -s ' \n' '  ' <"$tmp/twice.log" | grep -q 'already generated into this directory for target a; link a from b' ||
  { cat "$tmp/twice.log"; exit 1; }

# docs/using.md's pkg-config commands, in a directory with the same program.
pc="$tmp/pc"
mkdir -p "$pc"
cp "$runfiles/tests/consumer/saxpy.naa.yaml" "$pc/"
cp "$runfiles/tests/consumer/consumer_main.cc" "$pc/app.cc"
doc_block pkg-config >"$pc/build.sh"
(cd "$pc" && run bash -euo pipefail build.sh >"$tmp/pc.log" 2>&1) ||
  { cat "$pc/build.sh" "$tmp/pc.log"; exit 1; }
"$pc/app" | grep -q '^consumer: ok'
echo "cmake_test: PASS"
