#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/channel_bench" --seconds 0.2 --inflight 4)
echo "$out"
grep -q "VectorArithChannelClient, 4 NAAs" <<<"$out"
grep -q " 0 call(s) lost" <<<"$out"
