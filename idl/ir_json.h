// The IR as JSON (format "naarpc-idl-ir/1"): every value normalised and
// every derived C++ name spelled out, for codegen/naarpc_gen.py and other
// tools that do not link the front-end.
#ifndef NAARPC_IDL_IR_JSON_H_
#define NAARPC_IDL_IR_JSON_H_

#include <string>

#include "idl/generated_files.h"
#include "idl/ir.h"

namespace naarpc::idl {

inline constexpr const char* kIrJsonFormat = "naarpc-idl-ir/1";

// `files` (optional) adds a "files" object: what to write and how the
// files include each other.
std::string IrToJson(const IdlFile& idl, const GeneratedFiles* files = nullptr);

}  // namespace naarpc::idl

#endif  // NAARPC_IDL_IR_JSON_H_
