#!/usr/bin/env bash
# Keeps //bench:layout_bench runnable: it runs and prints its table (no
# timing is asserted).
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/layout_bench" --iterations 1)
echo "$out"
grep -q "^layout_bench: emulated transport" <<<"$out"
grep -qE "^\| column of 4096x4096 f64 \| 4096 \| 32768 \| 256 \|" <<<"$out"
grep -qE "^\| 128\^3 f64 block, y face \| 128 \| 131072 \| 8 \|" <<<"$out"
grep -q "^layout_bench: typed stubs, emulated transport" <<<"$out"
grep -qE "^\| strided 16 x 64 KiB blocks \| 16 \| 1048576 \| [0-9.]+ \|" <<<"$out"
