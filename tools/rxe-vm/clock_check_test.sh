#!/usr/bin/env bash
# clock_check (run in the rxe guest) must pass on a monotonic clock and
# fail when CPU 1's readings lag CPU 0's.
set -uo pipefail
check="${TEST_SRCDIR:?}/${TEST_WORKSPACE:-naarpc}/tools/rxe-vm/clock_check"
"$check" --hand-offs 20000 || { echo "FAIL: clock_check failed on the host's clock"; exit 1; }
out="$("$check" --hand-offs 20000 --skew-ns 1000000000)"; rc=$?
echo "$out"
((rc == 1)) || { echo "FAIL: a clock lagging 1 s on CPU 1 gave exit status $rc, not 1"; exit 1; }
[[ "$out" == *"went back (by up to"* ]] || { echo "FAIL: no backward step reported"; exit 1; }
echo PASS
