#!/usr/bin/env bash
# Keeps //bench:memory_window_bench runnable: it runs and prints its table
# (no timing is asserted).
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/memory_window_bench" --iterations 20)
echo "$out"
grep -q "^memory_window_bench: emulated transport" <<<"$out"
grep -qE "^\| 64 \| 20 \|" <<<"$out"
grep -qE "^\| 1048576 \| 1 \|" <<<"$out"
# One session's calls only (profiling).
"$TEST_SRCDIR/naarpc/bench/memory_window_bench" --size 64 --iterations 5 --only windows | grep -qE "^\| 64 \| 5 \|"
if "$TEST_SRCDIR/naarpc/bench/memory_window_bench" --only neither 2>/dev/null; then exit 1; fi
