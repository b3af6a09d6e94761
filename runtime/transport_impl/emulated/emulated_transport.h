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
//  * Memory windows (type 2, AllocateWindow): bound by a BIND_MW and closed
//    by a LOCAL_INV work request, both local (no frame; posted alone they
//    send nothing, not even a coalesced ack): each executes in send-queue
//    order, once the frames posted before it are on their way, and frames
//    posted after it wait for it; its completion follows theirs.
//    A bind needs a free window and a range inside a region registered with
//    kAccessMwBind (and local write for remote write) and gives the window
//    the key PostSend chose (key byte + 1). Every incoming RDMA write with a
//    window key is checked for state, key byte, the window's range and
//    access: a write that fails is kRemoteAccessError at the writer
//    (vendor_err kEmuErrWindowInvalid / kEmuErrRemoteBounds) and breaks the
//    connection on both sides. A LOCAL_INV waits until a write landing
//    through its window has been placed whole. A refused bind or
//    invalidate completes with kLocalProtectionError (kEmuErrWindowBind) and
//    breaks the connection, as on an RC QP.
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
//    handshake_timeout, kUnavailable for one dropped past
//    max_pending_handshakes, ...) with "handshake with <peer> failed: ..."
//    for a peer whose hello is wrong or missing; the listener stays usable.
//    kResourceExhausted: out of file descriptors.
//  * Connection::down_on_fault(): a break other than a close by either side
//    (a protocol violation, a NAK, a stall mid-frame, a failed request).
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

#include <memory>

#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/emulated_options.h"
#include "runtime/transport_impl/emulated/fault_injection.h"

namespace naarpc {

std::unique_ptr<Transport> NewEmulatedTransport(EmulatedOptions options = {});

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TRANSPORT_H_
