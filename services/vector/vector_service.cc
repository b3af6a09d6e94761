#include "services/vector/vector_service.h"

#include <stdexcept>

namespace naarpc::services::vector {

VectorArithError VectorArithServiceImpl::Add(const NaaCall&, std::span<const float> a,
                                             std::span<const float> b, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = a[i] + b[i];
  return VectorArithError::kOk;
}

VectorArithError VectorArithServiceImpl::Sub(const NaaCall&, std::span<const float> a,
                                             std::span<const float> b, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = a[i] - b[i];
  return VectorArithError::kOk;
}

VectorArithError VectorArithServiceImpl::Mul(const NaaCall&, std::span<const float> a,
                                             std::span<const float> b, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = a[i] * b[i];
  return VectorArithError::kOk;
}

VectorArithError VectorArithServiceImpl::Scale(const NaaCall&, double factor,
                                               codegen::VarSpan<double>& x) {
  for (double& v : x.data()) v *= factor;
  return VectorArithError::kOk;
}

VectorArithError VectorArithServiceImpl::Dot(const NaaCall&, std::span<const double> a,
                                             std::span<const double> b, double& result) {
  // No application error declared: unequal lengths are a kernel failure (0x05).
  if (a.size() != b.size()) throw std::invalid_argument("Dot: lengths differ");
  result = 0;
  for (size_t i = 0; i < a.size(); ++i) result += a[i] * b[i];
  return VectorArithError::kOk;
}

VectorArithError VectorArithServiceImpl::Prefix(const NaaCall&, std::span<const int64_t> x,
                                                codegen::VarSpan<int64_t>& sums) {
  sums.resize(x.size());
  int64_t s = 0;
  for (size_t i = 0; i < x.size(); ++i) sums.data()[i] = s += x[i];
  return VectorArithError::kOk;
}

}  // namespace naarpc::services::vector
