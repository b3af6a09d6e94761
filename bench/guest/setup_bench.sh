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

self="$(readlink -f "$0")"
r="${RUNFILES_DIR:-$0.runfiles}"
[[ -d "$r" ]] || r="$self.runfiles"
ws="$r/${TEST_WORKSPACE:-naarpc}"
bench=setup_bench
timeout_s=900
source "$ws/bench/guest/host_side.sh"
guest="$(runfile bench/guest/guest_setup_bench.sh)"
setup_bench="$(runfile bench/setup_bench)"

parse_vm_options "$@"
# --rounds N is this script's; the rest goes to setup_bench.
rounds=3
rest=()
for ((i = 0; i < ${#args[@]}; ++i)); do
  if [[ "${args[i]}" == --rounds ]]; then
    rounds="${args[i + 1]:-}"
    ((++i))
  else
    rest+=("${args[i]}")
  fi
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "setup_bench: --rounds: expected a positive integer, got '$rounds'" >&2; exit 2; }
((${#rest[@]})) || rest=(--regions 1 8 32 --sizes 4096 1048576)
boot_guest "$guest" "$rounds" "$setup_bench" "${rest[@]}"
