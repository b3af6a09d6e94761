#!/usr/bin/env bash
# Builds one libFuzzer target with clang-14 (Bazel's toolchain is gcc, which
# has no libFuzzer) and runs it for a bounded number of executions over its
# committed seed corpus. Any crash, sanitizer report, leak, timeout or
# invariant abort fails the test.
#
#   run_fuzzer.sh NAME CORPUS_DIR MAX_LEN RUNS LIBS -- SOURCES...
#
# Paths are relative to the runfiles root. RUNS bounds the executions
# (NAARPC_FUZZ_RUNS overrides it, e.g. for a long local run; with
# NAARPC_FUZZ_SECONDS the run is bounded by time instead). LIBS is a
# space-separated list of extra linker flags (may be empty).
set -euo pipefail

name="$1" corpus="$2" max_len="$3" runs="$4" libs="$5"
shift 5
[[ "${1:-}" == "--" ]] && shift

CXX="${NAARPC_FUZZ_CXX:-/usr/bin/clang++-14}"
if [[ ! -x "$CXX" ]]; then
  echo "run_fuzzer.sh: $CXX not found (Debian package clang-14 + libclang-rt-14-dev)" >&2
  exit 1
fi

SRC="${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}"
WORK="${TEST_TMPDIR:?}/fuzz-$name"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$WORK}"
mkdir -p "$WORK/corpus" "$OUT"

sources=()
for s in "$@"; do sources+=("$SRC/$s"); done
# shellcheck disable=SC2086  # LIBS is a word list on purpose
"$CXX" -std=c++20 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Werror -I "$SRC" -I "$SRC/include" -I "$SRC/external/system" \
  "${sources[@]}" $libs -lpthread -o "$WORK/$name"

# libFuzzer adds new inputs to the first corpus directory: use a writable copy.
cp "$SRC/$corpus"/* "$WORK/corpus/"

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
if [[ -n "${NAARPC_FUZZ_SECONDS:-}" ]]; then
  bound=(-max_total_time="$NAARPC_FUZZ_SECONDS")
else
  bound=(-runs="${NAARPC_FUZZ_RUNS:-$runs}")
fi
# -seed fixed: a failure reproduces with the same command.
"$WORK/$name" "${bound[@]}" -seed="${NAARPC_FUZZ_SEED:-1}" -max_len="$max_len" -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$OUT/" "$WORK/corpus"
echo "run_fuzzer.sh: $name: no crash; corpus grew to $(ls "$WORK/corpus" | wc -l) inputs"
