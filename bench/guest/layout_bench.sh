#!/usr/bin/env bash
# layout_bench (guest): boots the Soft-RoCE guest once (tools/rxe-vm) and runs
# guest_layout_bench.sh in it: //bench:layout_bench and
# //bench:memory_window_bench over verbs on rxe0 (seed 004: strided
# parameters zero-copy vs packed vs contiguous; per-call memory windows).
# Not part of //tools/rxe-vm:verbs_in_guest_test. See README.md.
#
#   bazel run -c opt //bench/guest:layout_bench -- [--timeout SEC] [--verbose]
#       [--only layout|windows] [--layout-iterations N] [--window-iterations N]
set -euo pipefail

# Runfiles with real paths (the guest sees the host's tree at the same paths).
self="$(readlink -f "$0")"
r="${RUNFILES_DIR:-$0.runfiles}"
[[ -d "$r" ]] || r="$self.runfiles"
ws="$r/${TEST_WORKSPACE:-naarpc}"
rxe_vm="$(readlink -f "$ws/tools/rxe-vm/rxe-vm")"
guest="$(readlink -f "$ws/bench/guest/guest_layout_bench.sh")"
layout_bench="$(readlink -f "$ws/bench/layout_bench")"
window_bench="$(readlink -f "$ws/bench/memory_window_bench")"
for f in "$rxe_vm" "$guest" "$layout_bench" "$window_bench"; do
  [[ -e "$f" ]] || { echo "layout_bench: missing $f (run through bazel run)" >&2; exit 2; }
done

timeout_s=1500
vm_args=()
args=()
while (($#)); do
  case "$1" in
    --timeout) timeout_s="$2"; shift 2 ;;
    --verbose) vm_args+=(--verbose); shift ;;
    *) args+=("$1"); shift ;;
  esac
done

echo "layout_bench: host $(uname -n), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
  "$(qemu-system-x86_64 --version | head -1)"
cd "$(dirname "$guest")"
exec "$rxe_vm" --timeout "$timeout_s" "${vm_args[@]}" -- \
  /bin/bash "$guest" "$layout_bench" "$window_bench" "${args[@]}"
