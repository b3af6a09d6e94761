#include "services/accumulator/accumulator_service.h"

namespace naarpc::services::accumulator {

AccumulatorError AccumulatorServiceImpl::Accumulate(const NaaCall& call,
                                                    std::span<const double> values,
                                                    double& total, uint64_t& count,
                                                    std::span<double> sum,
                                                    std::span<uint64_t> n) {
  // Internal regions live as long as the connection; start from zero.
  if (call.call_index == 0) {
    sum[0] = 0;
    n[0] = 0;
  }
  for (double v : values) sum[0] += v;
  n[0] += values.size();
  total = sum[0];
  count = n[0];
  return AccumulatorError::kOk;
}

}  // namespace naarpc::services::accumulator
