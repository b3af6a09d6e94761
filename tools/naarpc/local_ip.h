// NAA_LOCAL_IP (the NAAICE reference library's "local side" address) for the
// CLI. The transports choose a connection's source address by route, so the
// address is mapped: on verbs to the RDMA device that owns it (connections
// then originate from that device, VerbsOptions::device); on the emulated
// transport it is only checked to be an address of this host.
#ifndef NAARPC_TOOLS_NAARPC_LOCAL_IP_H_
#define NAARPC_TOOLS_NAARPC_LOCAL_IP_H_

#include <string>

#include "naarpc/status.h"

namespace naarpc::cli {

// The transport and device to use given NAA_LOCAL_IP `local_ip` and the
// user's --transport / --device. Errors name the variable and the address:
// not an IP literal, not an address of this host, not an RDMA device's
// address (verbs), or in conflict with --device.
struct LocalSide {
  std::string transport;
  std::string device;
};
Result<LocalSide> ApplyLocalIp(const std::string& local_ip, const std::string& transport,
                               const std::string& device);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_LOCAL_IP_H_
