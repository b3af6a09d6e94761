// The verbs transport: rdma-core (librdmacm + libibverbs), RC queue pairs
// over rdma_cm (RDMA_PS_TCP). The production path.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TRANSPORT_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TRANSPORT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/transport.h"

namespace naarpc {

struct VerbsOptions {
  // The RDMA device to use (e.g. "mlx5_0", "rxe0"); empty = the device the
  // address routes to. When set, listening on "any" binds to the device's
  // first IPv4 address, connections originate from it, and an address served
  // by another device is refused with a message naming both.
  std::string device;
  // Busy-poll the CQ for up to this long before sleeping on the completion
  // channel (bounded spin for latency; 0 = always event-driven). Only spins
  // while work is outstanding on the connection (a posted receive counts, so
  // an idle connection spins this long per wait: 0.1% of a CPU for the NAA's
  // 200 ms stop checks); reads the clock once per 32 polls (SpinBudget), as
  // clock reads are slow in some VMs. 200 us: on Soft-RoCE 50 us let more
  // 64 B calls fall asleep (p99 ~180-240 us against ~130-170 us at 200 us).
  std::chrono::microseconds poll_spin{200};
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_inline_data = 64;
  // Connect retries when the server is not yet listening (REJECTED).
  int connect_retries = 20;
  std::chrono::milliseconds connect_retry_delay{100};
  // IB-encoded RNR NAK timer this side asks a sender to wait when no receive
  // is posted (12 = 0.64 ms, 18 = 5.12 ms, 0 = 655 ms); applied after
  // establishment. Only the MRSP request can meet a missing receive (the NAA
  // posts it right after accepting); 18 gives a slow NAA ~30 ms (6 retries).
  uint8_t min_rnr_timer = 18;
};

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

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TRANSPORT_H_
