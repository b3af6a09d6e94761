#!/usr/bin/env bash
# verbs_bench: boots the Soft-RoCE guest once (tools/rxe-vm) and runs
# guest_bench.sh in it: perftest (ib_write_lat, ib_write_bw) and call_bench
# over rxe0, then one table of naarpc vs. the fabric. See README.md.
#
#   bazel run -c opt //bench/guest:verbs_bench -- [--timeout SEC] [--verbose]
#       [--sizes "64 4096 ..."] [--bw-sizes "1048576 ..."]
#       [--placement same|split|both] [--min-time S] [--no-diagnose]
set -euo pipefail

self="$(readlink -f "$0")"
r="${RUNFILES_DIR:-$0.runfiles}"
[[ -d "$r" ]] || r="$self.runfiles"
ws="$r/${TEST_WORKSPACE:-naarpc}"
bench=verbs_bench
timeout_s=2400  # a full run took ~10 min on a quiet host, 21 min on a slow one
source "$ws/bench/guest/host_side.sh"
guest="$(runfile bench/guest/guest_bench.sh)"
call_bench="$(runfile bench/call_bench)"

parse_vm_options "$@"
echo "verbs_bench: call_bench = $call_bench"
boot_guest "$guest" "$call_bench" "${args[@]}"
