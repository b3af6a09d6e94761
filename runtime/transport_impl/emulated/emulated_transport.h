// The emulated transport: verbs semantics over TCP sockets, between threads,
// processes and hosts. The default when no RDMA device exists.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TRANSPORT_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TRANSPORT_H_

#include <memory>

#include "runtime/transport.h"
#include "runtime/transport_impl/emulated/fault_injection.h"

namespace naarpc {

struct EmulatedOptions {
  // RNR: a SEND / WRITE_WITH_IMM that finds no posted receive is retried
  // this many times, `rnr_delay` apart, then fails with kRnrRetryExceeded.
  int rnr_retry_count = 6;
  std::chrono::microseconds rnr_delay{1000};
  // Optional fault injection (tests only); shared by all connections.
  std::shared_ptr<FaultInjector> faults;
};

std::unique_ptr<Transport> NewEmulatedTransport(EmulatedOptions options = {});

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TRANSPORT_H_
