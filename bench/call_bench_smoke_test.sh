#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/call_bench" --placement=same --sizes 64 65536 --min-time 0.01)
echo "$out"
grep -q "naarpc us" <<<"$out"
grep -qE "^64 B +\|" <<<"$out"
grep -qE "^64 KiB +\|" <<<"$out"
# The engine-less transport baseline.
out=$("$TEST_SRCDIR/naarpc/bench/call_bench" --placement=same --sizes 64 4096 --min-time 0.01 \
  --baseline=transport)
echo "$out"
grep -q "raw emu us" <<<"$out"
grep -qE "^4 KiB +\|" <<<"$out"
# Interleaved blocks (the guest's engine-cost measurement), the NAA's
# statistics off.
out=$("$TEST_SRCDIR/naarpc/bench/call_bench" --placement=same --sizes 64 --blocks 2 --iterations 20 \
  --baseline=transport --machine --naa-stats off)
echo "$out"
grep -q "transport emulated, NAA statistics off ==" <<<"$out"
grep -qE "^blocks placement=same bytes=64 pairs=2 .*pair_ratios=[0-9.]+,[0-9.]+ " <<<"$out"
# The TCP baseline with timed receives (SO_RCVTIMEO), as naarpc's waits.
out=$("$TEST_SRCDIR/naarpc/bench/call_bench" --placement=same --sizes 64 --min-time 0.01 \
  --raw-wait-ms 1000 --machine)
echo "$out"
grep -q "receives timed: SO_RCVTIMEO 1000 ms" <<<"$out"
grep -qE "^result placement=same transport=emulated bytes=64 .* raw_wait_ms=1000$" <<<"$out"
# ... and to nothing else: a clear error, not a silently ignored option.
if err=$("$TEST_SRCDIR/naarpc/bench/call_bench" --placement=same --sizes 64 --raw-wait-ms 5 \
  --baseline=transport 2>&1); then
  echo "--raw-wait-ms with --baseline=transport was accepted"; exit 1
fi
grep -q "raw-wait-ms applies to the TCP baseline only (--baseline transport)" <<<"$err"
