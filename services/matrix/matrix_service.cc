#include "services/matrix/matrix_service.h"

#include <algorithm>

namespace naarpc::services::matrix {

MatrixError MatrixServiceImpl::Multiply(const NaaCall&, std::span<const float> a,
                                        std::span<const float> b, std::span<float> c) {
  std::fill(c.begin(), c.end(), 0.0f);
  for (size_t i = 0; i < kDim; ++i) {
    for (size_t k = 0; k < kDim; ++k) {
      const float aik = a[i * kDim + k];
      for (size_t j = 0; j < kDim; ++j) c[i * kDim + j] += aik * b[k * kDim + j];
    }
  }
  return MatrixError::kOk;
}

}  // namespace naarpc::services::matrix
