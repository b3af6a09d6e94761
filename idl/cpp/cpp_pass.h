// The C++ back-end's pass over the IR of a loaded IDL file (idl/load.h):
// what the generator (naarpc_idlc) runs and nothing else pays for.
//
//   Result<IdlFile> idl = Load(path, &diags);
//   if (idl.ok()) status = PrepareForCpp(*idl, &diags);
//
// It checks every IDL name against C++ (keywords and reserved names, the
// prefix naarpc_ of generated code; packages against the runtime's
// namespace naarpc), fills every `cpp` member and IdlFile::cpp_namespace
// (the names codegen/templates/ declare), and runs the name-clash analysis
// of the generated code (idl/cpp/clash.h).
#ifndef NAARPC_IDL_CPP_CPP_PASS_H_
#define NAARPC_IDL_CPP_CPP_PASS_H_

#include <vector>

#include "idl/diagnostic.h"
#include "idl/ir.h"
#include "naarpc/status.h"

namespace naarpc::idl {

// kInvalidArgument listing every error ("file:line:col: error: field:
// ...", as Load's) if the IDL cannot be generated as C++; `diagnostics`
// (optional) receives them sorted by position. `idl` is filled either way.
Status PrepareForCpp(IdlFile& idl, std::vector<Diagnostic>* diagnostics = nullptr);

}  // namespace naarpc::idl

#endif  // NAARPC_IDL_CPP_CPP_PASS_H_
