// C++ names: what an IDL name must not be, and the names the generated code
// derives from IDL names (the templates in codegen/templates/ use exactly
// these, through the IR's `cpp` members).
#ifndef NAARPC_IDL_CPP_CPP_NAMES_H_
#define NAARPC_IDL_CPP_CPP_NAMES_H_

#include <string>
#include <string_view>

#include "idl/ir.h"

namespace naarpc::idl::internal {

// C++ keywords (and alternative tokens, contextual keywords) plus names the
// generated code uses unqualified: std, naarpc, NULL, size_t, intN_t, ...
bool IsReservedWord(std::string_view name);
// A macro of the headers generated code includes (idl/cpp/cpp_macros.inc).
bool IsHeaderMacro(std::string_view name);

// Why `name` cannot be an IDL identifier (keyword, reserved in C++, the
// generated-code prefix naarpc_), or "" if it can.
std::string BadIdentifier(std::string_view name);

// DIVISION_BY_ZERO -> DivisionByZero (each _-separated part capitalised).
std::string PascalFromUpperSnake(std::string_view name);
// GetX -> get_x (an _ before every capital but the first, then lower case).
std::string SnakeFromCamel(std::string_view name);

// Fills every `cpp` member of the IR (names, argument types, mock form).
void AssignCppNames(IdlFile& idl);

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_CPP_CPP_NAMES_H_
