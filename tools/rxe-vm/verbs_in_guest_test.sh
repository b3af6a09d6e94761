#!/usr/bin/env bash
# Bazel test: runs guest_suite.sh inside the Soft-RoCE guest.
set -euo pipefail
r="${TEST_SRCDIR:?}/${TEST_WORKSPACE:-naarpc}"
# Real paths: the guest sees the host's tree at the same paths.
suite="$(readlink -f "$r/tools/rxe-vm/guest_suite.sh")"
# Every verbs transport test (//runtime/transport_impl/verbs:verbs_tests),
# each run in full.
verbs_tests=()
for t in "$r"/runtime/transport_impl/verbs/verbs_*_test; do
  [[ -x "$t" ]] || { echo "no verbs_*_test in the runfiles"; exit 1; }
  verbs_tests+=(--verbs "$(readlink -f "$t")")
done
removal_test="$(readlink -f "$r/tests/e2e/device_removal_test")"
e2e_tests=()
for t in tests/e2e/e2e_test tests/e2e/wire_conformance_test tests/services/services_test \
         tests/transport/notification_test tests/transport/accept_hook_test \
         tests/transport/connection_test \
         tests/e2e/diagnostics_test \
         tests/e2e/server_limits_test tests/naaice/interop_test \
         tests/e2e/fault_matrix_test tests/e2e/stream_test tests/e2e/stream_stub_test \
         tests/e2e/stream_integrity_test tests/services/async_engine_test \
         runtime/transport_impl/verbs/memory_window_test tests/e2e/layout_stub_test \
         tests/transport/gather_test tests/transport/memory_window_test \
         tests/e2e/memory_window_e2e_test tests/channel/channel_transport_test; do
  e2e_tests+=("$(readlink -f "$r/$t")")
done
cli=("$(readlink -f "$r/tests/cli/verbs_guest.sh")" "$(readlink -f "$r/tools/naarpc/naarpc")"
     "$(readlink -f "$r/tests/cli/testdata/types.naa.yaml")")
# The Python module's verbs cases run from this runfiles tree (relative paths:
# python/, examples/naa_server, services/*.naa.yaml), not from real paths.
pytest_args=("$(readlink -f "$r/python/python_transport_test")" "$(readlink -f "$r")" python/naarpc_transport_test.py)
clock_check="$(readlink -f "$r/tools/rxe-vm/clock_check")"
exec "$r/tools/rxe-vm/rxe-vm" --timeout 900 -- \
  /bin/bash "$suite" --clock-check "$clock_check" --cli "${cli[@]}" --pytest "${pytest_args[@]}" --device-removal "$removal_test" "${verbs_tests[@]}" \
  "${e2e_tests[@]}"
