// Software-NAA kernel of services/matrix/matrix.naa.yaml.
#ifndef NAARPC_SERVICES_MATRIX_MATRIX_SERVICE_H_
#define NAARPC_SERVICES_MATRIX_MATRIX_SERVICE_H_

#include "services/matrix/matrix.naa.h"

namespace naarpc::services::matrix {

inline constexpr size_t kDim = 64;

class MatrixServiceImpl final : public MatrixService {
 public:
  MatrixError Multiply(const NaaCall& call, std::span<const float> a, std::span<const float> b,
                       std::span<float> c) override;
};

}  // namespace naarpc::services::matrix

#endif  // NAARPC_SERVICES_MATRIX_MATRIX_SERVICE_H_
