#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (tools/rxe-vm), started by setup_bench.sh:
# //bench:setup_bench over verbs on rxe0, ROUNDS times in this one boot. A
# failed round is reported and fails the run; the other rounds still run.
#
# Usage: guest_setup_bench.sh ROUNDS SETUP_BENCH [setup_bench options...]
set -uo pipefail

rounds="$1"; setup_bench="$2"; shift 2
addr="${NAARPC_TEST_ADDRESS:?set by rxe-vm}"
echo "guest: kernel $(uname -r), $(nproc) vCPUs, $(date -u '+%Y-%m-%d %H:%M UTC')"
failed=0
for round in $(seq 1 "$rounds"); do
  echo "===== round $round of $rounds ====="
  timeout 600 "$setup_bench" --transport verbs --address "$addr" "$@" ||
    { echo "round $round FAILED"; failed=1; }
done
exit "$failed"
