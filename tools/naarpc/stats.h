// `naarpc stats`: an NAA's metrics endpoint (ServerOptions::metrics_port,
// `naarpc serve --metrics-port`) as a table, one row per (side, routine,
// peer).
#ifndef NAARPC_TOOLS_NAARPC_STATS_H_
#define NAARPC_TOOLS_NAARPC_STATS_H_

#include <map>
#include <string>
#include <vector>

#include "naarpc/status.h"

namespace naarpc::cli {

struct StatsArgs {
  std::string target;  // HOST:PORT
  std::string side = "all";
  bool raw = false;
};

// One sample of the Prometheus text exposition format.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
// Parses the text format (comments and blank lines skipped, label values
// unescaped); kInvalidArgument naming the bad line and quoting its first 80
// bytes, those outside printable ASCII as \xNN.
Result<std::vector<MetricSample>> ParseExposition(const std::string& text);
// The table `naarpc stats` prints, from naarpc's metrics; `side`: host,
// naa or all.
std::string StatsTable(const std::vector<MetricSample>& samples, const std::string& side);

// Exit status as the other subcommands: 0, 1 not the metrics format or no
// naarpc_ family in it, 2 bad arguments, 4 unreachable or not an HTTP
// metrics endpoint.
int Stats(const StatsArgs& args);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_STATS_H_
