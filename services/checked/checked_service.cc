#include "services/checked/checked_service.h"

#include <cstdint>
#include <limits>

namespace naarpc::services::checked {

CheckedMathError CheckedMathServiceImpl::Divide(const NaaCall&, std::span<const int32_t> a,
                                                std::span<const int32_t> b,
                                                codegen::VarSpan<int32_t>& q) {
  if (a.size() != b.size()) return CheckedMathError::kLengthMismatch;
  for (size_t i = 0; i < a.size(); ++i) {
    if (b[i] == 0) return CheckedMathError::kDivisionByZero;
    if (a[i] == std::numeric_limits<int32_t>::min() && b[i] == -1) {
      return CheckedMathError::kOverflow;
    }
  }
  q.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) q.data()[i] = a[i] / b[i];
  return CheckedMathError::kOk;
}

CheckedMathError CheckedMathServiceImpl::Isqrt(const NaaCall&, std::span<const int64_t> x,
                                               codegen::VarSpan<int64_t>& root) {
  for (int64_t v : x) {
    if (v < 0) return CheckedMathError::kNegativeInput;
  }
  root.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    // Integer Newton iteration: floor(sqrt(v)) without floating point.
    const uint64_t v = static_cast<uint64_t>(x[i]);
    uint64_t r = v, prev = 0;
    if (v > 1) {
      r = v / 2 + 1;
      do {
        prev = r;
        r = (r + v / r) / 2;
      } while (r < prev);
      r = prev;
    }
    root.data()[i] = static_cast<int64_t>(r);
  }
  return CheckedMathError::kOk;
}

}  // namespace naarpc::services::checked
