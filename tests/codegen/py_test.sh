#!/usr/bin/env bash
# Runs a Python unittest file with Debian's /usr/bin/python3 (which has
# jinja2 and yaml), independent of Bazel's Python toolchain.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
exec /usr/bin/python3 -B "$@"
