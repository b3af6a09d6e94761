#!/usr/bin/env bash
# Runs pytest files with Debian's /usr/bin/python3 (python3-numpy,
# python3-pytest) and the built module on its path.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="$PWD/python"
exec /usr/bin/python3 -B -m pytest -p no:cacheprovider -q -rs "$@"
