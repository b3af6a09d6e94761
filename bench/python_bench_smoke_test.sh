#!/usr/bin/env bash
# Keeps //bench:python_bench runnable: one short round; checks the table is
# printed (no timing is asserted).
set -euo pipefail
out="$("${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/python_bench" --rounds 1 --small-calls 50 \
  --big-calls 2)"
echo "$out"
for row in "| Echo64 |" "| Echo64 (empty()) |" "| Echo64M |" "| Echo64M (empty()) |"; do
  grep -qF "$row" <<<"$out" || { echo "missing row: $row"; exit 1; }
done
