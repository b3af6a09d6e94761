#!/usr/bin/env bash
# Regenerates tests/codegen/golden/ from tests/codegen/testdata/golden.naa.yaml
# (front-end //idl:naarpc_idlc, then codegen/naarpc_gen.py).
# Run from anywhere: tests/codegen/update_goldens.sh; review and commit the diff.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
./tools/bazel build //idl:naarpc_idlc >&2
idlc="$(./tools/bazel info bazel-bin 2>/dev/null)/idl/naarpc_idlc"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$idlc" tests/codegen/testdata/golden.naa.yaml --include_prefix tests/codegen/testdata \
  --label tests/codegen/testdata/golden.naa.yaml --out "$tmp/golden.json"
/usr/bin/python3 codegen/naarpc_gen.py "$tmp/golden.json" --out_dir tests/codegen/golden
echo "updated tests/codegen/golden/"
