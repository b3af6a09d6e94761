// How the IDL reads plain (unquoted) YAML scalars. The IDL follows YAML 1.2's
// core schema, strictly: booleans are true/false, integers are decimal or
// 0x hex, and a plain scalar that YAML 1.1 tools (PyYAML, ...) would read
// differently — 010 (octal 8), 1:30 (90), OFF/no/yes (booleans) — is an
// error with a hint instead of a silent surprise (docs/idl.md).
#ifndef NAARPC_IDL_INTERNAL_SCALAR_H_
#define NAARPC_IDL_INTERNAL_SCALAR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace naarpc::idl::internal {

enum class ScalarType { kNull, kBool, kInt, kFloat, kString };

// What a plain scalar is in YAML 1.2's core schema and in YAML 1.1 (as
// PyYAML reads it; y/n count as strings there too).
ScalarType PlainType12(std::string_view s);
ScalarType PlainType11(std::string_view s);

// The IDL's integers: [-+]?(0|[1-9][0-9]*) or 0x[0-9a-fA-F]+.
enum class IntStatus { kOk, kNotInteger, kOutOfRange };
IntStatus ParseIdlInteger(std::string_view s, int64_t* value);

// Why `s` (looks like a number but) is not an IDL integer, with the fix:
// "leading zeros: YAML 1.1 reads 010 as octal 8, YAML 1.2 as 10; write 10 or
// 0x8". Empty if nothing specific applies.
std::string IntegerHint(std::string_view s);

// True/false spelled as YAML 1.2's core schema does.
std::optional<bool> ParseBool12(std::string_view s);

// "integer 42", "boolean true (in YAML 1.1)", ... for messages.
std::string DescribePlain(std::string_view s);

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_INTERNAL_SCALAR_H_
