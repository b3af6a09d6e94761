#!/usr/bin/env bash
# verbs_bench: boots the Soft-RoCE guest once (tools/rxe-vm) and runs
# guest_bench.sh in it: perftest (ib_write_lat, ib_write_bw) and call_bench
# over rxe0, then one table of naarpc vs. the fabric. See README.md.
#
#   bazel run -c opt //bench/guest:verbs_bench -- [--timeout SEC] [--verbose]
#       [--sizes "64 4096 ..."] [--bw-sizes "1048576 ..."]
#       [--placement same|split|both] [--min-time S] [--no-diagnose]
set -euo pipefail

# Runfiles: this script's, with real paths (the guest sees the host's tree at
# the same paths, but not Bazel's symlink forest's working directory).
self="$(readlink -f "$0")"
r="${RUNFILES_DIR:-$0.runfiles}"
[[ -d "$r" ]] || r="$self.runfiles"
ws="$r/${TEST_WORKSPACE:-naarpc}"
rxe_vm="$(readlink -f "$ws/tools/rxe-vm/rxe-vm")"
guest="$(readlink -f "$ws/bench/guest/guest_bench.sh")"
call_bench="$(readlink -f "$ws/bench/call_bench")"
for f in "$rxe_vm" "$guest" "$call_bench"; do
  [[ -e "$f" ]] || { echo "verbs_bench: missing $f (run through bazel run)" >&2; exit 2; }
done

timeout_s=1000
vm_args=()
args=()
while (($#)); do
  case "$1" in
    --timeout) timeout_s="$2"; shift 2 ;;
    --verbose) vm_args+=(--verbose); shift ;;
    *) args+=("$1"); shift ;;
  esac
done

echo "verbs_bench: host $(uname -n), $(nproc) CPUs, $(qemu-system-x86_64 --version | head -1)"
echo "verbs_bench: call_bench = $call_bench"
# Writable working directory for the guest command (any host path works; the
# guest's writes land in its tmpfs overlay).
cd "$(dirname "$guest")"
exec "$rxe_vm" --timeout "$timeout_s" "${vm_args[@]}" -- \
  /bin/bash "$guest" "$call_bench" "${args[@]}"
