#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/async_bench" --inflight 1 8 --calls 400 --rounds 2)
echo "$out"
grep -q "engine calls/s" <<<"$out"
grep -qE "^1 +\|" <<<"$out"
grep -qE "^8 +\|" <<<"$out"
# The CPU table: a row per K, both processes' CPU measured in both modes
# (the engine thread's schedstat may be missing from a kernel: "-").
cpu=$(sed -n '/^CPU time per call/,$p' <<<"$out")
for k in 1 8; do
  grep -qE "^$k +\|( +[0-9]+\.[0-9]){2} \|( +[0-9]+\.[0-9]){2} \|( +([0-9]+\.[0-9]|-)){2}$" <<<"$cpu"
done
# The context switch table: a row per K, both processes in both modes.
sw=$(sed -n '/^Context switches per call/,$p' <<<"$out")
for k in 1 8; do
  grep -qE "^$k +\|( +[0-9]+\.[0-9]{2}){2} \|( +[0-9]+\.[0-9]{2}){2} \|( +([0-9]+\.[0-9]{2}|-)){2}$" <<<"$sw"
done
# Alternating rounds: one ratio per round and row, engine and threads both
# measured in each.
rounds=$(sed -n '/^Engine \/ threads per round/,$p' <<<"$out")
for k in 1 8; do
  grep -qE "^$k +\|( [0-9]+\.[0-9]{2}){2}$" <<<"$rounds"
done
# One mode alone (--mode, for profiling): the other mode's column and the
# ratio print "-", not a made-up figure.
alone=$("$TEST_SRCDIR/naarpc/bench/async_bench" --inflight 2 --calls 40 --rounds 1 --mode engine)
echo "$alone"
grep -qE "^2 +\| +[0-9]+ \| +- \| +- \|" <<<"$alone"
