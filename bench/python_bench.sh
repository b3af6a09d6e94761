#!/usr/bin/env bash
# Runs bench/python_bench.py with Debian's python3 and the built module,
# from the runfiles root (where `bazel run` and tests start).
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/naarpc"
[[ -d "$root" ]] || root="${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}"
cd "$root"
export PYTHONPATH="$PWD/python"
exec /usr/bin/python3 -B bench/python_bench.py "$@"
