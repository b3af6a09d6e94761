// Software-NAA kernels of services/vector/vector.naa.yaml.
#ifndef NAARPC_SERVICES_VECTOR_VECTOR_SERVICE_H_
#define NAARPC_SERVICES_VECTOR_VECTOR_SERVICE_H_

#include "services/vector/vector.naa.h"

namespace naarpc::services::vector {

class VectorArithServiceImpl final : public VectorArithService {
 public:
  VectorArithError Add(const NaaCall& call, std::span<const float> a,
                       std::span<const float> b, std::span<float> out) override;
  VectorArithError Sub(const NaaCall& call, std::span<const float> a,
                       std::span<const float> b, std::span<float> out) override;
  VectorArithError Mul(const NaaCall& call, std::span<const float> a,
                       std::span<const float> b, std::span<float> out) override;
  VectorArithError Scale(const NaaCall& call, double factor,
                         codegen::VarSpan<double>& x) override;
  VectorArithError Dot(const NaaCall& call, std::span<const double> a,
                       std::span<const double> b, double& result) override;
  VectorArithError Prefix(const NaaCall& call, std::span<const int64_t> x,
                          codegen::VarSpan<int64_t>& sums) override;
};

}  // namespace naarpc::services::vector

#endif  // NAARPC_SERVICES_VECTOR_VECTOR_SERVICE_H_
