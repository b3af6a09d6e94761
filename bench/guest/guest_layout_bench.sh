#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (tools/rxe-vm), started by layout_bench.sh:
# //bench:layout_bench (transport level and typed stubs) and
# //bench:memory_window_bench, both over verbs on rxe0, in one boot. Each
# program prints its own tables of medians and ratios.
#
# Usage: guest_layout_bench.sh LAYOUT_BENCH WINDOW_BENCH [--only layout|windows]
#            [--layout-iterations N] [--window-iterations N]
set -uo pipefail

layout_bench="$1" window_bench="$2"; shift 2
addr="${NAARPC_TEST_ADDRESS:?set by rxe-vm}"
only=""
layout_iterations=30
window_iterations=500
while (($#)); do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --layout-iterations) layout_iterations="$2"; shift 2 ;;
    --window-iterations) window_iterations="$2"; shift 2 ;;
    *) echo "guest_layout_bench: unknown option '$1'" >&2; exit 2 ;;
  esac
done
case "$only" in ""|layout|windows) ;; *) echo "--only: expected layout or windows" >&2; exit 2 ;; esac

t_start=$(date +%s.%N)
section() {
  printf '\n===== %s [t=%ss] =====\n' "$*" \
    "$(awk -v s="$t_start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')"
}
failed=0
run() {  # run NAME CMD...: a benchmark, time-limited; a failure is reported, the next runs.
  local name="$1" rc=0; shift
  timeout 1200 "$@" || rc=$?
  if ((rc != 0)); then echo "FAILED: $name (exit $rc)"; failed=1; fi
}

section "guest"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), $(nproc) vCPUs (QEMU TCG)," \
  "$(awk '/MemTotal/ {print $2/1024 " MiB"}' /proc/meminfo)"
rdma link
[[ -e /sys/class/infiniband/rxe0 ]] || { echo "rxe0 missing"; exit 1; }

if [[ "$only" != windows ]]; then
  section "layout_bench --transport verbs --iterations $layout_iterations"
  run layout_bench "$layout_bench" --transport verbs --address "$addr" --iterations "$layout_iterations"
fi
if [[ "$only" != layout ]]; then
  section "memory_window_bench --transport verbs --iterations $window_iterations"
  run memory_window_bench "$window_bench" --transport verbs --address "$addr" \
    --iterations "$window_iterations"
fi
section "done"
if ((failed)); then echo "guest_layout_bench: some runs FAILED (see above)"; exit 1; fi
