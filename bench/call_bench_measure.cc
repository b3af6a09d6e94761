#include "bench/call_bench_measure.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>

#include "bench/percentiles.h"

namespace naarpc::bench::call_bench {

Stats Summarize(std::vector<double>& us) {
  Stats s;
  std::sort(us.begin(), us.end());
  s.iterations = us.size();
  s.median_us = Percentile(us, 50);
  s.min_us = us.front();
  s.p10_us = Percentile(us, 10);
  s.p90_us = Percentile(us, 90);
  s.p99_us = Percentile(us, 99);
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / double(us.size());
  return s;
}

size_t IterationsFor(const Options& o, size_t bytes) {
  if (o.iterations > 0) return o.iterations;
  if (bytes <= 4096) return 4000;
  if (bytes <= (1 << 20)) return 400;
  return 12;
}

bool CallTimer::HasRdtscp() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000001, &a, &b, &c, &d)) return false;
  return (d & (1u << 27)) != 0;
#else
  return false;
#endif
}

}  // namespace naarpc::bench::call_bench
