# shellcheck shell=bash
# Shared by naarpc-prolog-slurmctld and naarpc-task-prolog: the
# configuration and the NAA inventory.

naarpc_load_conf() {
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  NAARPC_NAA_INVENTORY=/etc/naarpc/naas
  NAARPC_LICENSE=naa
  NAARPC_LOCK_FILE=/run/naarpc-slurm.lock
  NAARPC_LOG_FILE=
  NAARPC_LOCAL_IP=
  NAARPC_SCONTROL=scontrol
  if [[ -r "$here/naarpc-slurm.conf" ]]; then
    # shellcheck source=/dev/null
    source "$here/naarpc-slurm.conf"
  elif [[ -r /etc/naarpc/slurm.conf ]]; then
    # shellcheck source=/dev/null
    source /etc/naarpc/slurm.conf
  fi
}

naarpc_log() {
  local msg="naarpc-slurm: job ${SLURM_JOB_ID:-?}: $*"
  if [[ -n "$NAARPC_LOG_FILE" ]]; then
    echo "$(date -u +%FT%TZ) $msg" >>"$NAARPC_LOG_FILE"
  else
    logger -t naarpc-slurm -- "$msg" 2>/dev/null || echo "$msg" >&2
  fi
}

# The inventory as "NAME SPEC" lines (comments and blank lines dropped).
naarpc_inventory() {
  sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$NAARPC_NAA_INVENTORY" |
    awk 'NF >= 2 { print $1, $2 }'
}

# One job's line of `scontrol show job -o`.
naarpc_job_line() {
  "$NAARPC_SCONTROL" show job -o "$1"
}

# A field of a `scontrol show job -o` line (values have no spaces, except
# AdminComment, which naarpc writes without spaces).
naarpc_field() {
  tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n 1
}

# The NAA names a job holds (from its AdminComment "naarpc=a,b"), one a line.
naarpc_job_naas() {
  local comment
  comment="$(naarpc_field "$1" AdminComment)"
  [[ "$comment" == naarpc=* ]] || return 0
  tr ',' '\n' <<<"${comment#naarpc=}" | sed '/^$/d'
}
