// Software-NAA kernel of services/accumulator/accumulator.naa.yaml.
#ifndef NAARPC_SERVICES_ACCUMULATOR_ACCUMULATOR_SERVICE_H_
#define NAARPC_SERVICES_ACCUMULATOR_ACCUMULATOR_SERVICE_H_

#include "services/accumulator/accumulator.naa.h"

namespace naarpc::services::accumulator {

class AccumulatorServiceImpl final : public AccumulatorService {
 public:
  AccumulatorError Accumulate(const NaaCall& call, std::span<const double> values,
                              double& total, uint64_t& count, std::span<double> sum,
                              std::span<uint64_t> n) override;
};

}  // namespace naarpc::services::accumulator

#endif  // NAARPC_SERVICES_ACCUMULATOR_ACCUMULATOR_SERVICE_H_
