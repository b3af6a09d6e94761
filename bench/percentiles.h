// The percentiles of a benchmark's samples, shared by call_bench
// (call_bench_measure.cc) and `naarpc bench` (tools/naarpc/bench_measure.cc).
#ifndef NAARPC_BENCH_PERCENTILES_H_
#define NAARPC_BENCH_PERCENTILES_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace naarpc::bench {

// The `q`-th percentile (0..100) of `sorted` (ascending, not empty): the
// element at floor(n * q / 100), the last one for q = 100.
inline double Percentile(const std::vector<double>& sorted, size_t q) {
  return sorted[std::min(sorted.size() - 1, sorted.size() * q / 100)];
}

}  // namespace naarpc::bench

#endif  // NAARPC_BENCH_PERCENTILES_H_
