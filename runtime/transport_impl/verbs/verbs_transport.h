// The verbs transport: rdma-core (librdmacm + libibverbs), RC queue pairs
// over rdma_cm (RDMA_PS_TCP). The production path.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TRANSPORT_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TRANSPORT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "naarpc/transport.h"
#include "runtime/transport_impl/verbs/verbs_options.h"

namespace naarpc {

// The wait statistics of a verbs connection; nullopt for other transports.
// REQUIRES: no PollCompletions on `connection` runs concurrently.
std::optional<VerbsWaitStats> WaitStatsOf(const Connection& connection);

// True if at least one RDMA device is visible to libibverbs.
bool RdmaDeviceAvailable();

// Fails with kNotFound and a message suggesting the emulated transport when
// there is no RDMA device.
Result<std::unique_ptr<Transport>> NewVerbsTransport(VerbsOptions options = {});

// Names of the RDMA devices libibverbs lists, in its order.
std::vector<std::string> RdmaDeviceNames();

// The first local IPv4 address (not loopback) that rdma_cm can bind to an
// RDMA device (to `device` if not empty), e.g. the address of the netdev
// under a Soft-RoCE device. For tests and tools that need an address to
// listen/connect on.
Result<std::string> FindRdmaIpv4Address(const std::string& device = {});

// The RDMA device that owns the local IP address `address` (rdma_cm binds
// it there); kNotFound naming the address if no RDMA device has it.
// Public as naarpc/transport_factory.h's RdmaDeviceOfAddress.
Result<std::string> VerbsDeviceOfAddress(const std::string& address);

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TRANSPORT_H_
