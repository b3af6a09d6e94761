#!/usr/bin/env bash
# Builds the MRSP libFuzzer target with clang-14 (Bazel's toolchain is gcc)
# and runs it for a bounded time over the committed seed corpus. Any crash,
# sanitizer report or invariant abort fails the test.
set -euo pipefail

CXX="${NAARPC_FUZZ_CXX:-/usr/bin/clang++-14}"
if [[ ! -x "$CXX" ]]; then
  echo "run_fuzzer.sh: $CXX not found (Debian package clang-14 + libclang-rt-14-dev)" >&2
  exit 1
fi

SRC="${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}"
WORK="${TEST_TMPDIR:?}/fuzz"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$WORK}"
mkdir -p "$WORK/corpus" "$OUT"

"$CXX" -std=c++20 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Werror -I "$SRC" \
  "$SRC/tests/fuzz/mrsp_fuzzer.cc" "$SRC/runtime/mrsp.cc" \
  "$SRC/runtime/protocol.cc" "$SRC/runtime/status.cc" \
  -o "$WORK/mrsp_fuzzer"

# libFuzzer adds new inputs to the first corpus directory: use a writable copy.
cp "$SRC"/tests/fuzz/corpus/* "$WORK/corpus/"

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
"$WORK/mrsp_fuzzer" \
  -max_total_time="${NAARPC_FUZZ_SECONDS:-20}" -max_len=6200 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$OUT/" "$WORK/corpus"
echo "run_fuzzer.sh: no crash; corpus grew to $(ls "$WORK/corpus" | wc -l) inputs"
