// Schema and semantic rules of docs/idl.md: builds the IR from the YAML tree
// and reports every violation (a bad field never hides the checks of the
// others).
#ifndef NAARPC_IDL_INTERNAL_VALIDATE_H_
#define NAARPC_IDL_INTERNAL_VALIDATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "idl/ir.h"
#include "idl/internal/sink.h"
#include "idl/internal/yaml_tree.h"

namespace naarpc::idl::internal {

inline constexpr int kMaxFunctionCode = 127;
inline constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 30;   // one wire region
inline constexpr uint64_t kMaxRoutineBytes = uint64_t{4} << 30;  // NAA budget
inline constexpr size_t kMaxMrspRegions = 255;                   // 8-bit MRSP count
inline constexpr size_t kNaaDefaultMaxRegions = 32;              // NaaServer default
inline constexpr uint64_t kMaxNaaAddress = (uint64_t{1} << 56) - 1;
inline constexpr uint32_t kDefaultTimeoutMs = 10000;
inline constexpr uint32_t kDeadlineGraceMs = 1000;
// Streams (docs/protocol.md 15).
inline constexpr uint64_t kMaxStreamChunkBytes = uint64_t{1} << 23;  // 8 MiB
inline constexpr uint32_t kMaxStreamWindow = 64;
inline constexpr uint32_t kMaxStreamWindowTotal = 62;  // per routine
inline constexpr size_t kMaxStreams = 32;              // 5-bit stream index

// Where each named declaration of the IR is and whether its name is usable
// for the clash analysis (valid, not a duplicate already reported).
// Index-aligned with the IR.
struct NameInfo {
  bool ok = false;
  Location at;
  std::string field;  // "services[0].routines[1].name"
};
struct RoutineNames {
  NameInfo name;
  std::vector<NameInfo> params, internals;
};
struct ServiceNames {
  NameInfo name;
  std::vector<RoutineNames> routines;
  std::vector<NameInfo> errors;  // aligned with Service::errors (all)
};
struct FileNames {
  std::vector<ServiceNames> services;
};

// Always returns an IR (possibly partial after errors) so that the clash
// analysis can run on whatever is valid.
IdlFile BuildIr(const YamlNode& root, std::string_view path, Sink& sink, FileNames* names);

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_INTERNAL_VALIDATE_H_
