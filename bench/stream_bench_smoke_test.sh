#!/usr/bin/env bash
# Keeps //bench:stream_bench runnable: a small run must print its table and
# ratios (the figures themselves are not asserted).
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/stream_bench" --bytes 8M --chunk 64K --window 4 --naa-budget 4M)
echo "$out"
grep -qE "^\| stream \| [0-9.]+ \| [0-9.]+ \|$" <<<"$out"
grep -qE "^\| calls \| " <<<"$out"
grep -qE "^\| raw \| " <<<"$out"
grep -q "stream / raw: " <<<"$out"
grep -q "peak RSS of host" <<<"$out"
