// The transport interface: a narrow, verbs-shaped abstraction (after
// LevelDB's Env). Backends live in runtime/transport_impl/<backend>/:
//   verbs    — rdma-core (librdmacm + libibverbs), the production path;
//   emulated — verbs semantics over TCP for machines without RDMA hardware.
//
// Semantics follow ibverbs on an RC queue pair:
//  * Memory is registered per connection (one protection domain per
//    connection); a region has an lkey (local use) and an rkey (remote use).
//  * Work requests are identified by a caller-chosen 64-bit wr_id; every
//    completion carries the wr_id of its work request.
//  * Receives are consumed in the order they were posted, by SEND and by
//    RDMA_WRITE_WITH_IMM. A plain RDMA WRITE consumes no receive and produces
//    no completion on the target.
//  * An RDMA WRITE lands only if rkey, bounds and access flags are valid;
//    otherwise the writer gets kRemoteAccessError and target memory is
//    untouched.
//  * Work requests on one connection complete in order on the send side.
//  * One completion queue per connection, with completion notification as
//    in ibverbs (RequestNotify ~ ibv_req_notify_cq, WaitNotify ~
//    ibv_get_cq_event): an armed CQ raises one event for the next completion
//    added to it, or, armed solicited-only, for the next receive completion
//    of a message whose sender set the solicited-event bit
//    (SendRequest::solicited) or the next completion with an error.
//  * A connection is used by one thread at a time (not thread-safe), like a
//    QP driven by one thread. Connections are independent of each other.
#ifndef NAARPC_TRANSPORT_H_
#define NAARPC_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "naarpc/deadline.h"
#include "naarpc/status.h"

namespace naarpc {

// Access flags for RegisterMemory (values match IBV_ACCESS_*).
enum AccessFlags : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
  // Memory windows may be bound over the region (IBV_ACCESS_MW_BIND). A
  // region registered with it and without kAccessRemoteWrite is writable
  // by the peer only through a bound window.
  kAccessMwBind = 1u << 4,
};

// A registered memory region. Destroying it deregisters the memory.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual void* addr() const = 0;
  virtual size_t length() const = 0;
  virtual uint32_t lkey() const = 0;
  virtual uint32_t rkey() const = 0;
  // The address the peer uses for RDMA to this region (== addr() for verbs).
  uint64_t remote_addr() const { return reinterpret_cast<uintptr_t>(addr()); }
};

// A type-2 memory window (ibv_alloc_mw(IBV_MW_TYPE_2)) in the connection's
// protection domain: a remote key for a range of a region registered with
// kAccessMwBind, opened by a bind work request and closed by a local
// invalidate (docs/protocol.md 16.4). Each bind gives it a new rkey (the
// low 8 bits, the key byte, change; ibv_inc_rkey); a write with an older key,
// to an unbound window or outside its range is a remote access error at the
// writer. Destroying it deallocates the window (and closes it).
// REQUIRES: destroyed before the region it is bound over and while no work
// request naming it is outstanding.
class MemoryWindow {
 public:
  virtual ~MemoryWindow() = default;
  // The key of the last bind posted (what a peer must write with once that
  // bind has executed); the allocated key before the first bind.
  virtual uint32_t rkey() const = 0;
};

enum class WorkOpcode : uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaWriteWithImm,
  kRecv,              // completion of a posted receive consumed by a SEND
  kRecvRdmaWithImm,   // completion of a posted receive consumed by WRITE_WITH_IMM
  // Local operations on the send queue (no wire traffic), executed in
  // posting order: work requests posted before them have been sent, those
  // after them wait for them. A failure completes with
  // kLocalProtectionError and breaks the connection, as on an RC QP.
  kBindWindow,        // IBV_WR_BIND_MW: SendRequest::window over `local`
  kLocalInvalidate,   // IBV_WR_LOCAL_INV: closes the window whose key is `rkey`
};

enum class CompletionStatus : uint8_t {
  kSuccess,
  kLocalLengthError,     // receive buffer too small for a SEND
  kLocalProtectionError, // bad lkey / local bounds
  kRemoteAccessError,    // bad rkey, bounds or access flags at the target
  kRemoteInvalidRequest,
  kRnrRetryExceeded,     // no receive posted at the target, retries used up
  kRetryExceeded,        // transport retries exhausted (peer unreachable)
  kFlushed,              // connection broke; outstanding work flushed
  kGeneralError,
};

std::string_view CompletionStatusName(CompletionStatus s);

struct Completion {
  uint64_t wr_id = 0;
  WorkOpcode opcode = WorkOpcode::kSend;
  CompletionStatus status = CompletionStatus::kSuccess;
  uint32_t byte_len = 0;     // receives: bytes received / written with imm
  bool has_imm = false;
  uint32_t imm_data = 0;     // host byte order (the wire carries it big-endian)
  uint32_t vendor_err = 0;   // backend-specific detail, 0 if none
};

// A local buffer in a registered region.
struct LocalBuffer {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendRequest {
  uint64_t wr_id = 0;
  WorkOpcode opcode = WorkOpcode::kSend;  // kSend, kRdmaWrite, kRdmaWriteWithImm
  LocalBuffer local;         // what to send/write (length may be 0)
  // A gather list (ibv_send_wr's sg_list, docs/protocol.md 16): if not
  // empty, the payload is these buffers one after the other and `local` is
  // ignored; each is checked like `local` (lkey, bounds). At most
  // Connection::max_send_sge() entries (more: kInvalidArgument, nothing
  // posted; chain work requests instead). REQUIRES: valid until PostSend
  // returns; the memory it names until the request's completion.
  std::span<const LocalBuffer> sg_list;
  uint64_t remote_addr = 0;  // RDMA only
  uint32_t rkey = 0;         // RDMA only
  uint32_t imm_data = 0;     // kRdmaWriteWithImm only, host byte order
  bool signaled = true;      // false: no success completion (errors always)
  // The solicited-event bit (IBV_SEND_SOLICITED): SEND and
  // RDMA_WRITE_WITH_IMM only. The receive completion this message causes at
  // the target wakes a CQ armed solicited-only (NAAICE peers arm that way).
  bool solicited = false;
  // kBindWindow: the window, the region `local` lies in (local.lkey is
  // ignored) and the access it grants (kAccessRemoteWrite and/or
  // kAccessRemoteRead). PostSend gives the window its new rkey.
  // kLocalInvalidate: `rkey` is the window key to invalidate.
  MemoryWindow* window = nullptr;
  const MemoryRegion* window_region = nullptr;
  uint32_t window_access = 0;
};

// How RequestNotify arms the completion queue (ibv_req_notify_cq's
// solicited_only argument).
enum class NotifyMode : uint8_t {
  kNextCompletion,  // any new completion raises the event
  kSolicitedOnly,   // a solicited receive completion or an error completion
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Registers [addr, addr+length) with `access` (AccessFlags).
  // REQUIRES: the memory outlives the returned region.
  virtual Result<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length, uint32_t access) = 0;

  // Posts work requests in order. Returns an error only if the request could
  // not be posted (bad arguments, connection down); failures of posted work
  // arrive as completions.
  virtual Status PostSend(std::span<const SendRequest> requests) = 0;
  virtual Status PostRecv(uint64_t wr_id, const LocalBuffer& buffer) = 0;

  // Waits until at least one completion is available or `deadline` passes,
  // then returns up to out.size() completions (0 only on deadline).
  // Returns kDisconnected once the peer is gone and no completion is left.
  // Idle waiting blocks in the kernel; it never spins the CPU.
  virtual Result<size_t> PollCompletions(std::span<Completion> out,
                                         Deadline deadline) = 0;

  // Completion notification, for code that drives it by hand (peers that
  // behave like other NAAICE implementations, tests). PollCompletions does
  // its own arming (for every completion) and needs none of this; a
  // connection is driven either way, not both at once.
  //
  // Arms the CQ for one event, raised by the next completion added after
  // this call that `mode` selects; completions already queued raise none
  // (poll after arming). Arming again before the event keeps the wider mode.
  virtual Status RequestNotify(NotifyMode mode) = 0;
  // Waits until an event has been raised and consumes it (the CQ is then
  // unarmed). true: an event; false: the deadline passed first. The
  // completions stay queued: take them with TryPollCompletions.
  // kDisconnected once the connection is down and no event is pending.
  virtual Result<bool> WaitNotify(Deadline deadline) = 0;
  // Returns up to out.size() queued completions without waiting
  // (ibv_poll_cq). kDisconnected once the peer is gone and none is left.
  virtual Result<size_t> TryPollCompletions(std::span<Completion> out) = 0;

  // For event loops (epoll, poll): a descriptor that becomes readable when
  // the connection needs its owner: a notification armed by RequestNotify
  // may have been raised, the connection went down, or the backend needs a
  // progress step. The owner then calls WaitNotify(Deadline::Now()) (which
  // makes that progress and consumes a raised event) and TryPollCompletions.
  // Readiness may be spurious; it lasts until WaitNotify has run. Sleep on
  // it only after WaitNotify(Deadline::Now()) has returned false (the last
  // call before sleeping): that call sets what the descriptor waits for. A
  // connection that is down may stay readable: stop watching it once
  // WaitNotify or TryPollCompletions reports kDisconnected (the latter
  // still returns what is left first). Only watch it, never read it; it
  // stays valid for the connection's lifetime.
  // -1 if the backend has none (drive the connection with WaitNotify), or
  // if creating it failed: then errno says why (e.g. EMFILE).
  virtual int notify_fd() { return -1; }

  // Most gather entries one send work request may carry
  // (SendRequest::sg_list): the queue pair's max_send_sge on verbs.
  virtual uint32_t max_send_sge() const { return 1; }

  // Allocates a type-2 memory window in this connection's protection
  // domain. kFailedPrecondition if the device (or backend) has no type-2 windows
  // (supports_memory_windows()).
  virtual Result<std::unique_ptr<MemoryWindow>> AllocateWindow();
  // Whether AllocateWindow can succeed: the device reports type-2 windows
  // (verbs: IBV_DEVICE_MEM_WINDOW_TYPE_2A or _2B).
  virtual bool supports_memory_windows() const { return false; }

  // Largest payload the backend sends inline (0 if none); informational.
  virtual uint32_t max_inline_data() const { return 0; }

  // Send-queue depth: how many posted send work requests may be outstanding
  // (not yet freed by a polled completion, see send_queue_budget.h). 0 if
  // unknown; callers then signal every request they need to reclaim.
  virtual uint32_t send_queue_depth() const { return 0; }

  // Graceful disconnect (DREQ/DREP on verbs). Idempotent.
  virtual Status Disconnect() = 0;

  virtual std::string peer_name() const = 0;

  // Why the connection broke, once known (e.g. "RDMA device removed",
  // "peer disconnected"); empty while it is up or if the backend cannot tell.
  // Flushed completions name it in their errors.
  virtual std::string down_reason() const { return {}; }
  // Whether it broke on a fault (the peer broke the transport's protocol,
  // its bytes stopped mid-message, a request failed) rather than by a close
  // of either side; false while up, or if the backend cannot tell.
  virtual bool down_on_fault() const { return false; }

  // What the listener's accept hook returned for this connection
  // (Listener::SetAcceptHook); null once taken, or if none ran.
  std::shared_ptr<void> TakeAcceptContext() { return std::move(accept_context_); }
  void SetAcceptContext(std::shared_ptr<void> context) { accept_context_ = std::move(context); }

 private:
  std::shared_ptr<void> accept_context_;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Runs on each new connection before the peer learns that it was accepted
  // (the peer cannot send yet): the place to register memory and post the
  // receives the peer's first messages need, so that none of them meets a
  // missing receive (an RNR NAK and its wait, on verbs). What it returns
  // stays with the connection (Connection::TakeAcceptContext); an error
  // refuses the connection, and Accept goes on with the next one. Called
  // from Accept. Returns false if the backend cannot run it (the caller
  // then prepares each connection after Accept). REQUIRES: before the
  // first Accept.
  using AcceptHook = std::function<Result<std::shared_ptr<void>>(Connection&)>;
  virtual bool SetAcceptHook(AcceptHook hook) {
    (void)hook;
    return false;
  }
  // Waits for the next incoming connection.
  virtual Result<std::unique_ptr<Connection>> Accept(Deadline deadline) = 0;
  // The bound port (useful when listening on port 0).
  virtual uint16_t port() const = 0;
  // Makes a blocked Accept return kCancelled-like kUnavailable promptly.
  // Safe to call from another thread.
  virtual void Shutdown() = 0;
};

// How Connect treats a peer that refuses the connection.
struct ConnectOptions {
  // true: retry while the peer refuses (an NAA still starting up), within the
  // deadline and the transport's connect_retries. false: the first refusal
  // is the answer (kUnavailable), for a caller with somewhere else to go (a
  // channel of several NAAs), where waiting on a dead NAA would spend the
  // call's deadline.
  bool retry_refused = true;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  Result<std::unique_ptr<Connection>> Connect(const std::string& host, uint16_t port,
                                              Deadline deadline) {
    return Connect(host, port, deadline, ConnectOptions{});
  }
  virtual Result<std::unique_ptr<Connection>> Connect(const std::string& host,
                                                      uint16_t port,
                                                      Deadline deadline,
                                                      const ConnectOptions& options) = 0;
  virtual Result<std::unique_ptr<Listener>> Listen(const std::string& host,
                                                   uint16_t port) = 0;
  // A transport of this kind, with this one's options, whose connections
  // originate from `local_address`: an IP address of this host (NAA_LOCAL_IP,
  // as the NAAICE reference library binds its side to it; on verbs, of an
  // RDMA device). Errors name the address. Default: kFailedPrecondition.
  virtual Result<std::unique_ptr<Transport>> WithLocalAddress(
      const std::string& local_address) const;
};

// Default port of the NAAICE reference library.
inline constexpr uint16_t kDefaultPort = 12345;

// "host:port" as users write it: an IPv6 literal in brackets ("[::1]:7"),
// also when `host` already has them.
std::string HostPort(std::string_view host, uint16_t port);

}  // namespace naarpc

#endif  // NAARPC_TRANSPORT_H_
