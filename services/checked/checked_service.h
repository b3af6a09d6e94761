// Software-NAA kernels of services/checked/checked.naa.yaml.
#ifndef NAARPC_SERVICES_CHECKED_CHECKED_SERVICE_H_
#define NAARPC_SERVICES_CHECKED_CHECKED_SERVICE_H_

#include "services/checked/checked.naa.h"

namespace naarpc::services::checked {

class CheckedMathServiceImpl final : public CheckedMathService {
 public:
  CheckedMathError Divide(const NaaCall& call, std::span<const int32_t> a,
                          std::span<const int32_t> b, codegen::VarSpan<int32_t>& q) override;
  CheckedMathError Isqrt(const NaaCall& call, std::span<const int64_t> x,
                         codegen::VarSpan<int64_t>& root) override;
};

}  // namespace naarpc::services::checked

#endif  // NAARPC_SERVICES_CHECKED_CHECKED_SERVICE_H_
