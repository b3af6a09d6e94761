#!/usr/bin/env bash
# The naarpc CLI over verbs: `naarpc serve` and `naarpc call` on a real RDMA
# device, both dialects, and NAA_SPEC + NAA_LOCAL_IP choosing the device.
# Runs in the Soft-RoCE guest (tools/rxe-vm/guest_suite.sh, address from
# NAARPC_TEST_ADDRESS); with TRANSPORT emulated it runs anywhere, on
# 127.0.0.1 (//tests/cli:verbs_guest_script_test keeps it working).
# Usage: verbs_guest.sh NAARPC TYPES_IDL [TRANSPORT]
set -uo pipefail
naarpc="$1"
idl="$2"
transport="${3:-verbs}"
if [[ "$transport" == emulated ]]; then
  addr=127.0.0.1
else
  addr="${NAARPC_TEST_ADDRESS:?set by rxe-vm}"
fi
failed=0
fail() { echo "FAILED: $*"; failed=1; }

dir="$(mktemp -d)"
mkfifo "$dir/out"
"$naarpc" serve --idl "$idl" --transport "$transport" --address "$addr" --port 0 \
  --kernel increment --kernel I8=fail:BAD_INPUT >"$dir/out" 2>"$dir/err" &
server=$!
exec 3<"$dir/out"  # kept open until the server has exited (no SIGPIPE)
port=""
# The listening line, then the server keeps running; read -t only bounds a hang.
while IFS= read -r -t 120 line <&3; do
  echo "serve: $line"
  if [[ "$line" =~ listening\ on\ [^\ ]*:([0-9]+)\  ]]; then port="${BASH_REMATCH[1]}"; break; fi
done
if [[ -z "$port" ]]; then
  cat "$dir/err"
  kill "$server" 2>/dev/null
  echo "FAILED: naarpc serve did not start"
  exit 1
fi

expect() {  # expect WANT_RC PATTERN CMD...: runs naarpc CMD, checks its exit status and output
  local want="$1" pattern="$2" out rc
  shift 2
  out="$("$naarpc" "$@" 2>&1)"
  rc=$?
  echo "\$ naarpc $*"
  echo "$out"
  [[ "$rc" == "$want" ]] || fail "exit status $rc, expected $want: naarpc $*"
  grep -qF -- "$pattern" <<<"$out" || fail "no '$pattern' in the output of: naarpc $*"
}

target=(--idl "$idl" --transport "$transport" --target "$addr:$port")
for dialect in spec reference; do
  expect 0 "y = [2, 3, 0]" call "${target[@]}" --dialect "$dialect" U16 --in 'x=[1, 2, 65535]'
  expect 0 "y = [1.5, 0, 3]" call "${target[@]}" --dialect "$dialect" F64 --in 'x=[0.5, -1, 2]'
  expect 0 "echo = 100000 x u8: min 0, max 255, sum 12742480, first [1, 2, 3" \
    call "${target[@]}" --dialect "$dialect" Shapes.Var --in data=seq:100000 --repeat 3
  expect 6 "BAD_INPUT" call "${target[@]}" --dialect "$dialect" I8 --in 'x=[1, 2, 3]'
done
# Discovery as the NAAICE reference library's hosts use it: the device is
# the one NAA_LOCAL_IP belongs to (auto transport).
NAA_SPEC="$addr:$port:20:2" NAA_LOCAL_IP="$addr" \
  expect 0 "echo = [2, 3, 4]" call --idl "$idl" Shapes.Var --in 'data=[1, 2, 3]'
# Nothing listens on port 1.
expect 4 "hint: is an NAA" call --idl "$idl" --transport "$transport" --target "$addr:1" \
  --deadline 10000 U8 --in x=zeros

kill -TERM "$server"
wait "$server" || fail "naarpc serve exited with $?"
cat <&3
exec 3<&-
rm -rf "$dir"
((failed)) && exit 1
echo "naarpc CLI over $transport: passed"
