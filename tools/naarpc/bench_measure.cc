#include "tools/naarpc/bench_measure.h"

#include "bench/percentiles.h"

namespace naarpc::cli::bench_internal {

void Summarize(std::vector<double>& us, double seconds, uint64_t bytes_per_call, Point& p) {
  std::sort(us.begin(), us.end());
  p.calls = us.size();
  p.bytes_per_call = bytes_per_call;
  p.p50 = bench::Percentile(us, 50);
  p.p90 = bench::Percentile(us, 90);
  p.p99 = bench::Percentile(us, 99);
  p.max = us.back();
  p.calls_per_s = double(p.calls) / seconds;
  p.mb_per_s = p.calls_per_s * double(bytes_per_call) / 1e6;
}

}  // namespace naarpc::cli::bench_internal
