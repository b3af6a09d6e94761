#!/usr/bin/env bash
# examples/mpi/mpi_dot under mpirun: 4 ranks against two software NAAs (a
# channel over both from NAA_SPEC); after round 1 one NAA is killed, and
# rounds 2 and 3 must still be exact, their calls moved to the other NAA.
# Synchronised by blocking reads (the job's output, a named pipe), no sleeps.
set -euo pipefail
MPI_DOT="$(readlink -f "$1")"
NAA_SERVER="$(readlink -f "$2")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
cd "$TMP"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# A software NAA on a free port; sets NAA_PORT and NAA_PID.
start_naa() {
  local out="$TMP/naa$1.out"
  rm -f "$out.fifo" && mkfifo "$out.fifo"
  "$NAA_SERVER" --transport emulated --address 127.0.0.1 --port 0 >"$out.fifo" 2>&1 &
  NAA_PID=$!
  pids+=("$NAA_PID")
  exec {fd}<"$out.fifo"
  local line
  while IFS= read -r -u "$fd" line; do
    if [[ "$line" =~ on\ 127\.0\.0\.1:([0-9]+) ]]; then NAA_PORT="${BASH_REMATCH[1]}"; break; fi
  done
  # Keep draining its output in the background.
  cat <&"$fd" >"$out" &
  pids+=($!)
  exec {fd}<&-
  [[ -n "${NAA_PORT:-}" ]] || { echo "FAIL: naa_server $1 did not start" >&2; exit 1; }
}

NAA_PORT=; start_naa 1; port1=$NAA_PORT pid1=$NAA_PID
NAA_PORT=; start_naa 2; port2=$NAA_PORT
export NAA_SPEC="127.0.0.1:$port1:5:3,127.0.0.1:$port2:5:3"

# OpenMPI refuses root without these (CI runs as root in a container); the
# shared-memory transport's single-copy mechanism needs ptrace, off here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1

mkfifo "$TMP/go" "$TMP/job.fifo"
mpirun -np 4 -x NAA_SPEC "$MPI_DOT" --transport emulated --elements 131072 --chunk 8192 \
  --rounds 3 --pause-after 1 --pause-fifo "$TMP/go" >"$TMP/job.fifo" 2>&1 &
job=$!
pids+=("$job")
out=""
paused=0
while IFS= read -r line; do
  echo "$line"
  out+="$line"$'\n'
  if [[ "$line" == *"paused after round 1"* ]]; then
    kill "$pid1"          # NAA 1 dies between rounds
    wait "$pid1" 2>/dev/null || true
    echo go >"$TMP/go"
    paused=1
  fi
done <"$TMP/job.fifo"
set +e
wait "$job"
rc=$?
set -e

fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $rc -eq 0 ]] || fail "mpi_dot exited with $rc"
[[ $paused -eq 1 ]] || fail "the job never paused"
for r in 1 2 3; do
  grep -q "round $r: 4 ranks x 131072 elements: dot = .* OK" <<<"$out" || fail "round $r not OK"
done
grep -q "every result exact" <<<"$out" || fail "not every result exact"
moved=$(sed -n 's/.*: \([0-9]*\) failed attempt(s) retried.*/\1/p' <<<"$out")
[[ -n "$moved" && "$moved" -gt 0 ]] || fail "no call was moved off the killed NAA"
# Every rank used both NAAs.
for r in 0 1 2 3; do
  [[ $(grep -c "rank $r: NAA 127.0.0.1:[0-9]*: [1-9][0-9]* call" <<<"$out") -eq 2 ]] ||
    fail "rank $r did not call both NAAs"
done
echo "PASS: 3 exact rounds, $moved failed attempt(s) moved to the surviving NAA"
