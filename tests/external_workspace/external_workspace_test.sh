#!/usr/bin/env bash
# naarpc from another Bazel workspace, as docs/using.md says (its WORKSPACE,
# .bazelrc and BUILD blocks, taken from the page): a workspace that names
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
# docs/using.md's WORKSPACE, .bazelrc and BUILD (taken from the page), with
# tests/consumer's IDL and program as the page's app.cc.
doc_block() {
  /usr/bin/python3 "$runfiles/tests/docs/doctest.py" extract docs/using.md "$1" |
    sed -e "s|/path/to/naarpc|$naarpc|g"
}
cp "$runfiles/tests/consumer/saxpy.naa.yaml" "$ws/"
cp "$runfiles/tests/consumer/consumer_main.cc" "$ws/app.cc"
doc_block bazel-workspace >"$ws/WORKSPACE"
doc_block bazel-build >"$ws/BUILD"
doc_block bazel-bazelrc >"$ws/.bazelrc"
# This test's own settings: warnings are errors, no sandbox inside a test.
cat >>"$ws/.bazelrc" <<'EOR'
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
  //:app //:saxpy_naa_mock
echo "external_workspace_test: inner build took $((SECONDS - start)) s"

out="$("$ws/bazel-bin/app")"
echo "$out"
grep -q '^consumer: ok' <<<"$out"
# The generated header includes naarpc only through its public headers.
grep -q '#include "naarpc/' "$ws/bazel-bin/saxpy.naa.h"
if grep -n '#include "\(runtime\|codegen\|idl\)/' "$ws/bazel-bin/saxpy.naa.h" "$ws/bazel-bin/saxpy.naa.cc"; then
  echo "generated code includes a non-public naarpc header" >&2
  exit 1
fi
echo "external_workspace_test: PASS"
