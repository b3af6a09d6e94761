#!/usr/bin/env bash
# setup_bench (guest): boots the Soft-RoCE guest once (tools/rxe-vm) and runs
# guest_setup_bench.sh in it: //bench:setup_bench --transport verbs on rxe0,
# ROUNDS times in that boot:
# what a fresh session costs before its first result (connect + registrations
# + MRSP, then the first call), beside the transport's own connect. Rounds
# follow each other in one boot, so a slow phase of the shared host shows as
# one round out of line rather than as a different boot. See README.md.
#
#   bazel run -c opt //bench/guest:setup_bench -- [--timeout SEC] [--verbose]
#       [--rounds N] [setup_bench options, e.g. --regions 1 8 32 --sizes 4096 1048576]
set -euo pipefail

# Runfiles with real paths (the guest sees the host's tree at the same paths).
self="$(readlink -f "$0")"
r="${RUNFILES_DIR:-$0.runfiles}"
[[ -d "$r" ]] || r="$self.runfiles"
ws="$r/${TEST_WORKSPACE:-naarpc}"
rxe_vm="$(readlink -f "$ws/tools/rxe-vm/rxe-vm")"
guest="$(readlink -f "$ws/bench/guest/guest_setup_bench.sh")"
setup_bench="$(readlink -f "$ws/bench/setup_bench")"
for f in "$rxe_vm" "$guest" "$setup_bench"; do
  [[ -e "$f" ]] || { echo "setup_bench: missing $f (run through bazel run)" >&2; exit 2; }
done

timeout_s=900
rounds=3
vm_args=()
args=()
while (($#)); do
  case "$1" in
    --timeout) timeout_s="$2"; shift 2 ;;
    --verbose) vm_args+=(--verbose); shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "setup_bench: --rounds: expected a positive integer, got '$rounds'" >&2; exit 2; }
((${#args[@]})) || args=(--regions 1 8 32 --sizes 4096 1048576)

echo "setup_bench: host $(uname -n), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
  "$(qemu-system-x86_64 --version | head -1)"
# Writable working directory for the guest command (its writes land in the
# guest's tmpfs overlay).
cd "$(dirname "$guest")"
exec "$rxe_vm" --timeout "$timeout_s" "${vm_args[@]}" -- \
  /bin/bash "$guest" "$rounds" "$setup_bench" "${args[@]}"
