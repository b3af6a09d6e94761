// Diagnostics of the IDL front-end, formatted like a compiler's:
//   file:line:col: error: field.path: message
#ifndef NAARPC_IDL_DIAGNOSTIC_H_
#define NAARPC_IDL_DIAGNOSTIC_H_

#include <string>

namespace naarpc::idl {

// A position in an IDL file: 1-based line and column (columns count
// characters, i.e. Unicode code points). 0 = unknown.
struct Location {
  int line = 0;
  int column = 0;

  friend bool operator==(const Location&, const Location&) = default;
};

struct Diagnostic {
  enum class Severity { kError, kWarning };

  Severity severity = Severity::kError;
  std::string file;
  Location location;
  std::string field;    // "services[0].routines[1].code"; may be empty
  std::string message;

  bool is_error() const { return severity == Severity::kError; }
  // "file:line:col: error: field: message" (line/col/field left out when
  // unknown or empty).
  std::string ToString() const;
};

}  // namespace naarpc::idl

#endif  // NAARPC_IDL_DIAGNOSTIC_H_
