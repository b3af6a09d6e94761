#!/usr/bin/env bash
# Prints the macros visible to generated code: every identifier #defined
# after the #includes of a generated .naa.cc and .naa_mock.h (names that
# start with '_' are reserved anyway and left out). idl/update_cpp_macros.sh
# stores the list in idl/cpp/cpp_macros.inc; //tests/idl:cpp_macros_test
# checks it is still complete.
#
# Usage: list_header_macros.sh FILE... -- G++ARGS (include paths)
set -euo pipefail
files=()
while (($#)) && [[ "$1" != "--" ]]; do files+=("$1"); shift; done
shift || true
CXX="${CXX:-g++}"
{
  for f in "${files[@]}"; do
    # Only the #include lines: the macros of the headers, not of the code.
    grep -E '^#include' "$f" | "$CXX" -std=c++20 -dM -E -x c++ "$@" -
  done
  # GNU dialects (-std=gnu++20) predefine these too.
  printf '#define linux 1\n#define unix 1\n#define i386 1\n'
} | awk '$1 == "#define" { sub(/\(.*/, "", $2); print $2 }' | grep -v -e "^_" -e "_NAA_H_$" -e "_NAA_MOCK_H_$" | LC_ALL=C sort -u
