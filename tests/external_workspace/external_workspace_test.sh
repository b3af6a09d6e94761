#!/usr/bin/env bash
# naarpc from another Bazel workspace (docs/using.md): a workspace that names
# naarpc as a local_repository generates a stub and a skeleton from its own
# IDL with @naarpc//codegen:naarpc.bzl, implements the kernel, and calls it
# on the emulated transport (tests/consumer). Runs its own Bazel (offline,
# --batch, output root under TEST_TMPDIR), like a user's fresh checkout.
set -euo pipefail

runfiles="${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}"
# The naarpc source tree (runfiles are symlinks into it).
naarpc="$(readlink -f "$runfiles/tests/consumer/saxpy.naa.yaml")"
naarpc="${naarpc%/tests/consumer/saxpy.naa.yaml}"
[[ -f "$naarpc/WORKSPACE" ]] || { echo "no naarpc workspace at $naarpc" >&2; exit 1; }
bazel="${NAARPC_INNER_BAZEL:-/usr/bin/bazel}"

ws="$TEST_TMPDIR/consumer"
mkdir -p "$ws" "$TEST_TMPDIR/home"
cp "$runfiles/tests/consumer/saxpy.naa.yaml" "$runfiles/tests/consumer/consumer_main.cc" "$ws/"

# The user's WORKSPACE: naarpc, and what naarpc's BUILD files name
# (@system: Debian's libraries; the offline stand-ins of Debian's Bazel 4.2.3).
cat >"$ws/WORKSPACE" <<EOW
workspace(name = "consumer")

local_repository(
    name = "naarpc",
    path = "$naarpc",
)

new_local_repository(
    name = "system",
    build_file = "@naarpc//third_party/system:system.BUILD",
    path = "/usr",
)

local_repository(name = "rules_cc", path = "$naarpc/third_party/stubs/rules_cc")
local_repository(name = "rules_java", path = "$naarpc/third_party/stubs/rules_java")
local_repository(name = "remote_coverage_tools", path = "$naarpc/third_party/stubs/remote_coverage_tools")
EOW

cat >"$ws/BUILD" <<'EOB'
load("@naarpc//codegen:naarpc.bzl", "naarpc_cc_library")

naarpc_cc_library(
    name = "saxpy_naa",
    src = "saxpy.naa.yaml",
)

cc_binary(
    name = "consumer",
    srcs = ["consumer_main.cc"],
    deps = [
        ":saxpy_naa",
        "@naarpc",
    ],
)
EOB

cat >"$ws/.bazelrc" <<'EOR'
build --cxxopt=-std=c++20 --host_cxxopt=-std=c++20
build --copt=-Wall --copt=-Wextra --copt=-Werror
build --incompatible_strict_action_env
build --spawn_strategy=local
EOR

cd "$ws"
inner=(env -i "HOME=$TEST_TMPDIR/home" "PATH=/usr/bin:/bin" "TMPDIR=$TEST_TMPDIR"
  "$bazel" --batch --output_user_root="$TEST_TMPDIR/bazel_root" --nohome_rc)
start=$SECONDS
# :saxpy_naa_mock: the macro's gMock target resolves @system from naarpc's labels.
"${inner[@]}" build --jobs=2 --color=no --curses=no --noshow_progress \
  //:consumer //:saxpy_naa_mock
echo "external_workspace_test: inner build took $((SECONDS - start)) s"

out="$("$ws/bazel-bin/consumer")"
echo "$out"
grep -q '^consumer: ok' <<<"$out"
# The generated header includes naarpc only through its public headers.
grep -q '#include "naarpc/' "$ws/bazel-bin/saxpy.naa.h"
if grep -n '#include "\(runtime\|codegen\|idl\)/' "$ws/bazel-bin/saxpy.naa.h" "$ws/bazel-bin/saxpy.naa.cc"; then
  echo "generated code includes a non-public naarpc header" >&2
  exit 1
fi
echo "external_workspace_test: PASS"
