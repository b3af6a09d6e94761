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

self="$(readlink -f "$0")"
r="${RUNFILES_DIR:-$0.runfiles}"
[[ -d "$r" ]] || r="$self.runfiles"
ws="$r/${TEST_WORKSPACE:-naarpc}"
bench=layout_bench
timeout_s=1500
source "$ws/bench/guest/host_side.sh"
guest="$(runfile bench/guest/guest_layout_bench.sh)"
layout_bench="$(runfile bench/layout_bench)"
window_bench="$(runfile bench/memory_window_bench)"

parse_vm_options "$@"
boot_guest "$guest" "$layout_bench" "$window_bench" "${args[@]}"
