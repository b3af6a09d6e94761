#!/usr/bin/env bash
# The README's first command must work: quickstart exits 0, every call verified.
set -euo pipefail
out="$("$1")"
echo "$out"
[[ $(grep -c ' ok' <<<"$out") -eq 10 ]] || { echo "expected 10 verified calls" >&2; exit 1; }
grep -q 'median' <<<"$out"
