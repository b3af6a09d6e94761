// `naarpc bench`'s outputs beside its table: the CSV (--csv) and the PNG
// plots drawn by gnuplot (--plot).
#ifndef NAARPC_TOOLS_NAARPC_BENCH_REPORT_H_
#define NAARPC_TOOLS_NAARPC_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "naarpc/status.h"
#include "tools/naarpc/bench.h"
#include "tools/naarpc/bench_measure.h"

namespace naarpc::cli::bench_internal {

// "64", "4K", "1M", "1G" (exact binary units; table rows and messages).
std::string Human(uint64_t b);

// --csv and --plot of `options` (either may be empty: not written) for the
// routine `name`'s `points`; says where on stdout.
Status WriteReports(const BenchOptions& options, const std::string& name,
                    const std::vector<Point>& points);

}  // namespace naarpc::cli::bench_internal

#endif  // NAARPC_TOOLS_NAARPC_BENCH_REPORT_H_
