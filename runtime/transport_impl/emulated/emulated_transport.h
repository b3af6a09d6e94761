// The emulated transport: verbs semantics over TCP sockets, between threads,
// processes and hosts. The default when no RDMA device exists.
//
// Semantics are those of an RC queue pair (include/naarpc/transport.h), plus:
//
//  * Progress model. There is no background thread: like a NIC whose driver
//    is polled, a connection makes progress (receives, lands RDMA writes,
//    acknowledges, pushes queued bytes) only inside PollCompletions,
//    WaitNotify, TryPollCompletions and PostSend on it (PostRecv only
//    queues). A target therefore acknowledges work only while someone calls
//    one of these on it; the protocol engine always polls while it waits. Acknowledgements are
//    coalesced and leave with the next outgoing bytes or before
//    PollCompletions blocks. PostSend never blocks: what the socket does not
//    take is pushed by later PostSend/PollCompletions calls, which keep
//    reading meanwhile (two peers sending big data cannot deadlock). Idle
//    waiting sleeps in the kernel (in recv, or ppoll while bytes are queued
//    or a timer runs), never spins.
//  * Notification, as on an HCA: RequestNotify arms the CQ for one event;
//    solicited-only arming is raised only by the receive completion of a
//    SEND / WRITE_WITH_IMM that carried the solicited bit (a frame flag) or
//    by an error completion. A peer waiting in WaitNotify keeps receiving
//    and acknowledging meanwhile, so a message without the bit lands, is
//    acknowledged and queued, and wakes nobody, exactly as on real hardware.
//    The solicited bit on a plain RDMA WRITE is rejected at PostSend.
//  * RNR. A SEND or WRITE_WITH_IMM that the target processes while it has no
//    receive posted is NAKed; the sender resends it (and everything after it,
//    go-back-N) rnr_delay later, up to rnr_retry_count times, then fails it
//    with kRnrRetryExceeded. The sender's options apply. A receive posted
//    before the target next polls is therefore always in time.
//  * Error state. As on an RC QP, any error completion (other than kFlushed)
//    on either side moves the connection to the error state: the failed WR
//    completes with its error, all other outstanding work of both queues
//    completes with kFlushed, and the socket is shut down so the peer sees a
//    disconnect too. Then PollCompletions returns kDisconnected, and
//    PostSend/PostRecv fail with kDisconnected. A SEND larger than the
//    receive buffer: kLocalLengthError at the receiver, kRemoteInvalidRequest
//    at the sender (as on verbs). vendor_err holds an EmulatedVendorError.
//  * Zero-length RDMA writes are not checked against rkey/bounds (as in the
//    IB spec); zero-length SENDs still consume a receive.
//  * notify_fd() (event loops): an epoll set, made on first use, of the
//    socket (input, a disconnect, and room for output while bytes are
//    queued) and a timerfd (the next RNR resend or delayed work request, or
//    at once while a notification event is pending). Each call on the
//    connection updates it when it returns and, as the owner may then
//    sleep, first pushes queued bytes and acknowledgements. So the fd is
//    readable when a progress step (WaitNotify(now)) has work, and quiet
//    once one found none; a broken connection stays readable (its socket
//    is shut down).
//  * Disconnect() may be called from any thread (e.g. to stop a thread
//    blocked in PollCompletions, which then returns the flushed work and
//    kDisconnected). Everything else: one thread at a time per connection.
//    Listener::Shutdown() may be called from any thread.
//  * Accept fails (kProtocolError, kDeadlineExceeded after
//    handshake_timeout, ...) for a peer whose hello is wrong or missing; the
//    listener stays usable. kResourceExhausted: out of file descriptors.
//  * Memory of posted work must stay registered until its completion.
//  * Addresses: IPv4 and IPv6 (literals with or without brackets) and host
//    names. Connect tries each address of a name in turn; Listen binds the
//    first ("", "*" and "0.0.0.0": every IPv4 address; "::": every IPv6 one).
//
// Wire (TCP, TCP_NODELAY): a 16-byte hello each way (magic, version), then
// 32-byte frame headers, each followed by its payload. Payloads are sent
// straight from registered memory and received straight into the target
// memory once the header has been validated.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TRANSPORT_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TRANSPORT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "naarpc/transport.h"
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
  // past that it drops the oldest. 0 = unbounded.
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
  // breaks the connection, as an RC queue pair's transport timer would end
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
};

std::unique_ptr<Transport> NewEmulatedTransport(EmulatedOptions options = {});

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TRANSPORT_H_
