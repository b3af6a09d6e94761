# shellcheck shell=bash
# Sourced by tools/bazel (the build's packages) and tools/rxe-vm/rxe-vm (the
# Soft-RoCE guest's packages, only when a guest runs).
#
#   naarpc_install_packages WHO "pkg:why" ...
#
# Installs the Debian packages of the list that are not installed yet. Before
# it does, it prints each one with the reason it is needed. With
# NAARPC_NO_INSTALL=1 it installs nothing: it prints what is missing and the
# command to install it, and returns 0 (the build or test that needs a missing
# package then fails and names it).
naarpc_install_packages() {
  local who="$1"; shift
  local entry pkg why missing=() reasons=()
  for entry in "$@"; do
    pkg="${entry%%:*}"
    why="${entry#*:}"
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
      reasons+=("  $pkg — $why")
    fi
  done
  ((${#missing[@]})) || return 0

  if [[ "${NAARPC_NO_INSTALL:-0}" == 1 ]]; then
    {
      echo "$who: NAARPC_NO_INSTALL=1, not installing these missing Debian packages:"
      printf '%s\n' "${reasons[@]}"
      echo "$who: install them with: apt-get install --no-install-recommends ${missing[*]}"
    } >&2
    return 0
  fi

  {
    echo "$who: installing ${#missing[@]} missing Debian package(s) (set NAARPC_NO_INSTALL=1 to skip):"
    printf '%s\n' "${reasons[@]}"
  } >&2
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
    $sudo apt-get update -q >&2
    $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  fi
}
