#!/usr/bin/env bash
# The stream example runs and verifies its own results (64 MiB through a
# 16 MiB NAA: more data than the NAA's memory; both sessions fit at once).
set -euo pipefail
out=$("$1" --mib 64 --budget-mib 16)
echo "$out"
grep -q "Histogram: 64 MiB streamed" <<<"$out"
grep -q "counts verified" <<<"$out"
grep -q "Transform: 64 MiB in and out" <<<"$out"
grep -q "every value verified" <<<"$out"
