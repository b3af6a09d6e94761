// EmuConnection: one RC queue pair of the emulated transport over a TCP
// stream (the model: emulated_transport.h). Its pieces, one file each:
//   connection.cc  the Connection calls: posting, polling, notification,
//                  disconnect, and the progress loop they share;
//   queue_pair.cc  the queue pair: send queue (ordering, RNR go-back-N,
//                  acks, NAKs, local BIND_MW/LOCAL_INV), the responder
//                  (receives, rkey checks), the error state;
//   frame_io.cc    bytes: frames queued and written, read and parsed.
// Memory keys: memory_table.h; completions: completion_queue.h; the wire:
// frame.h. Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_CONNECTION_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_CONNECTION_H_

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/completion_queue.h"
#include "runtime/transport_impl/emulated/emulated_options.h"
#include "runtime/transport_impl/emulated/frame.h"
#include "runtime/transport_impl/emulated/memory_table.h"
#include "runtime/transport_impl/emulated/ring_queue.h"
#include "runtime/unique_fd.h"

namespace naarpc {
namespace emulated {

using Clock = std::chrono::steady_clock;
using internal::RingQueue;

// One entry of a gather list: registered bytes read when the frame is sent.
struct GatherPiece {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
};

// The gather lists of posted send WRs (SendRequest::sg_list) by id, so a WR
// stays trivially copyable: a WR and its injected copy share one, and a
// list released by every WR holding it is reused. Addresses are stable.
// Not thread-safe (the connection's op_mu_).
class GatherLists {
 public:
  // A new, empty list held once; its id in *id (never 0).
  std::vector<GatherPiece>& New(uint32_t* id) {
    if (free_.empty()) {
      slots_.emplace_back();
      free_.push_back(static_cast<uint32_t>(slots_.size()));
    }
    *id = free_.back();
    free_.pop_back();
    Slot& s = slots_[*id - 1];
    s.pieces.clear();
    s.refs = 1;
    return s.pieces;
  }
  // Id 0: no list.
  const std::vector<GatherPiece>* Get(uint32_t id) const {
    return id == 0 ? nullptr : &slots_[id - 1].pieces;
  }
  void Ref(uint32_t id) {
    if (id != 0) ++slots_[id - 1].refs;
  }
  void Release(uint32_t id) {
    if (id != 0 && --slots_[id - 1].refs == 0) free_.push_back(id);
  }

 private:
  struct Slot {
    std::vector<GatherPiece> pieces;
    uint32_t refs = 0;
  };
  std::deque<Slot> slots_;
  std::vector<uint32_t> free_;
};

// What a send WR puts on the wire. Fault injection may change it, move it
// to the next WR (kSwapWithNext) or send a copy (kDuplicate).
struct WireMessage {
  WorkOpcode opcode = WorkOpcode::kSend;  // kRdmaWrite for a lost WRITE_WITH_IMM
  bool solicited = false;
  bool delayed = false;
  uint32_t len = 0;
  const uint8_t* payload = nullptr;
  // A gather list (SendRequest::sg_list, GatherLists id; 0: none), checked
  // when posted and read when the frame goes out, as an HCA reads it by
  // DMA; `payload` is then null.
  uint32_t gather = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  uint32_t corrupt_off = UINT32_MAX;
  uint32_t stall_after = UINT32_MAX;  // kStallMidMessage: payload bytes sent
  Clock::time_point not_before{};
};

struct SendWr {
  uint64_t wr_id = 0;
  uint64_t seq = 0;         // of its request frame
  uint64_t post_index = 0;  // 1-based among posted WRs; a duplicate has its original's
  WorkOpcode opcode = WorkOpcode::kSend;  // as posted (its completion's)
  uint32_t len = 0;                       // as posted (its completion's byte_len)
  bool signaled = true;
  bool duplicate = false;  // injected copy: no completion, no send-queue slot
  bool held = false;       // kSwapWithNext: waits for the next posted WR
  WireMessage msg;
  CompletionStatus fail = CompletionStatus::kSuccess;  // local failure
  uint32_t vendor_err = 0;
  int rnr_retries = 0;
};
static_assert(std::is_trivially_copyable_v<SendWr>);

// A local work request (kBindWindow, kLocalInvalidate): no frame; it
// executes once every frame posted before it (seq <= after_seq) has been
// queued for the wire, and frames posted after it wait for it.
struct LocalWr {
  uint64_t wr_id = 0;
  uint64_t after_seq = 0;
  uint64_t post_index = 0;
  WorkOpcode opcode = WorkOpcode::kBindWindow;
  bool signaled = true;
  bool executed = false;
  CompletionStatus fail = CompletionStatus::kSuccess;
  uint32_t vendor_err = 0;
  std::string fail_reason;
  MrTable::WindowOp window;
};

struct RecvWr {
  uint64_t wr_id = 0;
  uint8_t* addr = nullptr;
  uint32_t len = 0;
  uint32_t mr_index = 0;  // 0: zero-length buffer
  uint32_t error = 0;     // EmulatedVendorError found at post time
};

// The send queue: posted, not yet completed work requests in posting order,
// and where the wire stands.
struct SendQueue {
  RingQueue<SendWr> wrs;
  RingQueue<LocalWr> local;  // posted local WRs not yet completed, in order
  uint64_t next_seq = 1;     // seq of the next request frame
  uint64_t next_tx_seq = 1;  // next WR to put into the output queue
  uint64_t posted = 0;       // send WRs posted (injected duplicates excluded)
  // kSwapWithNext: seq of the WR held until the next one is posted.
  std::optional<uint64_t> held_for_swap;
  // After an RNR NAK: no request leaves before this time.
  std::optional<Clock::time_point> rnr_pause_until;

  SendWr& At(uint64_t seq) { return wrs[seq - wrs.front().seq]; }
  const SendWr& At(uint64_t seq) const { return wrs[seq - wrs.front().seq]; }
};

// A frame queued for the socket (header, then payload straight from
// registered memory). Trivially copyable: queued, moved and dropped as
// plain bytes.
struct OutFrame {
  struct HeaderBytes {
    uint8_t bytes[kHdrSize];
  } hdr;
  const uint8_t* payload = nullptr;  // contiguous, or
  // a gather list: its SendWr's (GatherLists), which holds it until the
  // peer acks the frame, so after the frame is sent (HandleAck refuses an
  // ack beyond Output::sent_seq), or the connection breaks.
  const std::vector<GatherPiece>* pieces = nullptr;
  uint32_t len = 0;
  uint32_t corrupt_off = UINT32_MAX;
  uint8_t corrupt_byte = 0;
  bool is_ctrl = false;
  uint64_t seq = 0;  // request frames only
  uint64_t sent = 0;
  uint64_t stall_at = UINT64_MAX;  // kStallMidMessage: nothing is sent past it
  uint64_t total() const { return kHdrSize + len; }
};
static_assert(std::is_trivially_copyable_v<OutFrame>);

// Output: frames in order, and the cumulative ack owed to the peer.
struct Output {
  RingQueue<OutFrame> frames;
  // Requests processed (cumulative ack) and the value last queued in a CTRL.
  uint64_t acked = 0, sent_acked = 0;
  // A CTRL that leads the next write, ahead of every frame (none started,
  // no urgent frame queued: where QueueUrgent would put it), without a
  // queued frame; one written in part becomes one.
  bool lead_ctrl = false;
  OutFrame::HeaderBytes lead_ctrl_hdr;
  // Request frames 1..sent_seq are written whole to the socket in order:
  // the most a peer can have received, so acked.
  uint64_t sent_seq = 0;
  bool stalled = false;  // fault injection: a sender stopped mid-message
  bool reading_after_send_error = false;  // Push's ReadInput after EPIPE/ECONNRESET
  // A write of several pieces that fits (a 4 KiB payload, its header and a
  // leading CTRL) is copied here and goes out with one send(): on loopback
  // TCP, sendmsg with two iovecs costs more than the copy up to ~4 KiB.
  alignas(64) uint8_t coalesced[4096 + 2 * kHdrSize];
};
constexpr size_t kCoalesceBytes = sizeof(Output::coalesced);

// The most one receive puts into staging. Staging is where a frame's
// header lands, and with it the start of its payload, which is then copied
// to its target: a larger read would stage (and copy) more of a large
// payload, which the next receive takes straight into its target. 16 KiB
// holds a batch of small frames, and copying it costs about a receive.
constexpr size_t kStagingRead = 16 * 1024;
// Staging: one read, after a partial header kept from the last.
constexpr size_t kReadBufSize = 2 * kStagingRead;

// Input: the staging buffer [rpos, wpos) and the request being received.
struct Input {
  std::unique_ptr<uint8_t[]> buf{new uint8_t[kReadBufSize]};
  size_t rpos = 0, wpos = 0;
  int64_t rcvtimeo_ms = 0;  // current SO_RCVTIMEO (0 = none)
  uint64_t expected_seq = 1;
  bool rnr = false;  // NAKed expected_seq for RNR: drop until it is resent
  bool payload_pending = false;  // the request's payload is being received
  uint64_t payload_bytes_staged = 0;  // payload_bytes_staged()
  Header hdr;
  uint8_t* dest = nullptr;
  uint32_t mr_index = 0;
  uint32_t window_index = 0;  // the window the request lands through, 0: none
  uint32_t done = 0;
};

// EmulatedOptions::stall_timeout: when the message being received ends,
// unless its bytes progress; the message (seq; 0: a frame header read in
// part) and bytes it last saw.
struct StallWatch {
  std::optional<Clock::time_point> deadline;
  uint64_t seq = 0;
  uint32_t done = 0;
};

// notify_fd(): an epoll set of the socket and a timerfd, created on first
// use, with what the timer and the socket's EPOLLOUT are set to.
struct NotifyFd {
  UniqueFd ep, timer;
  std::optional<Clock::time_point> timer_at;
  bool out = false;
};

// The connection's operation lock: every Connection call takes it, nearly
// always uncontended (a connection is driven by one thread; Disconnect from
// another only try-locks). One compare-and-swap to lock and one exchange to
// unlock, instead of a pthread mutex's calls; a waiter sleeps in the kernel
// (atomic wait: a futex), as the owner may hold it through a blocking read.
// 0: free, 1: locked, 2: locked and maybe waited for (Drepper, "Futexes Are
// Tricky", mutex 2).
class OpMutex {
 public:
  void lock() {
    uint32_t s = 0;
    if (state_.compare_exchange_strong(s, 1, std::memory_order_acquire)) return;
    if (s != 2) s = state_.exchange(2, std::memory_order_acquire);
    while (s != 0) {
      state_.wait(2, std::memory_order_relaxed);
      s = state_.exchange(2, std::memory_order_acquire);
    }
  }
  bool try_lock() {
    uint32_t s = 0;
    return state_.compare_exchange_strong(s, 1, std::memory_order_acquire);
  }
  void unlock() {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  std::atomic<uint32_t> state_{0};
};

class EmuConnection final : public Connection {
 public:
  EmuConnection(UniqueFd fd, bool listener_side, std::string peer, EmulatedOptions opts);
  ~EmuConnection() override { Disconnect().IgnoreError(); }

  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
    return RegisterRegion(mrs_, addr, length, access);
  }
  Status PostSend(std::span<const SendRequest> requests) override;
  Status PostRecv(uint64_t wr_id, const LocalBuffer& buffer) override;
  Result<size_t> PollCompletions(std::span<Completion> out, Deadline deadline) override;
  Status RequestNotify(NotifyMode mode) override;
  Result<bool> WaitNotify(Deadline deadline) override;
  Result<size_t> TryPollCompletions(std::span<Completion> out) override;
  int notify_fd() override;
  Status Disconnect() override;
  std::string peer_name() const override { return peer_; }
  std::string down_reason() const override { return broken_ ? broken_reason_ : std::string(); }
  bool down_on_fault() const override { return broken_ && broken_on_fault_; }
  uint32_t send_queue_depth() const override { return opts_.send_queue_depth; }
  uint32_t max_send_sge() const override { return std::max<uint32_t>(opts_.max_send_sge, 1); }
  Result<std::unique_ptr<MemoryWindow>> AllocateWindow() override {
    return emulated::AllocateWindow(mrs_);
  }
  bool supports_memory_windows() const override { return true; }

  // Payload bytes received into staging with their frame's header and
  // copied from there to their target, rather than received straight into
  // it: under kStagingRead per frame. For tests and diagnostics; REQUIRES:
  // the thread that polls this connection.
  uint64_t payload_bytes_staged() const { return in_.payload_bytes_staged; }

 private:
  Status DownError() const {
    return DisconnectedError("emulated transport: connection to " + peer_ +
                             " is down: " + broken_reason_);
  }
  void CheckDisconnectRequest() {
    if (!broken_ && disconnect_requested_.load(std::memory_order_acquire)) {
      Break("disconnected locally", /*fault=*/false);
    }
  }

  // connection.cc
  Status CheckLocalRequest(const SendRequest& r) const;
  // Makes progress (pushes queued bytes, reads and applies frames, runs
  // timers) until `ready()` holds, the connection breaks, or the deadline
  // passes; sleeps in the kernel meanwhile. REQUIRES: op_mu_ held.
  template <typename Ready>
  void ProgressUntil(Deadline deadline, Ready&& ready);
  void UpdateNotifyFd();

  // queue_pair.cc
  void Complete(uint64_t wr_id, WorkOpcode op, CompletionStatus st, uint32_t len,
                uint32_t vendor, uint64_t post_index) {
    Completion c;
    c.wr_id = wr_id;
    c.opcode = op;
    c.status = st;
    c.byte_len = len;
    c.vendor_err = vendor;
    cq_.Add(c, post_index, /*solicited=*/false);
  }
  // The sender's completion of `w`; none for an injected duplicate.
  void CompleteSend(const SendWr& w, CompletionStatus st, uint32_t vendor) {
    if (w.duplicate) return;
    Complete(w.wr_id, w.opcode, st, w.len, vendor, w.post_index);
  }
  // Enters the error state. `fault`: not a close by either side
  // (down_on_fault()).
  void Break(std::string reason, bool fault = true);
  void ResponderFail(uint64_t seq, CompletionStatus st, uint32_t vendor, std::string reason);
  // Each of Pump, NextTimer, WatchStall and Push returns at once when it
  // has nothing to do (most calls: inline, no call made).
  void Pump() {
    if (sq_.next_tx_seq == sq_.next_seq && sq_.local.empty() && !sq_.rnr_pause_until) return;
    PumpQueued();
  }
  void PumpQueued();
  std::optional<Clock::time_point> NextTimer() const {
    if (sq_.next_tx_seq == sq_.next_seq && !stall_.deadline) return std::nullopt;
    return NextTimerQueued();
  }
  std::optional<Clock::time_point> NextTimerQueued() const;
  // (Re)arms the stall deadline of a message in progress (its payload, or a
  // frame header read in part); `looked`: a read
  // (or a poll for input) has just been made, so a deadline already passed
  // means its bytes really stopped: the connection breaks. Only then: a
  // receiver that was busy elsewhere reads what came first.
  void WatchStall(bool looked) {
    if (!in_.payload_pending && in_.wpos == in_.rpos && !stall_.deadline) return;
    WatchStallPending(looked);
  }
  void WatchStallPending(bool looked);
  void ProcessRequest(const Header& h);
  void FinishRequest();
  void HandleAck(uint64_t count);
  void HandleNak(const Header& h);
  void HandleRnrNak(const Header& h);
  bool InDestValid();
  // Executes the local WRs posted before frame `before_seq` (after_seq <
  // before_seq); false while one must wait (an invalidate whose window an
  // incoming write is landing through) or has failed.
  bool RunLocal(uint64_t before_seq) { return sq_.local.empty() || RunLocalWrs(before_seq); }
  bool RunLocalWrs(uint64_t before_seq);
  void ExecuteLocal(LocalWr& l);
  // Completes executed local WRs whose preceding frames have completed (in
  // send-queue order); a failed one then breaks the connection.
  void RetireLocal() {
    if (!sq_.local.empty()) RetireLocalWrs();
  }
  void RetireLocalWrs();

  // frame_io.cc
  void EnqueueFrame(const SendWr& w);
  void QueueUrgent(OutFrame&& f);
  void UpdateCtrl();
  bool Push() {
    if (out_.frames.empty() && !out_.lead_ctrl && out_.acked == out_.sent_acked) return false;
    return PushQueued();
  }
  bool PushQueued();
  ssize_t SendPieces(const iovec* iov, int n, size_t total);
  void ReadInput(bool block = false);
  bool BlockingRead(Deadline deadline);
  void ParseBuffered();
  void ProcessHeader(const Header& h);

  const UniqueFd fd_;
  const bool listener_side_;
  const std::string peer_;
  const EmulatedOptions opts_;
  const std::shared_ptr<MrTable> mrs_;
  MrTable::Cache mr_cache_;  // guarded by op_mu_

  OpMutex op_mu_;  // held by every operation; Disconnect only try-locks
  std::atomic<bool> disconnect_requested_{false};
  bool broken_ = false;
  bool broken_on_fault_ = false;
  std::string broken_reason_;

  CompletionQueue cq_;
  SendQueue sq_;
  GatherLists gathers_;
  RingQueue<RecvWr> rq_;
  Output out_;
  Input in_;
  StallWatch stall_;
  NotifyFd notify_;
};

}  // namespace emulated
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_CONNECTION_H_
