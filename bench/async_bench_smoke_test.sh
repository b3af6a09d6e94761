#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/async_bench" --inflight 1 8 --calls 400)
echo "$out"
grep -q "engine calls/s" <<<"$out"
grep -qE "^1 +\|" <<<"$out"
grep -qE "^8 +\|" <<<"$out"
