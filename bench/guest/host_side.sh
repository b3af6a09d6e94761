# Sourced by the guest benchmarks' host scripts (verbs_bench.sh,
# layout_bench.sh, setup_bench.sh): their runfiles with real paths (the guest
# sees the host's tree at the same paths, not Bazel's symlink forest), the
# options they share, and the boot.
#
# REQUIRES: `bench` (the script's name, for messages), `ws` (its runfiles'
# workspace directory) and `timeout_s` (the default guest timeout) set.

# Real path of runfile REL; exits 2 if it is missing.
runfile() {
  local f
  f="$(readlink -f "$ws/$1")"
  [[ -e "$f" ]] || { echo "$bench: missing $ws/$1 (run through bazel run)" >&2; exit 2; }
  printf '%s\n' "$f"
}

# --timeout SEC and --verbose; everything else stays in `args`, in order.
vm_args=()
args=()
parse_vm_options() {
  while (($#)); do
    case "$1" in
      --timeout) timeout_s="$2"; shift 2 ;;
      --verbose) vm_args+=(--verbose); shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
}

# Boots the guest (tools/rxe-vm) and runs `bash GUEST_SCRIPT ARGS...` in it.
# The working directory is GUEST_SCRIPT's (any host path works: the guest's
# writes land in its tmpfs overlay).
boot_guest() {
  local guest="$1" rxe_vm
  shift
  rxe_vm="$(runfile tools/rxe-vm/rxe-vm)"
  echo "$bench: host $(uname -n), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$(qemu-system-x86_64 --version | head -1)"
  cd "$(dirname "$guest")"
  exec "$rxe_vm" --timeout "$timeout_s" "${vm_args[@]}" -- \
    /bin/bash "$guest" "$@"
}
