// Options and vendor error codes of the emulated transport
// (emulated_transport.h describes its model).
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_OPTIONS_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/transport_impl/emulated/fault_injection.h"

namespace naarpc {

struct EmulatedOptions {
  // RNR: a SEND / WRITE_WITH_IMM that finds no posted receive is retried
  // this many times, `rnr_delay` after each RNR NAK, then fails with
  // kRnrRetryExceeded. A negative count retries forever (ibverbs'
  // rnr_retry = 7).
  int rnr_retry_count = 6;
  std::chrono::microseconds rnr_delay{1000};
  // Connect retries when the server refuses (not listening yet), like the
  // verbs backend; bounded by the Connect deadline as well.
  int connect_retries = 20;
  std::chrono::milliseconds connect_retry_delay{100};
  // Time a peer has to complete the hello exchange after the TCP accept.
  // Accept runs every exchange in progress at once (one slow or hostile
  // peer never delays another) and keeps at most max_pending_handshakes;
  // past that it drops the oldest, which Accept reports (an error naming the
  // last peer dropped and the count). 0 = unbounded.
  std::chrono::milliseconds handshake_timeout{5000};
  size_t max_pending_handshakes = 64;
  // Send-queue depth (like verbs' max_send_wr; Connection::send_queue_depth):
  // PostSend fails with kResourceExhausted when more requests would be
  // outstanding, a request being freed once the completion of it or of a
  // later one has been polled. 0 = unbounded.
  uint32_t send_queue_depth = 64;
  // Gather entries per send work request (verbs' max_send_sge;
  // Connection::max_send_sge): a longer SendRequest::sg_list is refused.
  uint32_t max_send_sge = 16;
  // Receive-queue depth (verbs' max_recv_wr): PostRecv fails with
  // kResourceExhausted while this many receives are posted and not yet
  // consumed by a message. 0 = unbounded.
  uint32_t recv_queue_depth = 64;
  // A message (SEND or RDMA write) whose bytes stop arriving for this long
  // (in its payload or its frame header) breaks the connection, as an RC queue pair's transport timer would end
  // a stalled transfer: a peer that announces a large write and goes silent
  // does not hold the connection (and the NAA memory behind it). 0 = never.
  std::chrono::milliseconds stall_timeout{10'000};
  // Local address connections leave from (bound before connecting), as
  // NAA_LOCAL_IP selects the device on verbs; empty = the route's. E.g. a
  // second peer on one machine: "127.0.0.2".
  std::string source_address;
  // Optional fault injection (tests only); shared by all connections.
  std::shared_ptr<FaultInjector> faults;
};

// Completion::vendor_err values of the emulated transport.
enum EmulatedVendorError : uint32_t {
  kEmuErrNone = 0,
  kEmuErrBadRkey = 1,             // unknown or deregistered rkey
  kEmuErrRemoteBounds = 2,        // write outside the target region
  kEmuErrNoRemoteWrite = 3,       // region lacks kAccessRemoteWrite
  kEmuErrRegionGone = 4,          // region deregistered while data landed
  kEmuErrBadLkey = 5,             // unknown lkey or local bounds
  kEmuErrNoLocalWrite = 6,        // receive buffer lacks kAccessLocalWrite
  kEmuErrRecvTooSmall = 7,        // SEND larger than the receive buffer
  kEmuErrNoReceive = 8,           // RNR (no receive posted in time)
  kEmuErrRecvBufferInvalid = 9,   // the consumed receive had a bad buffer
  kEmuErrWindowInvalid = 10,      // window not bound, invalidated, older key, deallocated
  kEmuErrWindowBind = 11,         // BIND_MW / LOCAL_INV refused (state, range, access)
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_OPTIONS_H_
