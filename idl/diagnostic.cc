#include "idl/diagnostic.h"

namespace naarpc::idl {

std::string Diagnostic::ToString() const {
  std::string out = file;
  if (location.line > 0) {
    out += ":" + std::to_string(location.line);
    if (location.column > 0) out += ":" + std::to_string(location.column);
  }
  out += severity == Severity::kError ? ": error: " : ": warning: ";
  if (!field.empty()) out += field + ": ";
  out += message;
  return out;
}

}  // namespace naarpc::idl
