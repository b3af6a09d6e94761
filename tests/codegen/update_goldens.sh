#!/usr/bin/env bash
# Regenerates tests/codegen/golden/ from tests/codegen/testdata/golden.naa.yaml.
# Run from anywhere: tests/codegen/update_goldens.sh; review and commit the diff.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
/usr/bin/python3 codegen/naarpc_gen.py tests/codegen/testdata/golden.naa.yaml \
  --out_dir tests/codegen/golden --include_prefix tests/codegen/testdata \
  --idl_label tests/codegen/testdata/golden.naa.yaml
echo "updated tests/codegen/golden/"
