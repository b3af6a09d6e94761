#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/setup_bench" --regions 1 8 --sizes 4096 65536 --repeat 2)
echo "$out"
grep -q "transport connect alone" <<<"$out"
# open, connect, reg + MRSP, first call, to first result, open / connect
grep -qE "^1 x 4 KiB +(\| +[0-9]+\.[0-9]+ +){5}\| +[0-9.]+x$" <<<"$out"
grep -qE "^8 x 64 KiB +\|" <<<"$out"
