#!/usr/bin/env bash
# Bazel test: runs guest_suite.sh inside the Soft-RoCE guest.
set -euo pipefail
r="${TEST_SRCDIR:?}/${TEST_WORKSPACE:-naarpc}"
# Real paths: the guest sees the host's tree at the same paths.
suite="$(readlink -f "$r/tools/rxe-vm/guest_suite.sh")"
verbs_test="$(readlink -f "$r/runtime/transport_impl/verbs/verbs_transport_test")"
e2e_test="$(readlink -f "$r/tests/e2e/e2e_test")"
exec "$r/tools/rxe-vm/rxe-vm" --timeout 600 -- \
  /bin/bash "$suite" "$verbs_test" "$e2e_test"
