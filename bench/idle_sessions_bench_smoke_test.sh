#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/naarpc/bench/idle_sessions_bench" --sessions 1 20 --idle_seconds 1)
echo "$out"
grep -q "idle CPU" <<<"$out"
grep -qE "^1 +\| [0-9]" <<<"$out"
grep -qE "^20 +\| [0-9]" <<<"$out"
