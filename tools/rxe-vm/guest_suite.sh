#!/usr/bin/env bash
# Runs inside the rxe guest (tools/rxe-vm): the verbs tests for real, then
# perftest over rxe0 for reference.
# Usage: guest_suite.sh [--clock-check CLOCK_CHECK] [--cli SCRIPT NAARPC IDL] [--pytest RUN_PYTEST ROOT TEST_PY]
#                       [--device-removal TEST] --verbs VERBS_TEST [--verbs VERBS_TEST...]
#                       [END_TO_END_TEST...]
# --verbs: a verbs transport test, run in full (no test may skip).
# --clock-check: tools/rxe-vm:clock_check, the guest's clock must not go back
# between vCPUs (it boots with tsc=reliable).
# --cli: the naarpc command-line tool's verbs script (tests/cli/verbs_guest.sh).
# --pytest: the Python module's verbs cases: RUN_PYTEST (python/run_pytest.sh,
# //python:python_transport_test's script) run from the runfiles root ROOT on
# TEST_PY (python/naarpc_transport_test.py), `-k verbs`;
# NAARPC_TEST_REQUIRE_VERBS=1 makes a verbs case that would skip fail.
# --device-removal: last, removes rxe0 under a live call (the test), checks
# that the device goes away once the test has exited, and re-creates it.
set -uo pipefail
clock_check=""
if [[ "${1:-}" == --clock-check ]]; then clock_check="$2"; shift 2; fi
cli=()
if [[ "${1:-}" == --cli ]]; then cli=("$2" "$3" "$4"); shift 4; fi
pytest_args=()
if [[ "${1:-}" == --pytest ]]; then pytest_args=("$2" "$3" "$4"); shift 4; fi
removal_test=""
if [[ "${1:-}" == --device-removal ]]; then removal_test="$2"; shift 2; fi
verbs_tests=()
while [[ "${1:-}" == --verbs ]]; do verbs_tests+=("$2"); shift 2; done
((${#verbs_tests[@]})) || { echo "guest_suite.sh: no --verbs test given"; exit 2; }
e2e_tests=("$@")
addr="${NAARPC_TEST_ADDRESS:?set by rxe-vm}"
failed=0

section() { printf '\n===== %s =====\n' "$*"; }
run() {  # run NAME CMD...: records a failure, keeps going
  local name="$1"; shift
  section "$name"
  if ! "$@"; then echo "FAILED: $name"; failed=1; fi
}
# gtest run that must pass something; a skip not named in allowed_skips.txt
# (next to this script) is a failure.
allowed_skips="$(dirname "$(readlink -f "$0")")/allowed_skips.txt"
gtest() {
  local out rc name
  out="$(mktemp)"
  "$@" 2>&1 | tee "$out"; rc=${PIPESTATUS[0]}
  # Skipped test names (Suite.Test[/param]; not gtest's "N tests" summary).
  # A file, not process substitution: the guest has no /dev/fd.
  sed -n 's/^\[  SKIPPED \] \([^ ]*\.[^ ]*\).*/\1/p' "$out" | sort -u > "$out.skips"
  while read -r name; do
    if ! grep -qxF "$name" "$allowed_skips"; then
      echo "unexpected skip: $name (not in $allowed_skips)"; rc=1
    fi
  done < "$out.skips"
  if ! grep -q '^\[  PASSED  \] [1-9]' "$out"; then echo "no passed tests"; rc=1; fi
  rm -f "$out" "$out.skips"
  return "$rc"
}

section "RDMA devices"
ibv_devices
rdma link
[[ -e /sys/class/infiniband/rxe0 ]] || { echo "rxe0 missing"; exit 1; }
if [[ -n "$clock_check" ]]; then
  run "guest clock: monotonic across vCPUs" "$clock_check"
fi

# A second device on its own netdev, for the device-selection tests.
ip link add eth1 type dummy && ip addr add 10.0.3.15/24 dev eth1 && ip link set eth1 up &&
  rdma link add rxe1 type rxe netdev eth1 || { echo "cannot add rxe1"; failed=1; }
export NAARPC_TEST_SECOND_DEVICE=rxe1 NAARPC_TEST_SECOND_ADDRESS=10.0.3.15

for t in "${verbs_tests[@]}"; do
  run "verbs transport tests: $(basename "$t")" gtest "$t"
done
for t in "${e2e_tests[@]}"; do
  run "$(basename "$t") (verbs cases)" gtest "$t" --gtest_filter='*verbs*:*Verbs*'
done
if ((${#cli[@]})); then
  run "naarpc CLI: serve and call over verbs" /bin/bash "${cli[0]}" "${cli[1]}" "${cli[2]}" verbs
fi
# The guest's root is the host's (read-only, rxe-vm), so Debian's python3 with
# python3-numpy and python3-pytest is there.
if ((${#pytest_args[@]})); then
  run "Python module naarpc: verbs cases (pytest)" \
    env NAARPC_TEST_REQUIRE_VERBS=1 TEST_SRCDIR="${pytest_args[1]}" TEST_WORKSPACE=. \
    /bin/bash "${pytest_args[0]}" "${pytest_args[2]}" -k verbs
fi

# perftest over rdma_cm (-R), loopback on rxe0: figures for reference only
# (software RDMA in an emulated CPU), but the runs must succeed.
perf() {  # perf TOOL ARGS...: server in the background, then the client
  local tool="$1"; shift
  local attempt rc=1
  # A client that connects before the server listens is REJECTED: retry
  # with a fresh server; every process is bounded by a timeout.
  for attempt in 1 2 3 4 5; do
    timeout 150 "$tool" -d rxe0 -R "$@" >/tmp/"$tool".server.log 2>&1 &
    local server=$!
    sleep "$attempt"
    rc=0
    timeout 120 "$tool" -d rxe0 -R "$@" "$addr" || rc=$?
    if ((rc == 0)); then
      wait "$server" || rc=$?
      break
    fi
    kill "$server" 2>/dev/null; wait "$server" 2>/dev/null
    echo "($tool: attempt $attempt failed with $rc; retrying)"
  done
  ((rc == 0)) || cat /tmp/"$tool".server.log
  return "$rc"
}
run "ib_write_lat (rxe0, rdma_cm)" perf ib_write_lat -s 64 -n 2000
run "ib_write_bw (rxe0, rdma_cm)" perf ib_write_bw -s 65536 -n 2000 --report_gbits

# Last: it destroys rxe0 (and re-creates it).
device_removal() {
  gtest env NAARPC_DEVICE_REMOVAL_TEST=1 "$removal_test" || return 1
  # rxe cannot detach a live process, so the kernel finishes removing the
  # device once the test process (and its librdmacm) has gone.
  local i
  for i in $(seq 1 30); do
    [[ -e /sys/class/infiniband/rxe0 ]] || break
    sleep 0.5
  done
  if [[ -e /sys/class/infiniband/rxe0 ]]; then
    echo "rxe0 still present 15 s after the test ended (something still holds it)"
    return 1
  fi
  echo "rxe0 removed; re-creating it"
  rdma link add rxe0 type rxe netdev eth0 && ibv_devices | grep -q rxe0
}
if [[ -n "$removal_test" ]]; then
  run "device removal (rdma link delete rxe0 under a live call)" device_removal
fi

section "result"
if ((failed)); then echo "guest suite FAILED"; exit 1; fi
echo "guest suite passed"
