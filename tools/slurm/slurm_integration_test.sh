#!/usr/bin/env bash
# A real single-node Slurm (munged + slurmctld + slurmd, configured in a
# temporary directory: the machine's own configuration is not touched) with
# naarpc's controller prolog and task prolog (tools/slurm/), four software
# NAAs declared as Licenses=naa:4, and:
#   1. two concurrent jobs with --licenses=naa:2 get disjoint NAAs (all four
#      between them) as NAA_SPEC, and a third job waits for licenses, then
#      gets a freed NAA and NAA_LOCAL_IP (the route's source address);
#   2. srun --licenses=naa:2 -n 4 runs examples/mpi's mpi_dot (PMIx) over
#      its two NAAs; one of them is killed between rounds: every result is
#      exact and the failed calls moved to the other NAA.
# Every daemon is stopped on exit, also on failure. Synchronised by blocking
# reads (named pipes, daemons' readiness via scontrol), never by sleeps.
set -euo pipefail
MPI_DOT="$(readlink -f "$1")"
NAA_SERVER="$(readlink -f "$2")"
HERE="$(dirname "$(readlink -f "$0")")"
SLURM_SCRIPTS="$(readlink -f "${3:-$HERE}")"
export PATH="$PATH:/usr/sbin:/sbin"  # munged, slurmctld, slurmd (bazel test's PATH lacks them)
ROOT="$(cd "$SLURM_SCRIPTS/../.." && pwd)"

# shellcheck source=tools/install_packages.sh
source "$ROOT/tools/install_packages.sh"
naarpc_install_packages slurm_integration_test \
  "slurmctld:the Slurm controller of the test's one-node cluster" \
  "slurmd:the Slurm node daemon that runs the test's job steps" \
  "slurm-client:srun, scontrol, squeue" \
  "munge:Slurm's authentication daemon (munged), with a key made for the test" \
  "openmpi-bin:the MPI runtime of examples/mpi's mpi_dot"

# Under /tmp, not TEST_TMPDIR: munged's socket path must be short (108
# bytes) and every directory above it searchable by all.
T="$(mktemp -d /tmp/naarpc-slurm.XXXXXX)"
pids=()
# Processes of this test's cluster: everything started with its SLURM_CONF
# (slurmd's step daemons detach from slurmd and would outlive it).
cluster_pids() {
  local f
  for f in /proc/[0-9]*/environ; do
    if { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qx "SLURM_CONF=$T/slurm.conf"; then
      f="${f#/proc/}"; echo "${f%/environ}"
    fi
  done
}
cleanup() {
  local rc=$?
  if [[ -n "${SLURM_CONF:-}" ]]; then
    # Jobs first (slurmd ends their steps), bounded; then the daemons.
    timeout 20 scancel --quiet --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 20); do
      [[ -z "$(timeout 5 squeue -h 2>/dev/null || true)" ]] && break
      timeout 1 tail -f /dev/null || true
    done
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    # Daemons get a moment to exit on SIGTERM; then SIGKILL (bounded).
    timeout 20 tail --pid="$p" -f /dev/null 2>/dev/null || kill -9 "$p" 2>/dev/null || true
  done
  # Whatever of the cluster is left (a step daemon): SIGKILL.
  for p in $(cluster_pids); do
    [[ "$p" == "$$" || "$p" == "$BASHPID" ]] || kill -9 "$p" 2>/dev/null || true
  done
  if ((rc != 0)); then
    for f in "$T"/*.log; do [[ -f "$f" ]] && { echo "---- $f"; tail -n 40 "$f"; }; done
  fi
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# ---- software NAAs ------------------------------------------------------------------------
declare -A naa_pid=() naa_port=()
for i in 1 2 3 4; do
  mkfifo "$T/naa$i.fifo"
  "$NAA_SERVER" --transport emulated --address 127.0.0.1 --port 0 >"$T/naa$i.fifo" 2>&1 &
  naa_pid[$i]=$!
  pids+=("${naa_pid[$i]}")
  exec {fd}<"$T/naa$i.fifo"
  while IFS= read -r -u "$fd" line; do
    if [[ "$line" =~ on\ 127\.0\.0\.1:([0-9]+) ]]; then naa_port[$i]="${BASH_REMATCH[1]}"; break; fi
  done
  cat <&"$fd" >"$T/naa$i.log" &
  pids+=($!)
  exec {fd}<&-
  [[ -n "${naa_port[$i]:-}" ]] || fail "naa_server $i did not start"
done
{
  echo "# name  NAA_SPEC entries (VectorArith.Dot: function code 5, 3 parameters)"
  for i in 1 2 3 4; do echo "naa$i 127.0.0.1:${naa_port[$i]}:5:3"; done
} >"$T/naas"

# ---- munge ----------------------------------------------------------------------------------
mkdir -p "$T/munge"
chmod 755 "$T" "$T/munge"  # munged wants its socket's directories searchable by all
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge/munge.key"
munged --foreground --force --key-file="$T/munge/munge.key" --socket="$T/munge/munge.sock" \
  --pid-file="$T/munge/munged.pid" --seed-file="$T/munge/seed" --log-file="$T/munged.log" &
munged_pid=$!
pids+=("$munged_pid")

# ---- Slurm ----------------------------------------------------------------------------------
mkdir -p "$T/state" "$T/spool" "$T/naarpc"
cp "$SLURM_SCRIPTS"/naarpc-lib.sh "$SLURM_SCRIPTS"/naarpc-prolog-slurmctld \
  "$SLURM_SCRIPTS"/naarpc-task-prolog "$T/naarpc/"
chmod 755 "$T/naarpc"/naarpc-prolog-slurmctld "$T/naarpc"/naarpc-task-prolog
export SLURM_CONF="$T/slurm.conf"
cat >"$T/naarpc/naarpc-slurm.conf" <<CONF
NAARPC_NAA_INVENTORY=$T/naas
NAARPC_LICENSE=naa
NAARPC_LOCK_FILE=$T/naarpc.lock
NAARPC_LOG_FILE=$T/naarpc-slurm.log
export SLURM_CONF=$SLURM_CONF
CONF
ctld_port="$(free_port)"
slurmd_port="$(free_port)"
cpus="$(nproc)"
cat >"$SLURM_CONF" <<CONF
ClusterName=naarpctest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
Licenses=naa:4
PrologSlurmctld=$T/naarpc/naarpc-prolog-slurmctld
TaskProlog=$T/naarpc/naarpc-task-prolog
NodeName=naanode NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN
PartitionName=test Nodes=naanode Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# slurmd 22.05 initialises a cgroup plugin whatever the task and proctrack
# plugins; with task/none and proctrack/linuxproc it creates no cgroup.
echo "CgroupPlugin=cgroup/v1" >"$T/cgroup.conf"

slurmctld -D -i -f "$SLURM_CONF" &
ctld_pid=$!
pids+=("$ctld_pid")
slurmd -D -N naanode -f "$SLURM_CONF" &
slurmd_pid=$!
pids+=("$slurmd_pid")
# Ready when the node answers as idle. A daemon that exits fails the test
# at once; the bound (120 tries, paced by a 1 s wait each) only turns a
# hang into a failure.
ready=0
for _ in $(seq 1 120); do
  for d in "$munged_pid" "$ctld_pid" "$slurmd_pid"; do
    kill -0 "$d" 2>/dev/null || fail "a daemon (pid $d) exited while starting"
  done
  if state="$(scontrol show node naanode -o 2>/dev/null)" && [[ "$state" == *"State=IDLE"* ]]; then
    ready=1; break
  fi
  timeout 1 tail -f /dev/null || true
done
((ready)) || fail "the node never became idle: $(scontrol show node naanode -o 2>&1)"
echo "slurm: naanode idle (controller on 127.0.0.1:$ctld_port)"

# ---- 1. concurrent jobs get disjoint NAAs ------------------------------------------------------
mkfifo "$T/specs" "$T/release"
holder_srun=()
for j in 1 2; do
  srun --licenses=naa:2 -n 1 -J "naa$j" bash -c 'echo "$SLURM_JOB_ID $NAA_SPEC" >"$0"; read -r _ <"$1"' \
    "$T/specs" "$T/release" >"$T/job$j.log" 2>&1 &
  pids+=($!)
  holder_srun+=($!)
done
# Read-write: the test holds a writer too, so one job's line and close is no EOF.
exec {specs}<>"$T/specs"
# And a reader and writer of release: each "go" is one line for one job, however
# the jobs' opens and the writes interleave (two opens of the fifo for writing
# could meet both jobs at once, one line and an EOF, and the second block).
exec {release}<>"$T/release"
read -r -u "$specs" job_a spec_a
read -r -u "$specs" job_b spec_b
echo "job $job_a: NAA_SPEC=$spec_a"
echo "job $job_b: NAA_SPEC=$spec_b"
# A third job needs a license while the two hold all four: it waits.
srun --licenses=naa:1 -n 1 -J naa3 bash -c 'echo "$SLURM_JOB_ID $NAA_SPEC ${NAA_LOCAL_IP:-unset}" >"$0"' \
  "$T/specs" \
  >"$T/job3.log" 2>&1 &
job3_srun=$!
pids+=("$job3_srun")
reason=""
for _ in $(seq 1 120); do
  reason="$(squeue -h -n naa3 -o '%T %r' 2>/dev/null || true)"
  [[ "$reason" == "PENDING Licenses" ]] && break
  timeout 1 tail -f /dev/null || true
done
[[ "$reason" == "PENDING Licenses" ]] || fail "the third job is not waiting for licenses: '$reason'"
echo "job naa3: $reason"
mapfile -t a < <(tr ',' '\n' <<<"$spec_a" | sort)
mapfile -t b < <(tr ',' '\n' <<<"$spec_b" | sort)
((${#a[@]} == 2 && ${#b[@]} == 2)) || fail "each job should get 2 NAAs: '$spec_a' / '$spec_b'"
common="$(comm -12 <(printf '%s\n' "${a[@]}") <(printf '%s\n' "${b[@]}"))"
[[ -z "$common" ]] || fail "jobs $job_a and $job_b share NAA(s): $common"
[[ "$(printf '%s\n' "${a[@]}" "${b[@]}" | sort -u | wc -l)" -eq 4 ]] || fail "not all four NAAs used"
# Release both: the third job then runs with one of the freed NAAs.
echo go >&"$release"
echo go >&"$release"
read -r -u "$specs" job_c spec_c local_c
echo "job $job_c: NAA_SPEC=$spec_c NAA_LOCAL_IP=$local_c"
[[ "$spec_c" =~ ^127\.0\.0\.1:[0-9]+:5:3$ ]] || fail "third job's NAA_SPEC '$spec_c'"
# The task prolog's NAA_LOCAL_IP: the source address of the route to the NAA.
[[ "$local_c" == 127.0.0.1 ]] || fail "third job's NAA_LOCAL_IP '$local_c' (expected 127.0.0.1)"
exec {specs}<&-
wait "${holder_srun[@]}"
exec {release}<&-
wait "$job3_srun"

# ---- 2. the MPI job, one NAA killed mid-job ---------------------------------------------------
mkfifo "$T/go" "$T/mpi.fifo"
srun --licenses=naa:2 -n 4 --mpi=pmix -J mpi_dot "$MPI_DOT" --transport emulated \
  --elements 131072 --chunk 8192 --rounds 3 --pause-after 1 --pause-fifo "$T/go" \
  >"$T/mpi.fifo" 2>&1 &
mpi_srun=$!
pids+=("$mpi_srun")
out=""
killed=""
while IFS= read -r line; do
  echo "$line"
  out+="$line"$'\n'
  if [[ "$line" =~ NAA_SPEC=127\.0\.0\.1:([0-9]+): ]]; then victim_port="${BASH_REMATCH[1]}"; fi
  if [[ "$line" == *"paused after round 1"* ]]; then
    for i in 1 2 3 4; do
      if [[ "${naa_port[$i]}" == "${victim_port:-}" ]]; then
        kill "${naa_pid[$i]}"; killed="naa$i"
        wait "${naa_pid[$i]}" 2>/dev/null || true  # gone before the job goes on
      fi
    done
    echo go >"$T/go"
  fi
done <"$T/mpi.fifo"
set +e
wait "$mpi_srun"
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "srun mpi_dot exited with $rc"
[[ -n "$killed" ]] || fail "no NAA of the MPI job was killed (no NAA_SPEC line or no pause)"
for r in 1 2 3; do
  grep -q "round $r: 4 ranks x 131072 elements: dot = .* OK" <<<"$out" || fail "round $r not OK"
done
moved=$(sed -n 's/.*: \([0-9]*\) failed attempt(s) retried.*/\1/p' <<<"$out")
[[ -n "$moved" && "$moved" -gt 0 ]] || fail "no call was moved off the killed NAA"
echo "PASS: disjoint NAAs for concurrent jobs; MPI job exact with $killed killed ($moved attempt(s) moved)"
