#include "idl/internal/sink.h"

#include <algorithm>
#include <utility>

namespace naarpc::idl::internal {

// Enough for any real file; a pathological one (a megabyte of errors) stops
// growing here instead of printing hundreds of thousands of lines.
constexpr size_t kMaxDiagnostics = 500;

void Sink::Error(Location at, std::string field, std::string message) {
  ++errors_;
  if (diagnostics_.size() >= kMaxDiagnostics) return;
  diagnostics_.push_back({Diagnostic::Severity::kError, file_, at, std::move(field),
                          std::move(message)});
}

void Sink::Warning(Location at, std::string field, std::string message) {
  if (diagnostics_.size() >= kMaxDiagnostics) return;
  diagnostics_.push_back({Diagnostic::Severity::kWarning, file_, at, std::move(field),
                          std::move(message)});
}

std::vector<Diagnostic> Sink::Take() {
  std::stable_sort(diagnostics_.begin(), diagnostics_.end(),
                   [](const Diagnostic& a, const Diagnostic& b) {
                     if (a.location.line != b.location.line) {
                       return a.location.line < b.location.line;
                     }
                     return a.location.column < b.location.column;
                   });
  const size_t shown = static_cast<size_t>(
      std::count_if(diagnostics_.begin(), diagnostics_.end(),
                    [](const Diagnostic& d) { return d.is_error(); }));
  if (static_cast<size_t>(errors_) > shown) {
    diagnostics_.push_back({Diagnostic::Severity::kError, file_, {}, "",
                            std::to_string(errors_ - shown) +
                                " more error(s) not shown"});
  }
  return std::move(diagnostics_);
}

}  // namespace naarpc::idl::internal
