// `naarpc serve`: a software NAA for any IDL file with built-in test
// kernels (docs/cli.md).
#ifndef NAARPC_TOOLS_NAARPC_SERVE_COMMAND_H_
#define NAARPC_TOOLS_NAARPC_SERVE_COMMAND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "naarpc/discovery.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"

namespace naarpc::cli {

struct ServeArgs {
  std::string idl, service, address = "0.0.0.0", transport = "auto", device, dialect = "any",
                            port_file;
  int port = kDefaultNaaPort;
  std::vector<std::string> kernels;
  size_t max_regions = kDefaultNaaMaxRegions;
  size_t max_connections = ServerOptions{}.max_connections;
  std::string max_bytes_per_connection = "4G";
  int64_t idle_timeout_ms = 0;
  int metrics_port = -1;  // -1: no metrics endpoint
  std::string metrics_address = "0.0.0.0";
};

// Serves until SIGINT or SIGTERM; returns the exit status.
int Serve(const ServeArgs& a);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_SERVE_COMMAND_H_
