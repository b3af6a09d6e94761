// The files the generator writes for one IDL file and the names they use
// for each other (include paths, header guards).
#ifndef NAARPC_IDL_GENERATED_FILES_H_
#define NAARPC_IDL_GENERATED_FILES_H_

#include <string>
#include <string_view>

#include "naarpc/status.h"

namespace naarpc::idl {

struct GeneratedFiles {
  std::string stem;          // "vector" for vector.naa.yaml
  std::string header;        // include path: "<prefix>/vector.naa.h"
  std::string source;        // "<prefix>/vector.naa.cc"
  std::string mock;          // "<prefix>/vector.naa_mock.h"
  std::string header_guard;  // a valid macro name for any path
  std::string mock_guard;
};

// From the IDL file name (must end in .naa.yaml) and the directory the
// generated files are included from ("" = none).
Result<GeneratedFiles> PlanGeneratedFiles(std::string_view idl_path,
                                          std::string_view include_prefix);

// PATH_TO_FILE_H_: letters and digits upper-cased, every other run of
// characters one '_', prefixed NAARPC_ when it would not start with a
// letter.
std::string HeaderGuard(std::string_view include_path);

}  // namespace naarpc::idl

#endif  // NAARPC_IDL_GENERATED_FILES_H_
