// Collects the diagnostics of one IDL file, so one run reports all of them.
#ifndef NAARPC_IDL_INTERNAL_SINK_H_
#define NAARPC_IDL_INTERNAL_SINK_H_

#include <string>
#include <vector>

#include "idl/diagnostic.h"

namespace naarpc::idl::internal {

class Sink {
 public:
  explicit Sink(std::string file) : file_(std::move(file)) {}

  void Error(Location at, std::string field, std::string message);
  void Warning(Location at, std::string field, std::string message);

  int error_count() const { return errors_; }
  const std::string& file() const { return file_; }
  // Sorted by position (stable: same position keeps report order).
  std::vector<Diagnostic> Take();

 private:
  std::string file_;
  std::vector<Diagnostic> diagnostics_;
  int errors_ = 0;
};

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_INTERNAL_SINK_H_
