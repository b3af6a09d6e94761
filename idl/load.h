// Loading an IDL file (*.naa.yaml): YAML parsing (yaml-cpp), the schema and
// every language-neutral rule of docs/idl.md, in one pass. The C++ names
// and their checks are the C++ back-end's (idl/cpp/cpp_pass.h).
//
//   std::vector<naarpc::idl::Diagnostic> diags;
//   naarpc::Result<naarpc::idl::IdlFile> idl = naarpc::idl::Load(path, &diags);
//   for (const auto& d : diags) std::cerr << d.ToString() << "\n";
//   if (!idl.ok()) return 1;
//   for (const auto& service : idl->services) ...
//
// Never throws and never aborts on bad input (any bytes, any size).
#ifndef NAARPC_IDL_LOAD_H_
#define NAARPC_IDL_LOAD_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "idl/diagnostic.h"
#include "idl/ir.h"
#include "naarpc/status.h"

namespace naarpc::idl {

// Larger files are refused before parsing.
inline constexpr size_t kMaxIdlFileBytes = size_t{1} << 20;

struct LoadOptions {
  // The file name shown in diagnostics and kept in IdlFile::path; default:
  // the path given.
  std::string display_path;
};

// Reads and validates `path`. On success returns the IR; otherwise
// kInvalidArgument whose message lists every error ("file:line:col: error:
// ..." lines), or kNotFound if the file cannot be read (missing, a
// directory, unreadable). `diagnostics` (optional) receives errors and
// warnings sorted by position.
Result<IdlFile> Load(std::string_view path, std::vector<Diagnostic>* diagnostics = nullptr,
                     const LoadOptions& options = {});

// The same for an IDL held in memory; `path` names it in diagnostics.
Result<IdlFile> LoadFromString(std::string_view text, std::string_view path,
                               std::vector<Diagnostic>* diagnostics = nullptr);

}  // namespace naarpc::idl

#endif  // NAARPC_IDL_LOAD_H_
