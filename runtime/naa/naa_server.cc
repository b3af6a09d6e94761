#include "naarpc/naa_server.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "naarpc/log.h"
#include "naarpc/metrics_server.h"
#include "runtime/cycle_clock.h"
#include "runtime/engine/endpoint.h"
#include "runtime/engine/event_engine.h"
#include "runtime/engine/send_queue_budget.h"
#include "runtime/naa/admission.h"
#include "runtime/wire/metadata.h"
#include "runtime/wire/mrsp.h"
#include "runtime/spin_budget.h"
#include "runtime/engine/state_machine.h"
#include "runtime/engine/stream_rules.h"
#include "runtime/engine/wire_ops.h"
#include "runtime/wire/stream_frame.h"

namespace naarpc {

using internal::Buffer;
using internal::MakeWrId;
using internal::WrIdKind;
using internal::WrKind;
using internal::WriteSlice;

namespace {

// A host calling in a loop sends its next call about one round trip after
// our reply. The thread that served a call waits for it on the connection
// itself (a blocking wait, no spin) up to this long, when the engine lets it
// (another thread keeps serving every other connection, EventEngine::
// TryLinger), instead of going back to the epoll set at once: that saves
// the re-arming and the wake-up of every call in a loop.
constexpr auto kLingerAfterCall = std::chrono::milliseconds(50);

// A streaming kernel's waits for the host wake this often to notice
// Shutdown() and a kernel timeout; no busy polling.
constexpr auto kStopCheckInterval = std::chrono::milliseconds(200);

// One MRSP entry as the host sent it, and where it lives on the NAA.
struct WireEntry {
  RegionRequest request;
  size_t group = 0;     // index into groups_
  uint64_t offset = 0;  // within the group's memory
};

// A logical region on the NAA: one parameter (possibly split by the host
// into several wire regions), the metadata region, or an internal region.
// A parameter entry of exactly the split size (1 GiB) followed by an entry
// with the same rkey and flags that starts where it ends continues the same
// parameter (docs/protocol.md, "Parameters larger than 1 GiB").
struct Group {
  Buffer memory;
  std::unique_ptr<MemoryRegion> mr;  // not for internal regions
  uint64_t local_addr = 0;           // mr's address and lkey, cached for the
  uint32_t lkey = 0;                 // reply path (no virtual calls per call)
  uint8_t flags = 0;
  size_t first_entry = 0;
  size_t entry_count = 0;
  uint32_t chunk = 0;  // streams: the chunk size (docs/protocol.md 15.1)
};

// Runs a kernel that has a time limit on a thread of its own, long-lived
// and reused across calls and connections (KernelWorkers): a thread per
// call would cost a thread start on every call. A kernel that overruns its limit is abandoned: the thread finishes it on
// its own and then exits; whatever the job holds (the connection's memory)
// lives until then.
class KernelWorker {
 public:
  KernelWorker() : state_(std::make_shared<State>()), thread_([s = state_] { Loop(*s); }) {}
  ~KernelWorker() {
    if (!thread_.joinable()) return;  // abandoned
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stop = true;
    }
    state_->cv.notify_all();
    thread_.join();
  }

  // Runs `job` on the worker; nullopt if it is still running after
  // `timeout` (the caller then abandons the worker).
  // REQUIRES: not abandoned; no job running.
  std::optional<uint8_t> Run(std::function<uint8_t()> job, std::chrono::milliseconds timeout) {
    State& st = *state_;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      st.job = std::move(job);
      st.busy = true;
      st.finished.store(false, std::memory_order_relaxed);
    }
    st.cv.notify_all();
    // Short kernels: a bounded spin saves this thread a sleep and wake-up.
    SpinBudget spin(kResultSpin, Deadline::Infinite(), /*yield_cpu=*/true);
    while (!st.finished.load(std::memory_order_acquire) && spin.Continue()) {
    }
    std::unique_lock<std::mutex> lock(st.mu);
    if (!st.cv.wait_for(lock, timeout, [&st] { return !st.busy; })) return std::nullopt;
    return st.result;
  }

  // Leaves a running kernel to finish by itself; the thread exits after it.
  void Abandon() {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stop = true;
    }
    state_->cv.notify_all();
    thread_.detach();
  }

 private:
  // Shared with the thread, which may outlive the worker once abandoned.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::function<uint8_t()> job;  // guarded by mu
    bool busy = false;             // guarded by mu
    bool stop = false;             // guarded by mu
    uint8_t result = 0;            // guarded by mu
    std::atomic<bool> finished{false};
  };

  static void Loop(State& st) {
    std::unique_lock<std::mutex> lock(st.mu);
    for (;;) {
      st.cv.wait(lock, [&st] { return st.stop || (st.busy && st.job); });
      if (!st.busy || !st.job) return;  // stopped while idle
      auto job = std::move(st.job);
      st.job = nullptr;
      lock.unlock();
      const uint8_t r = job();
      job = nullptr;  // releases what the job held, outside the lock
      lock.lock();
      st.result = r;
      st.busy = false;
      st.finished.store(true, std::memory_order_release);
      st.cv.notify_all();
      if (st.stop) return;
    }
  }

  static constexpr auto kResultSpin = std::chrono::microseconds(50);
  std::shared_ptr<State> state_;
  std::thread thread_;  // last: starts after state_
};

// Idle kernel workers, shared by a server's connections: there are as many
// as kernels with a time limit run at once (plus abandoned ones finishing),
// not one per connection.
class KernelWorkers {
 public:
  std::unique_ptr<KernelWorker> Take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto w = std::move(idle_.back());
        idle_.pop_back();
        return w;
      }
    }
    return std::make_unique<KernelWorker>();
  }
  void Give(std::unique_ptr<KernelWorker> worker) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(worker));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<KernelWorker>> idle_;  // guarded by mu_
};

// Kernels running on kernel workers, abandoned ones included. Shared: an
// abandoned kernel may outlive the server.
struct RunningKernels {
  std::mutex mu;
  std::condition_variable cv;
  size_t count = 0;  // guarded by mu
  void Add() {
    std::lock_guard<std::mutex> lock(mu);
    ++count;
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu);
    --count;
    cv.notify_all();
  }
  // Waits until none runs or `grace` passes; returns how many still run.
  size_t WaitNone(std::chrono::milliseconds grace) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, grace, [this] { return count == 0; });
    return count;
  }
};

// What one server's connections share: options, the memory budget, the
// log and its rate limit, running kernels. Shared with the connections: an
// abandoned kernel keeps its connection, and so this, alive.
internal::Admission::Limits AdmissionLimits(const ServerOptions& o) {
  internal::Admission::Limits l;
  l.max_connections = o.max_connections;
  l.max_connections_per_peer =
      o.max_connections_per_peer == 0 ? o.max_connections : o.max_connections_per_peer;
  l.max_handshakes_per_peer = o.max_handshakes_per_peer;
  l.max_bytes = o.max_total_bytes;
  l.max_bytes_per_peer = o.max_bytes_per_peer == 0 ? o.max_total_bytes : o.max_bytes_per_peer;
  return l;
}

class ServerShared {
 public:
  explicit ServerShared(const ServerOptions& options)
      : options(options), admission(AdmissionLimits(options)) {}
  const ServerOptions options;
  RunningKernels running_kernels;
  KernelWorkers kernel_workers;
  // Connection slots and ServerOptions::max_total_bytes, per peer.
  internal::Admission admission;

  // At most ServerOptions::max_log_lines_per_second lines; what is dropped
  // is counted and reported with the next line that passes.
  void Log(const std::string& line) {
    if (!LogEnabled(LogComponent::kServer, LogLevel::kWarn)) return;
    std::string out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Deadline::Clock::now();
      if (now - window_start_ >= std::chrono::seconds(1)) {
        window_start_ = now;
        lines_in_window_ = 0;
      }
      if (options.max_log_lines_per_second > 0 &&
          lines_in_window_ >= options.max_log_lines_per_second) {
        ++suppressed_;
        return;
      }
      ++lines_in_window_;
      if (suppressed_ > 0) {
        out = "naarpc NAA: (" + std::to_string(suppressed_) + " log lines suppressed)\n";
        suppressed_ = 0;
      }
    }
    out += line;
    if (options.log) {
      options.log(out);
    } else {
      naarpc::Log(LogComponent::kServer, LogLevel::kWarn, out);
    }
  }

 private:
  std::mutex mu_;
  Deadline::Clock::time_point window_start_{};  // guarded by mu_
  size_t lines_in_window_ = 0;                  // guarded by mu_
  uint64_t suppressed_ = 0;                     // guarded by mu_
};

// Serves one connection: MRSP, then calls until the peer leaves. Driven by
// the server's EventEngine: each Drive() takes what has completed, answers
// the MRSP, runs the calls that came (on the engine thread that took the
// event) and arms the connection's notification again.
// Owned by a shared_ptr: a kernel that overran its time limit keeps the
// connection's memory alive (not its connection) until it returns.
class ConnectionServer final : public internal::Driven,
                               public std::enable_shared_from_this<ConnectionServer> {
 public:
  ConnectionServer(std::unique_ptr<Connection> conn, NaaHandler& handler,
                   std::shared_ptr<ServerShared> shared, const std::atomic<bool>& stopping,
                   internal::EventEngine& engine)
      : conn_(std::move(conn)),
        peer_(conn_->peer_name()),
        peer_host_(internal::PeerHost(peer_)),
        handler_(handler),
        shared_(std::move(shared)),
        options_(shared_->options),
        stopping_(stopping),
        engine_(engine) {}
  // The connection's slot and memory go back to the admission (by now
  // its buffers are freed, or are being: members end after this).
  ~ConnectionServer() {
    if (admission_id_ != 0) shared_->admission.Release(admission_id_);
  }

  // REQUIRES: before Begin(); `id` from Admission::Admit.
  void SetAdmission(uint64_t id) { admission_id_ = id; }
  // Called once, when the connection has ended (Ended()).
  void SetOnEnd(std::function<void()> on_end) { on_end_ = std::move(on_end); }
  // Before the engine drives it: the MRSP buffers, the receive for the
  // host's request.
  Status Begin();
  // Ends a connection that Begin() or the engine refused.
  void Abort(Status why);

  int fd() const override { return fd_; }
  std::optional<Deadline> Drive() override;
  // Disconnects the connection now (NaaServer::Shutdown): a call in flight
  // fails at the host at once. Safe from any thread.
  void Interrupt() override;
  void Ended() override;
  // A newcomer needed this idle session's slot or memory
  // (docs/server.md, "What one peer can hold"): logged and closed.
  void Reclaim();

 private:
  enum class Phase : uint8_t { kMrsp, kServing, kEnded };
  // Takes every completion there is, answers the MRSP, runs the calls that
  // came; returns once the connection is armed to wait (or has ended:
  // phase_ kEnded).
  Status Progress();
  Status OnMrspRequest(const Completion& c);
  Status ServeQueuedCalls();
  // After the connection ended (Drive, Abort): logs why, ends the host's
  // access (disconnect, registrations).
  void Finish(const Status& why);
  Status SendMrspError(MrspErrorCode code);
  Status PostDataRecv();
  // Handles one data-phase completion: queues a call's immediate, frees send
  // slots. Sets `host_left` on a flush.
  Status OnDataCompletion(const Completion& c, bool& host_left);
  // Polls until the pending signaled reply has completed (send_queue_budget.h).
  Status ReclaimSendQueue();
  Status HandleCall(uint32_t imm);
  uint8_t ResolveReturnRegions(std::vector<size_t>& returns);
  void BuildCallTemplate(const std::vector<size_t>& returns);
  uint8_t RunKernel(NaaCall& call);
  // After each Drive() while serving: logs a connection idle past
  // ServerOptions::idle_log_after, once per idle spell; true once it has
  // been idle past ServerOptions::idle_timeout (then it is closed). Reads
  // the clock only if one of them is set.
  bool NoteIdle();
  // When NoteIdle has something to do next; infinite if nothing.
  Deadline IdleDeadline() const;
  Status Reply(uint8_t status, const std::vector<size_t>& returns);
  void Log(const std::string& line) const;

  // ---- Streams (docs/protocol.md 15) ----
  class StreamImpl;
  friend class StreamImpl;
  // Polls once (up to `deadline`) and applies what came: chunks and
  // credits of the call's streams, our own write completions. An error
  // sticks in stream_error_. REQUIRES: pump_mu_ held.
  Status PumpStreams(Deadline deadline);
  // Applies one stream frame of the running call. REQUIRES: pump_mu_ held
  // or no kernel running.
  Status ApplyFrame(uint32_t imm, uint32_t byte_len);
  // Waits (pumping) until `ready()` or an error; bounded by the idle
  // timeout between frames. REQUIRES: pump_mu_ held.
  template <typename Ready>
  Status PumpUntil(std::unique_lock<std::mutex>& lock, Ready&& ready, const char* waiting_for);
  // Posts one stream frame; pumps first while the send queue is full.
  // REQUIRES: pump_mu_ held.
  Status PostStreamFrame(std::unique_lock<std::mutex>& lock, LocalBuffer local,
                         uint64_t remote_addr, uint32_t rkey, uint32_t imm);
  // After the kernel: drains unread input, ends open outputs, waits for
  // every credit (docs/protocol.md 15.4). A connection that ends
  // mid-stream (e.g. the host found one of our frames out of sequence and
  // failed its call) is logged with where each stream stood.
  Status FinishStreams();
  // "; stream 0: 3 chunk(s) received, ...; stream 1: ..." for the log.
  // REQUIRES: pump_mu_ held.
  std::string StreamTotalsLocked() const;
  Status FinishStreamsLocked(std::unique_lock<std::mutex>& lock);

  std::mutex conn_mu_;  // Interrupt() vs. the end of Run()
  std::unique_ptr<Connection> conn_;
  const std::string peer_;
  const std::string peer_host_;  // the statistics' peer
  NaaHandler& handler_;
  // The call's statistics and interceptors (ServerOptions::stats,
  // interceptors), when either is on. EndObserved runs once per call,
  // whichever way HandleCall returns.
  void BeginObserved(uint8_t function_code);
  Status StartInterceptors(uint8_t function_code);
  void EndObserved(uint8_t naa_status, uint64_t bytes_out);
  bool observed_ = false;
  uint8_t observed_code_ = 0;
  uint64_t observed_bytes_in_ = 0;
  int64_t observed_start_ns_ = 0;  // CycleClock
  RoutineStats* observed_stats_ = nullptr;
  // The last function code's statistics (a session calls one routine).
  int stats_code_ = -1;
  RoutineStats* stats_ = nullptr;
  std::string routine_name_;  // of observed_code_
  const InterceptorChain::List* interceptors_ = nullptr;
  size_t interceptors_accepted_ = 0;
  const std::shared_ptr<ServerShared> shared_;  // outlives the server if a kernel does
  const ServerOptions& options_;                // shared_->options
  const std::atomic<bool>& stopping_;
  internal::EventEngine& engine_;
  std::function<void()> on_end_;
  int fd_ = -1;                // conn_->notify_fd()
  Phase phase_ = Phase::kMrsp;
  Deadline mrsp_deadline_ = Deadline::Infinite();
  uint64_t admission_id_ = 0;  // its slot and bytes in ServerShared::admission
  StateMachine sm_{Role::kNaa};
  Dialect dialect_ = Dialect::kSpec;
  std::vector<WireEntry> entries_;       // MRSP order
  std::vector<Group> groups_;
  std::vector<size_t> param_index_;      // groups_ index of each parameter
  std::vector<size_t> internal_index_;   // groups_ index of each internal region
  size_t metadata_index_ = SIZE_MAX;     // groups_ index (spec dialect)
  // MRSP messages, receives for the host's writes, the send budget: what
  // the host's side does alike (runtime/engine/endpoint.h).
  internal::Endpoint ep_;
  // What a kernel sees, rebuilt only when the return regions change; each
  // call starts from a copy (a kernel may change its view, e.g. reply_length).
  std::vector<NaaRegion> params_template_, call_params_;
  std::vector<std::span<std::byte>> internal_template_, call_internal_;
  uint64_t returns_version_ = 0;         // bumped when returns_ is re-resolved
  uint64_t template_version_ = UINT64_MAX;
  std::vector<WriteSlice> slices_;
  // Calls that arrived while polling for something else, oldest first (at
  // most one per posted receive).
  std::array<uint32_t, internal::kDataRecvDepth> queued_calls_{};
  size_t queued_head_ = 0, queued_count_ = 0;
  NaaCall call_;                         // outlives a runaway kernel
  // Per-call scratch, reused (no allocation on the call path once warm).
  std::vector<size_t> returns_;
  // Spec dialect: the metadata bytes the cached returns_ were resolved from.
  std::vector<uint8_t> resolved_metadata_;
  // Per-call memory windows negotiated (docs/protocol.md 4.5): each call's
  // metadata carries the window key of each return, in returns_ order.
  bool windows_ = false;
  std::vector<uint32_t> window_rkeys_;
  std::vector<size_t> window_returns_;  // scratch
  bool resolved_reference_ = false;
  bool kernel_overran_ = false;  // its kernel worker abandoned; the connection ends
  // Idle logging and closing (ServerOptions::idle_log_after, idle_timeout).
  uint64_t calls_at_idle_check_ = UINT64_MAX;
  Deadline::Clock::time_point idle_since_{};
  bool idle_logged_ = false;
  uint64_t calls_ = 0;
  // Streams: per connection, in stream order; the kernel may pump from its
  // worker thread while the connection thread waits for it.
  std::vector<size_t> stream_index_;   // groups_ index of each stream
  std::vector<std::unique_ptr<StreamImpl>> streams_;
  std::vector<NaaStream*> stream_ptrs_;
  std::mutex pump_mu_;                 // conn_ while a streaming kernel runs
  Status stream_error_;                // sticky within a call
  bool streams_abandoned_ = false;     // the kernel overran: hands off conn_
  // Frames that came behind a call's request while waiting for it; applied
  // once the call starts.
  std::vector<std::pair<uint32_t, uint32_t>> early_frames_;  // immediate, byte count
};

// ---- Streams (docs/protocol.md 15) --------------------------------------------

class ConnectionServer::StreamImpl final : public NaaStream {
 public:
  StreamImpl(ConnectionServer& cs, uint8_t index, const Group& g, const RegionRequest& host)
      : cs_(cs),
        index_(index),
        input_((g.flags & kRegionFlagInput) != 0),
        chunk_(g.chunk),
        window_(static_cast<uint32_t>(g.memory.size() / g.chunk)),
        ring_(g.memory.data()),
        local_addr_(g.local_addr),
        lkey_(g.lkey),
        host_(host),
        lengths_(window_, 0),
        inbound_({"stream " + std::to_string(index), static_cast<uint32_t>(chunk_), window_}),
        outbound_({"stream " + std::to_string(index), static_cast<uint32_t>(chunk_), window_}) {}

  void Reset() {
    inbound_.Reset();
    outbound_.Reset();
    end_read_ = ended_ = holding_ = slot_open_ = false;
    stop_ = false;
    fill_ = 0;
  }

  bool is_input() const override { return input_; }
  size_t chunk_size() const override { return chunk_; }
  uint32_t window() const override { return window_; }
  bool ended() const override { return ended_; }

  Result<std::span<const std::byte>> Next() override {
    std::unique_lock<std::mutex> lock(cs_.pump_mu_);
    NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/true, "Next()"));
    if (holding_) NAARPC_RETURN_IF_ERROR(Release(lock));
    if (end_read_) {
      ended_ = true;
      return std::span<const std::byte>();
    }
    NAARPC_RETURN_IF_ERROR(
        cs_.PumpUntil(lock, [this] { return inbound_.received() > inbound_.credited(); },
                      "the host's next chunk"));
    const uint64_t k = inbound_.credited();  // the next chunk to consume
    const uint32_t len = lengths_[k % window_];
    holding_ = true;
    if (inbound_.ended() && k + 1 == inbound_.received()) end_read_ = true;
    if (end_read_ && len == 0) return ReleaseTheEnd(lock);
    return std::span<const std::byte>(ring_ + inbound_.SlotOffset(k), len);
  }

  Result<std::span<std::byte>> NextSlot() override {
    std::unique_lock<std::mutex> lock(cs_.pump_mu_);
    return NextSlotLocked(lock);
  }

  Status Commit(size_t bytes) override {
    std::unique_lock<std::mutex> lock(cs_.pump_mu_);
    return CommitLocked(lock, bytes);
  }

  Status Write(std::span<const std::byte> data) override {
    std::unique_lock<std::mutex> lock(cs_.pump_mu_);
    while (!data.empty()) {
      NAARPC_ASSIGN_OR_RETURN(std::span<std::byte> slot, NextSlotLocked(lock));
      const size_t n = std::min(data.size(), chunk_ - fill_);
      std::memcpy(slot.data() + fill_, data.data(), n);
      fill_ += n;
      data = data.subspan(n);
      if (fill_ == chunk_) NAARPC_RETURN_IF_ERROR(CommitLocked(lock, chunk_));
    }
    return Status::Ok();
  }

  Status Close() override {
    std::unique_lock<std::mutex> lock(cs_.pump_mu_);
    return CloseLocked(lock);
  }

 private:
  friend class ConnectionServer;

  // REQUIRES: pump_mu_ held.
  Status Usable(bool want_input, const char* op) const {
    if (cs_.streams_abandoned_) {
      return DeadlineExceededError("the call was abandoned (kernel timeout)");
    }
    NAARPC_RETURN_IF_ERROR(cs_.stream_error_);
    if (input_ != want_input) {
      return FailedPreconditionError(std::string(op) + " on an " +
                                     (input_ ? "input" : "output") + " stream");
    }
    return Status::Ok();
  }

  // An empty end chunk: hands its slot back at once; the stream has ended.
  Result<std::span<const std::byte>> ReleaseTheEnd(std::unique_lock<std::mutex>& lock) {
    NAARPC_RETURN_IF_ERROR(Release(lock));
    ended_ = true;
    return std::span<const std::byte>();
  }

  // Hands the held chunk's slot back: one credit.
  Status Release(std::unique_lock<std::mutex>& lock) {
    holding_ = false;
    return cs_.PostStreamFrame(lock, {local_addr_, 0, lkey_}, host_.addr, host_.rkey,
                               inbound_.TakeCredit(index_, stop_));
  }

  Result<std::span<std::byte>> NextSlotLocked(std::unique_lock<std::mutex>& lock) {
    NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/false, "NextSlot()"));
    if (ended_) return FailedPreconditionError("the output stream has ended");
    if (!slot_open_) {
      NAARPC_RETURN_IF_ERROR(cs_.PumpUntil(
          lock, [this] { return outbound_.CanSend(); }, "a credit from the host"));
      slot_open_ = true;
      fill_ = 0;
    }
    return std::span<std::byte>(ring_ + outbound_.NextSlotOffset(), chunk_);
  }

  Status CommitLocked(std::unique_lock<std::mutex>& lock, size_t bytes) {
    NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/false, "Commit()"));
    if (!slot_open_) return FailedPreconditionError("Commit() without NextSlot()");
    if (bytes > chunk_) {
      return InvalidArgumentError("Commit(" + std::to_string(bytes) + ") beyond the chunk size " +
                                  std::to_string(chunk_));
    }
    const uint64_t slot = outbound_.NextSlotOffset();
    // The receive for this chunk's credit goes up before the chunk.
    NAARPC_RETURN_IF_ERROR(cs_.PostDataRecv());
    // Counted as sent before it is posted: PostStreamFrame may pump, and a
    // credit for it cannot come earlier than its post anyway.
    const uint32_t imm = outbound_.TakeChunk(index_, static_cast<uint32_t>(bytes));
    slot_open_ = false;
    fill_ = 0;
    if (outbound_.ended()) ended_ = true;
    return cs_.PostStreamFrame(lock, {local_addr_ + slot, static_cast<uint32_t>(bytes), lkey_},
                               host_.addr + slot, host_.rkey, imm);
  }

  Status CloseLocked(std::unique_lock<std::mutex>& lock) {
    NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/false, "Close()"));
    if (ended_) return Status::Ok();
    const size_t rest = fill_;
    NAARPC_RETURN_IF_ERROR(NextSlotLocked(lock).status());
    return CommitLocked(lock, rest);  // < chunk: ends the stream
  }

  // A frame for this stream arrived (docs/protocol.md 15.3); `byte_len`:
  // its write's length.
  Status OnFrame(const StreamFrame& f, uint32_t byte_len) {
    const std::string which = "stream " + std::to_string(index_);
    if (f.credit) {
      if (input_) return ProtocolError("the host credited input " + which);
      return outbound_.OnCredit(f, byte_len);
    }
    if (!input_) return ProtocolError("the host wrote a chunk into output " + which);
    const uint64_t sequence = inbound_.received();
    NAARPC_ASSIGN_OR_RETURN(const uint32_t length, inbound_.OnChunk(f, byte_len));
    lengths_[sequence % window_] = length;
    return Status::Ok();
  }

  ConnectionServer& cs_;
  const uint8_t index_;
  const bool input_;
  const size_t chunk_;
  const uint32_t window_;
  std::byte* const ring_;
  const uint64_t local_addr_;
  const uint32_t lkey_;
  const RegionRequest host_;  // the host's ring
  std::vector<uint32_t> lengths_;  // input: length of the chunk in each slot
  internal::StreamInbound inbound_;    // input: the host's chunks
  internal::StreamOutbound outbound_;  // output: our chunks and their credits
  bool end_read_ = false;     // input: the chunk handed out is the end
  bool ended_ = false;
  bool holding_ = false;      // input: a chunk is handed out
  bool slot_open_ = false;    // output: NextSlot() handed out a slot
  bool stop_ = false;         // input: credits carry the stop bit
  size_t fill_ = 0;           // output: bytes Write() put in the open slot
};

Status ConnectionServer::PumpStreams(Deadline deadline) {
  std::array<Completion, 8> batch;
  Result<size_t> n = conn_->PollCompletions(batch, deadline);
  if (!n.ok()) return stream_error_ = n.status().WithContext("streaming");
  for (size_t i = 0; i < *n; ++i) {
    const Completion& c = batch[i];
    if (c.status != CompletionStatus::kSuccess) {
      return stream_error_ = internal::CompletionFailure(
                 c, WrIdKind(c.wr_id) == WrKind::kDataRecv ? "stream receive" : "stream write",
                 *conn_);
    }
    if (WrIdKind(c.wr_id) != WrKind::kDataRecv) {
      ep_.OnSendCompleted(c.wr_id);
      continue;
    }
    ep_.DataRecvConsumed();
    if (c.opcode != WorkOpcode::kRecvRdmaWithImm || !c.has_imm) {
      return stream_error_ = ProtocolError("expected a stream frame, got a SEND");
    }
    if (Status s = ApplyFrame(c.imm_data, c.byte_len); !s.ok()) return stream_error_ = s;
  }
  return Status::Ok();
}

Status ConnectionServer::ApplyFrame(uint32_t imm, uint32_t byte_len) {
  const std::optional<StreamFrame> f = DecodeStreamFrame(imm);
  if (!f || f->stream >= streams_.size()) {
    return ProtocolError("during a streaming call, immediate " + std::to_string(imm) +
                         " is not a frame of one of its " + std::to_string(streams_.size()) +
                         " streams");
  }
  NAARPC_RETURN_IF_ERROR(streams_[f->stream]->OnFrame(*f, byte_len));
  // A chunk consumed a receive posted for chunks: replace it (a credit's
  // receive was posted for it alone, before its chunk).
  return f->credit ? Status::Ok() : PostDataRecv();
}

template <typename Ready>
Status ConnectionServer::PumpUntil(std::unique_lock<std::mutex>& lock, Ready&& ready,
                                   const char* waiting_for) {
  const auto zero = std::chrono::milliseconds::zero();
  const Deadline idle = options_.idle_timeout > zero ? Deadline::After(options_.idle_timeout)
                                                     : Deadline::Infinite();
  while (!ready()) {
    if (streams_abandoned_) return DeadlineExceededError("the call was abandoned (kernel timeout)");
    NAARPC_RETURN_IF_ERROR(stream_error_);
    if (stopping_.load(std::memory_order_relaxed)) {
      return stream_error_ = UnavailableError("the NAA is shutting down");
    }
    if (idle.expired()) {
      return stream_error_ = DeadlineExceededError(
                 std::string("waiting for ") + waiting_for + ": nothing from the host for " +
                 std::to_string(options_.idle_timeout.count()) +
                 " ms (ServerOptions::idle_timeout)");
    }
    // Bounded waits: Shutdown and a kernel timeout get their turn.
    NAARPC_RETURN_IF_ERROR(
        PumpStreams(Deadline::Earlier(idle, Deadline::After(kStopCheckInterval))));
    lock.unlock();
    lock.lock();
  }
  return Status::Ok();
}

Status ConnectionServer::PostStreamFrame(std::unique_lock<std::mutex>& lock, LocalBuffer local,
                                         uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
  NAARPC_RETURN_IF_ERROR(stream_error_);
  NAARPC_RETURN_IF_ERROR(PumpUntil(
      lock, [this] { return !ep_.send_budget().NeedsReclaim(1); }, "a send-queue slot"));
  const WriteSlice slice{local, remote_addr, rkey};
  if (auto posted = ep_.PostWrites(std::span<const WriteSlice>(&slice, 1), imm); !posted.ok()) {
    return stream_error_ = posted.status();
  }
  return Status::Ok();
}

std::string ConnectionServer::StreamTotalsLocked() const {
  std::string totals;
  for (const auto& st : streams_) {
    totals += "; " + st->inbound_.name() + ": " +
              (st->input_ ? st->inbound_.Totals() : st->outbound_.Totals());
  }
  return totals;
}

Status ConnectionServer::FinishStreams() {
  std::unique_lock<std::mutex> lock(pump_mu_);
  Status s = FinishStreamsLocked(lock);
  // Other errors end the connection and are logged by Finish; a disconnect
  // is not, but one in the middle of a stream is worth a line.
  if (s.code() == StatusCode::kDisconnected) {
    Log("the connection ended mid-stream: " + s.message() + StreamTotalsLocked());
  }
  return s;
}

Status ConnectionServer::FinishStreamsLocked(std::unique_lock<std::mutex>& lock) {
  for (auto& st : streams_) {
    if (st->input_) {
      // Unread input: from now on every credit says stop, and what still
      // comes is credited unread (docs/protocol.md 15.4).
      st->stop_ = !st->inbound_.ended();
      for (;;) {
        if (st->holding_) {
          NAARPC_RETURN_IF_ERROR(st->Release(lock));
          continue;
        }
        if (st->inbound_.credited() < st->inbound_.received()) {
          st->holding_ = true;
          continue;
        }
        if (st->inbound_.ended()) break;
        NAARPC_RETURN_IF_ERROR(PumpUntil(
            lock, [&] { return st->inbound_.received() > st->inbound_.credited(); },
            "the rest of an input stream"));
      }
    } else {
      if (!st->ended_) NAARPC_RETURN_IF_ERROR(st->CloseLocked(lock));
      NAARPC_RETURN_IF_ERROR(PumpUntil(
          lock, [&] { return st->outbound_.all_consumed(); }, "the host's last credits"));
    }
  }
  return stream_error_;
}

void ConnectionServer::Log(const std::string& line) const {
  shared_->Log("naarpc NAA [" + peer_ + "]: " + line);
}

void ConnectionServer::Finish(const Status& why) {
  phase_ = Phase::kEnded;
  if (!why.ok() && why.code() != StatusCode::kDisconnected) {
    sm_.Fail();
    Log(why.ToString());
  }
  // A kernel that overran its limit is not waited for: it was abandoned and
  // holds this object (the regions' memory) until it returns; the host's
  // access ends here, with the connection and the registrations.
  conn_->Disconnect().IgnoreError();
  for (auto& g : groups_) g.mr.reset();
  ep_.ReleaseRegistrations();
}

void ConnectionServer::Ended() {
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    conn_.reset();
  }
  // Slot and memory are free before the server counts the connection
  // closed. Memory a kernel that overran its limit still uses goes back
  // when it returns (~ConnectionServer); until then only the slot is free.
  if (admission_id_ != 0) {
    if (kernel_overran_) {
      shared_->admission.Closed(admission_id_);
    } else {
      streams_.clear();
      stream_ptrs_.clear();
      params_template_.clear();
      call_params_.clear();
      internal_template_.clear();
      call_internal_.clear();
      groups_.clear();  // the regions' memory
      shared_->admission.Release(std::exchange(admission_id_, 0));
    }
  }
  if (auto on_end = std::exchange(on_end_, nullptr)) on_end();
}

void ConnectionServer::Abort(Status why) {
  Finish(why);
  Ended();
}

void ConnectionServer::Reclaim() {
  Log("reclaimed: an idle session of the peer holding the most, taken for a newcomer "
      "(the host reconnects on its next call)");
  Interrupt();
}

void ConnectionServer::Interrupt() {
  std::lock_guard<std::mutex> lock(conn_mu_);
  if (conn_) conn_->Disconnect().IgnoreError();
}

Status ConnectionServer::Begin() {
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kReady));
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kConnected));
  mrsp_deadline_ = Deadline::After(options_.mrsp_timeout);
  fd_ = conn_->notify_fd();
  if (fd_ < 0) {
    return FailedPreconditionError("the " + peer_ +
                              " connection has no notify_fd: the NAA's engine cannot drive it");
  }
  if (std::shared_ptr<void> prepared = conn_->TakeAcceptContext()) {
    // The listener's accept hook (NaaServer::Start) set it up and posted
    // the MRSP receive before the host could send.
    ep_ = std::move(*std::static_pointer_cast<internal::Endpoint>(prepared));
  } else {
    NAARPC_RETURN_IF_ERROR(ep_.SetUp(*conn_));
    NAARPC_RETURN_IF_ERROR(ep_.PostMrspReceive());
  }
  return sm_.Transition(CommState::kMrspReceiving);
}

std::optional<Deadline> ConnectionServer::Drive() {
  Status s = Progress();
  if (s.ok() && phase_ == Phase::kServing && NoteIdle()) phase_ = Phase::kEnded;
  if (!s.ok() || phase_ == Phase::kEnded) {
    Finish(s);
    return std::nullopt;
  }
  return phase_ == Phase::kMrsp ? mrsp_deadline_ : IdleDeadline();
}

Status ConnectionServer::Progress() {
  std::array<Completion, 8> batch;
  bool armed = false;
  bool down = false;                  // WaitNotify reported the connection down
  // kLingerAfterCall after the last call, on the coarse clock: a linger may
  // end a tick early, and the precise clock costs up to ~0.1 us per read
  // (VMs), twice per call in a loop.
  Deadline::Clock::time_point linger_until{};
  bool lingering = false;  // counted by the engine
  struct EndLinger {
    internal::EventEngine& engine;
    bool& lingering;
    ~EndLinger() {
      if (lingering) engine.EndLinger();
    }
  } end_linger{engine_, lingering};
  for (;;) {
    const bool wait = lingering && Deadline::CoarseNow() < linger_until;
    Result<size_t> n = wait ? conn_->PollCompletions(batch, Deadline::At(linger_until))
                            : conn_->TryPollCompletions(batch);
    if (!n.ok()) return n.status();  // kDisconnected: the host left
    for (size_t i = 0; i < *n; ++i) {
      if (phase_ == Phase::kMrsp) {
        NAARPC_RETURN_IF_ERROR(OnMrspRequest(batch[i]));
      } else {
        // The whole batch: a result write's completion after a call's must
        // not be lost (it frees send slots).
        bool host_left = false;
        NAARPC_RETURN_IF_ERROR(OnDataCompletion(batch[i], host_left));
        if (host_left) return DisconnectedError("the host left");
      }
      if (phase_ == Phase::kEnded) return Status::Ok();
    }
    if (queued_count_ > 0) {
      NAARPC_RETURN_IF_ERROR(ServeQueuedCalls());
      if (phase_ == Phase::kEnded) return Status::Ok();
      armed = false;  // the calls polled for themselves
      if (lingering || (lingering = engine_.TryLinger())) {
        linger_until = Deadline::CoarseNow() + kLingerAfterCall;
      }
      continue;
    }
    if (*n > 0) continue;
    if (phase_ == Phase::kMrsp && mrsp_deadline_.expired()) {
      return DeadlineExceededError(
          "no MRSP request within " + std::to_string(options_.mrsp_timeout.count()) +
          " ms of connecting (a NAAICE host sends it at once: the peer is not one, or is stuck)");
    }
    // Nothing left: arm, poll once more (a completion may have raced the
    // arming), then let the descriptor wait (transport.h, notify_fd).
    if (!armed) {
      NAARPC_RETURN_IF_ERROR(conn_->RequestNotify(NotifyMode::kNextCompletion));
      armed = true;
      continue;
    }
    Result<bool> event = conn_->WaitNotify(Deadline::Now());
    if (!event.ok()) {
      // Down: the loop above takes what is left (flushed work, handled as
      // any completion), then ends with the transport's status.
      if (down) return event.status();
      down = true;
      continue;
    }
    if (!*event) return Status::Ok();  // armed: the descriptor signals the next step
    armed = false;
  }
}

Status ConnectionServer::ServeQueuedCalls() {
  while (queued_count_ > 0) {
    const uint32_t imm = queued_calls_[queued_head_];
    queued_head_ = (queued_head_ + 1) % queued_calls_.size();
    --queued_count_;
    // Reclaimed while the call came: the connection is closing anyway.
    if (!shared_->admission.Busy(admission_id_)) {
      phase_ = Phase::kEnded;
      return Status::Ok();
    }
    engine_.BeforeBlocking();  // the kernel may take long: others are served meanwhile
    NAARPC_RETURN_IF_ERROR(HandleCall(imm));
    shared_->admission.Idle(admission_id_);
    // After a kernel timeout no later call may land in memory the kernel
    // still uses: the connection ends (docs/protocol.md 7.4).
    if (kernel_overran_) {
      phase_ = Phase::kEnded;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status ConnectionServer::OnMrspRequest(const Completion& c) {
  if (c.status != CompletionStatus::kSuccess) {
    return internal::CompletionFailure(c, "MRSP receive", *conn_);
  }
  if (c.wr_id != internal::Endpoint::MrspRecvId() || c.opcode != WorkOpcode::kRecv) {
    return ProtocolError("expected the MRSP request (a SEND) first");
  }
  const uint32_t len = c.byte_len;
  // Reserving may wait for reclaimed memory, registering takes time.
  engine_.BeforeBlocking();
  auto msg = ep_.ReceivedMrsp(len);
  if (!msg.ok()) return msg.status().WithContext("MRSP request from the host");
  const auto* req = std::get_if<AdvertisementRequestMessage>(&*msg);
  if (req == nullptr) {
    return ProtocolError("MRSP: expected an Advertisement+Request (0x01) from the host");
  }

  // Limits and NAA addresses (docs/protocol.md, "NAA limits").
  if (req->regions.size() > options_.max_regions) {
    Log("MRSP: " + std::to_string(req->regions.size()) + " regions requested, limit " +
        std::to_string(options_.max_regions));
    return SendMrspError(MrspErrorCode::kTooManyRegions);
  }
  uint64_t total = 0;
  size_t stream_count = 0;
  uint32_t windows = 0;
  for (const RegionRequest& r : req->regions) {
    total += r.size;
    if (r.flags & kRegionFlagStream) {
      // The address field carries the chunk size (docs/protocol.md 15.1).
      ++stream_count;
      windows += static_cast<uint32_t>(r.size / r.requested_naa_address);
      continue;
    }
    if (r.requested_naa_address != 0) {
      if (r.requested_naa_address >= options_.naa_memory_size) {
        Log("MRSP: NAA address " + std::to_string(r.requested_naa_address) + " out of bounds");
        return SendMrspError(MrspErrorCode::kInvalidAddress);
      }
      if (r.size > options_.naa_memory_size - r.requested_naa_address) {
        Log("MRSP: region at NAA address " + std::to_string(r.requested_naa_address) +
            " with " + std::to_string(r.size) + " bytes exceeds the NAA memory");
        return SendMrspError(MrspErrorCode::kNotEnoughMemory);
      }
    }
  }
  if (stream_count > kMaxStreams || windows > kMaxStreamWindowTotal) {
    Log("MRSP: " + std::to_string(stream_count) + " streams with windows adding up to " +
        std::to_string(windows) + " (limits " + std::to_string(kMaxStreams) + " and " +
        std::to_string(kMaxStreamWindowTotal) + ")");
    return SendMrspError(MrspErrorCode::kTooManyRegions);
  }
  if (total > options_.max_bytes_per_connection) {
    Log("MRSP: " + std::to_string(total) + " bytes requested, budget " +
        std::to_string(options_.max_bytes_per_connection));
    return SendMrspError(MrspErrorCode::kNotEnoughMemory);
  }
  // Short of memory, idle sessions of peers holding more are reclaimed and
  // their memory waited for (docs/server.md).
  uint64_t in_use = 0;
  if (Status reserved = shared_->admission.Reserve(admission_id_, total,
                                                   Deadline::After(options_.mrsp_timeout), in_use);
      !reserved.ok()) {
    Log("MRSP: " + std::to_string(total) + " bytes requested; the server's memory budget " +
        std::to_string(options_.max_total_bytes) + " has " + std::to_string(in_use) +
        " in use (" + reserved.message() + ")");
    return SendMrspError(MrspErrorCode::kNotEnoughMemory);
  }

  dialect_ = Dialect::kSpec;
  bool any_plain = false;  // an entry without the internal bit
  for (const RegionRequest& r : req->regions) {
    any_plain |= !(r.flags & kRegionFlagInternal);
    if (!(r.flags & kRegionFlagInternal) && (r.flags & (kRegionFlagInput | kRegionFlagOutput))) {
      dialect_ = Dialect::kReference;
    }
  }
  // A routine of streams only (docs/protocol.md 15): the spec dialect would
  // have sent its metadata region, so this is the reference dialect.
  if (!any_plain && stream_count != 0) dialect_ = Dialect::kReference;
  // Group the entries, then allocate and register one buffer per group.
  entries_.clear();
  groups_.clear();
  for (size_t i = 0; i < req->regions.size(); ++i) {
    const RegionRequest& r = req->regions[i];
    WireEntry e{r, 0, 0};
    if (r.flags & kRegionFlagStream) {
      // A stream's ring: its own group, advertised although it carries the
      // internal bit (docs/protocol.md 15.1).
      Group g;
      g.flags = r.flags;
      g.first_entry = i;
      g.entry_count = 1;
      g.chunk = static_cast<uint32_t>(r.requested_naa_address);
      e.group = groups_.size();
      stream_index_.push_back(groups_.size());
      groups_.push_back(std::move(g));
      entries_.push_back(e);
      continue;
    }
    const bool internal = r.flags & kRegionFlagInternal;
    const bool is_metadata = !internal && dialect_ == Dialect::kSpec && metadata_index_ == SIZE_MAX;
    if (!internal && !is_metadata && !groups_.empty() && i > 0) {
      const WireEntry& prev = entries_.back();
      const Group& g = groups_.back();
      if (!(g.flags & kRegionFlagInternal) && groups_.size() - 1 != metadata_index_ &&
          prev.request.size == options_.split_region_size &&
          prev.request.rkey == r.rkey && prev.request.flags == r.flags &&
          prev.request.addr + prev.request.size == r.addr) {
        e.group = groups_.size() - 1;
        e.offset = prev.offset + prev.request.size;
        groups_.back().entry_count++;
        entries_.push_back(e);
        continue;
      }
    }
    Group g;
    g.flags = r.flags;
    g.first_entry = i;
    g.entry_count = 1;
    e.group = groups_.size();
    if (is_metadata) metadata_index_ = groups_.size();
    if (internal) {
      internal_index_.push_back(groups_.size());
    } else if (!is_metadata) {
      param_index_.push_back(groups_.size());
    }
    groups_.push_back(std::move(g));
    entries_.push_back(e);
  }
  AdvertisementMessage adv;
  // Per-call windows: spec dialect, no streams (their rings keep
  // connection-long keys, docs/protocol.md 4.5).
  windows_ = (req->capabilities & kMrspCapMemoryWindows) && options_.memory_windows &&
             dialect_ == Dialect::kSpec && stream_index_.empty();
  if (windows_) adv.capabilities = kMrspCapMemoryWindows;
  for (Group& g : groups_) {
    uint64_t size = 0;
    for (size_t i = 0; i < g.entry_count; ++i) size += entries_[g.first_entry + i].request.size;
    auto mem = Buffer::Allocate(size);
    if (!mem.ok()) {
      Log("MRSP: " + mem.status().ToString());
      return SendMrspError(MrspErrorCode::kNotEnoughMemory);
    }
    g.memory = std::move(mem).value();
  }
  for (Group& g : groups_) {
    if ((g.flags & kRegionFlagInternal) && !(g.flags & kRegionFlagStream)) continue;
    NAARPC_ASSIGN_OR_RETURN(g.mr, conn_->RegisterMemory(g.memory.data(), g.memory.size(),
                                                        kAccessLocalWrite | kAccessRemoteWrite));
    g.local_addr = g.mr->remote_addr();
    g.lkey = g.mr->lkey();
  }
  for (const WireEntry& e : entries_) {
    const Group& g = groups_[e.group];
    if (g.mr) adv.regions.push_back({g.mr->remote_addr() + e.offset, g.mr->rkey(), e.request.size});
  }

  // The receives for the first calls are posted before the host learns our
  // regions, so its WRITE_WITH_IMM always finds one. One spare stays posted
  // while a call runs (see HandleCall).
  for (int i = 0; i < internal::kDataRecvDepth; ++i) NAARPC_RETURN_IF_ERROR(PostDataRecv());
  // Streams: the host's input chunks may follow its request at once, so
  // their receives stay up all the time (docs/protocol.md 15.3).
  for (size_t i = 0; i < stream_index_.size(); ++i) {
    const Group& g = groups_[stream_index_[i]];
    const RegionRequest& host = entries_[g.first_entry].request;
    streams_.push_back(std::make_unique<StreamImpl>(*this, static_cast<uint8_t>(i), g, host));
    stream_ptrs_.push_back(streams_.back().get());
    if (streams_.back()->is_input()) {
      for (uint32_t k = 0; k < streams_.back()->window(); ++k) {
        NAARPC_RETURN_IF_ERROR(PostDataRecv());
      }
    }
  }
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kMrspSending));
  NAARPC_RETURN_IF_ERROR(ep_.SendMrsp(MrspMessage(adv)));
  // A reply writes at most one request per parameter wire region. The MRSP
  // send is the first signaled request the budget tracks.
  uint32_t max_requests = 0;
  for (const WireEntry& e : entries_) max_requests += groups_[e.group].mr != nullptr;
  ep_.StartSendBudget(max_requests);
  ep_.send_budget().OnPosted(1, true, internal::Endpoint::MrspSendId());
  // The send completes when the host acknowledges it; a call may already be
  // on its way: completions of either kind are handled as data completions.
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kMrspDone));
  shared_->admission.HandshakeDone(admission_id_);
  phase_ = Phase::kServing;
  return Status::Ok();
}

Status ConnectionServer::SendMrspError(MrspErrorCode code) {
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kMrspSending));
  const uint64_t send_id = internal::Endpoint::MrspSendId(1);
  NAARPC_RETURN_IF_ERROR(ep_.SendMrsp(MrspMessage(ErrorMessage{static_cast<uint8_t>(code)}), 1));
  // Wait (bounded) until the host has the message, then disconnect.
  Status s = internal::PollUntil(*conn_, Deadline::After(options_.mrsp_timeout),
                                 "sending MRSP error", [&](const Completion& c, bool& done) {
                                   done = c.wr_id == send_id;
                                   return Status::Ok();
                                 });
  if (!s.ok() && s.code() != StatusCode::kDisconnected) Log(s.ToString());
  sm_.Fail();  // the connection ends here
  phase_ = Phase::kEnded;
  return Status::Ok();
}

Status ConnectionServer::PostDataRecv() { return ep_.PostDataRecv(); }

Status ConnectionServer::OnDataCompletion(const Completion& c, bool& host_left) {
  const WrKind kind = WrIdKind(c.wr_id);
  if (c.status != CompletionStatus::kSuccess) {
    if (c.status == CompletionStatus::kFlushed) {
      host_left = true;
      return Status::Ok();
    }
    return internal::CompletionFailure(
        c, kind == WrKind::kDataRecv ? "receiving a call" : "writing results back", *conn_);
  }
  if (kind != WrKind::kDataRecv) {
    // Our MRSP send or a result write.
    ep_.OnSendCompleted(c.wr_id);
    return Status::Ok();
  }
  ep_.DataRecvConsumed();
  if (c.opcode != WorkOpcode::kRecvRdmaWithImm || !c.has_imm) {
    return ProtocolError("expected a WRITE_WITH_IMM starting a call, got a SEND");
  }
  if (!streams_.empty() && queued_count_ > 0) {
    // A streaming call's request is waiting: what follows it is its frames
    // (docs/protocol.md 15.2).
    early_frames_.push_back({c.imm_data, c.byte_len});
    return Status::Ok();
  }
  if (queued_count_ == queued_calls_.size()) {
    // More calls than posted receives: cannot happen on a conforming transport.
    return ProtocolError("more calls arrived than receives were posted");
  }
  queued_calls_[(queued_head_ + queued_count_++) % queued_calls_.size()] = c.imm_data;
  return Status::Ok();
}

Status ConnectionServer::ReclaimSendQueue() {
  return internal::PollUntil(
      *conn_, Deadline::After(options_.mrsp_timeout), "waiting for a result write to complete",
      [&](const Completion& c, bool& done) -> Status {
        bool host_left = false;
        NAARPC_RETURN_IF_ERROR(OnDataCompletion(c, host_left));
        if (host_left) return DisconnectedError("the host left while results were written");
        done = !ep_.send_budget().signal_pending();
        return Status::Ok();
      });
}

bool ConnectionServer::NoteIdle() {
  const auto zero = std::chrono::milliseconds::zero();
  if (options_.idle_log_after <= zero && options_.idle_timeout <= zero) return false;
  const auto now = Deadline::Clock::now();
  if (calls_ != calls_at_idle_check_) {  // a new idle spell
    calls_at_idle_check_ = calls_;
    idle_since_ = now;
    idle_logged_ = false;
    return false;
  }
  const auto idle = now - idle_since_;
  const std::string since =
      calls_ == 0 ? std::string("the MRSP") : "call " + std::to_string(calls_);
  const auto ms = [](auto d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  if (options_.idle_timeout > zero && idle >= options_.idle_timeout) {
    Log("idle: no call for " + ms(idle) + " ms since " + since + "; closing the connection "
        "(ServerOptions::idle_timeout " + ms(options_.idle_timeout) + " ms)");
    return true;
  }
  if (options_.idle_log_after > zero && !idle_logged_ && idle >= options_.idle_log_after) {
    idle_logged_ = true;
    Log("idle: no call for " + ms(idle) + " ms since " + since +
        " (connection kept open; logged once per idle spell)");
  }
  return false;
}

Deadline ConnectionServer::IdleDeadline() const {
  const auto zero = std::chrono::milliseconds::zero();
  Deadline next = Deadline::Infinite();
  if (options_.idle_timeout > zero) next = Deadline::At(idle_since_ + options_.idle_timeout);
  if (options_.idle_log_after > zero && !idle_logged_) {
    next = Deadline::Earlier(next, Deadline::At(idle_since_ + options_.idle_log_after));
  }
  return next;
}

uint8_t ConnectionServer::ResolveReturnRegions(std::vector<size_t>& returns) {
  if (dialect_ == Dialect::kReference) {
    // Fixed by the MRSP flags: resolved once per connection.
    if (!resolved_reference_) {
      returns.clear();
      for (size_t p = 0; p < param_index_.size(); ++p) {
        if (groups_[param_index_[p]].flags & kRegionFlagOutput) returns.push_back(p);
      }
      resolved_reference_ = true;
      ++returns_version_;
    }
    return kNaaStatusSuccess;
  }
  // Spec dialect: the metadata region holds the host addresses of the
  // return regions (one per wire region of a split parameter).
  if (metadata_index_ == SIZE_MAX || (param_index_.empty() && stream_index_.empty())) {
    return kNaaStatusBadRegionLayout;
  }
  const Group& meta = groups_[metadata_index_];
  const auto* bytes = reinterpret_cast<const uint8_t*>(meta.memory.data());
  auto param_of = [&](uint64_t addr) -> size_t {
    for (size_t p = 0; p < param_index_.size(); ++p) {
      const Group& g = groups_[param_index_[p]];
      for (size_t i = 0; i < g.entry_count; ++i) {
        if (entries_[g.first_entry + i].request.addr == addr) return p;
      }
    }
    return SIZE_MAX;
  };
  if (windows_) {
    // The keys change every call: resolved every call; the kernel's view is
    // rebuilt only when the return regions change.
    if (!ResolveMetadataWindowReturns(std::span<const uint8_t>(bytes, meta.memory.size()), param_of,
                                      window_returns_, window_rkeys_)) {
      return kNaaStatusBadRegionLayout;
    }
    if (window_returns_ != returns) {
      returns = window_returns_;
      ++returns_version_;
    }
    return kNaaStatusSuccess;
  }
  // The host rewrites the same addresses every call: reuse the last answer.
  if (resolved_metadata_.size() == meta.memory.size() &&
      std::memcmp(resolved_metadata_.data(), bytes, meta.memory.size()) == 0) {
    return kNaaStatusSuccess;
  }
  resolved_metadata_.clear();
  ++returns_version_;
  if (!ResolveMetadataReturns(std::span<const uint8_t>(bytes, meta.memory.size()),
                              param_of, returns)) {
    returns.clear();
    // A routine that returns only streams sends an empty list (all zero).
    const bool empty_list =
        std::all_of(bytes, bytes + meta.memory.size(), [](uint8_t b) { return b == 0; });
    if (stream_index_.empty() || !empty_list) return kNaaStatusBadRegionLayout;
  }
  resolved_metadata_.assign(bytes, bytes + meta.memory.size());
  return kNaaStatusSuccess;
}

void ConnectionServer::BuildCallTemplate(const std::vector<size_t>& returns) {
  params_template_.clear();
  std::vector<uint8_t> is_return(param_index_.size(), 0);  // per parameter
  for (size_t p : returns) is_return[p] = 1;
  for (size_t p = 0; p < param_index_.size(); ++p) {
    Group& g = groups_[param_index_[p]];
    NaaRegion v;
    v.data = g.memory.span();
    v.flags = g.flags;
    v.is_output = is_return[p] != 0;
    v.is_input = dialect_ == Dialect::kSpec ? true : (g.flags & kRegionFlagInput) != 0;
    v.reply_length = g.memory.size();
    params_template_.push_back(v);
  }
  internal_template_.clear();
  for (size_t i : internal_index_) internal_template_.push_back(groups_[i].memory.span());
  call_params_.resize(params_template_.size());
  call_internal_.resize(internal_template_.size());
  template_version_ = returns_version_;
}

uint8_t ConnectionServer::RunKernel(NaaCall& call) {
  // `self` keeps the regions' memory alive if the kernel is abandoned.
  auto run = [this, self = shared_from_this(), &call]() -> uint8_t {
    try {
      return handler_.Handle(call);
    } catch (const std::exception& e) {
      Log("kernel for function " + std::to_string(call.function_code) + " threw: " + e.what());
    } catch (...) {
      Log("kernel for function " + std::to_string(call.function_code) + " threw");
    }
    return kNaaStatusKernelFailed;
  };
  const auto timeout = handler_.KernelTimeout(call.function_code);
  if (timeout <= std::chrono::milliseconds::zero()) return run();
  std::unique_ptr<KernelWorker> worker = shared_->kernel_workers.Take();
  shared_->running_kernels.Add();
  auto counted = [run = std::move(run), shared = shared_]() -> uint8_t {
    const uint8_t status = run();
    shared->running_kernels.Done();
    return status;
  };
  if (std::optional<uint8_t> status = worker->Run(std::move(counted), timeout)) {
    shared_->kernel_workers.Give(std::move(worker));
    return *status;
  }
  Log("kernel for function " + std::to_string(call.function_code) + " exceeded " +
      std::to_string(timeout.count()) + " ms; answering 0x02 and closing the connection "
      "(the kernel runs on with its own memory)");
  worker->Abandon();
  kernel_overran_ = true;
  {
    // A streaming kernel pumps the connection from its thread: take the
    // connection back (it waits at most one bounded poll).
    std::lock_guard<std::mutex> lock(pump_mu_);
    streams_abandoned_ = true;
  }
  return kNaaStatusKernelTimeout;
}

Status ConnectionServer::HandleCall(uint32_t imm) {
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kDataReceiving));
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kCalculating));
  std::vector<size_t>& returns = returns_;
  uint8_t status = kNaaStatusSuccess;
  for (auto& st : streams_) st->Reset();
  stream_error_ = Status::Ok();
  for (const auto& [imm, byte_len] : early_frames_) {
    if (stream_error_.ok()) stream_error_ = ApplyFrame(imm, byte_len);
  }
  early_frames_.clear();
  const std::optional<RequestImmediate> req = DecodeRequestImmediate(imm);
  BeginObserved(req ? req->function_code : static_cast<uint8_t>(imm & 0xff));
  // Ends the call's observation however this returns.
  struct EndObservation {
    ConnectionServer* self;
    const uint8_t* status;
    ~EndObservation() { self->EndObserved(*status, 0); }
  } end_observation{this, &status};
  if (!req) {
    status = kNaaStatusUnknownFunction;
  } else if (req->host_to_naa_bit != (dialect_ == Dialect::kReference)) {
    status = kNaaStatusBadRegionLayout;  // immediate of the other dialect
  } else if (options_.dialect.has_value() && *options_.dialect != dialect_) {
    status = kNaaStatusBadRegionLayout;
    Log("call of function " + std::to_string(req->function_code) + " refused: this NAA serves the " +
        std::string(DialectName(*options_.dialect)) + " dialect only (ServerOptions::dialect)");
  } else {
    status = ResolveReturnRegions(returns);
  }
  if (status == kNaaStatusSuccess) {
    if (template_version_ != returns_version_) BuildCallTemplate(returns);
    std::copy(params_template_.begin(), params_template_.end(), call_params_.begin());
    std::copy(internal_template_.begin(), internal_template_.end(), call_internal_.begin());
    // Every field, so nothing a kernel left in call_ reaches the next call.
    call_ = NaaCall{.function_code = req->function_code,
                    .dialect = dialect_,
                    .user_bits = req->user_bits,
                    .call_index = calls_,
                    .params = call_params_,
                    .internal = call_internal_,
                    .streams = stream_ptrs_,
                    .failure_detail = {}};
    if (observed_) {
      for (const NaaRegion& r : call_params_) {
        if (r.is_input) observed_bytes_in_ += r.data.size();
      }
    }
    if (Status rejected = StartInterceptors(req->function_code); !rejected.ok()) {
      status = rejected.wire_code().value_or(kNaaStatusKernelFailed);
      if (status == kNaaStatusSuccess) status = kNaaStatusKernelFailed;
      Log("call of function " + std::to_string(req->function_code) +
          " rejected by an interceptor: " + rejected.ToString());
    } else {
      status = RunKernel(call_);
    }
    // (An abandoned kernel still owns call_.)
    if (status != kNaaStatusSuccess && !kernel_overran_ && !call_.failure_detail.empty()) {
      Log("call of function " + std::to_string(call_.function_code) + " failed with status " +
          std::to_string(status) + ": " + call_.failure_detail);
    }
  }
  if (!streams_.empty() && !kernel_overran_) {
    // Every stream ends before the status, whether or not the kernel ran
    // (docs/protocol.md 15.4); a stream that cannot end (the host left or
    // broke the protocol) ends the connection.
    NAARPC_RETURN_IF_ERROR(FinishStreams());
  }
  ++calls_;
  if (observed_) {
    // Recorded before the reply leaves: once the host has the answer, the
    // NAA's statistics count the call.
    uint64_t bytes_out = 0;
    if (status == kNaaStatusSuccess) {
      for (size_t p : returns) {
        bytes_out += std::min<uint64_t>(call_params_[p].reply_length,
                                        groups_[param_index_[p]].memory.size());
      }
    }
    EndObserved(status, bytes_out);
  }
  NAARPC_RETURN_IF_ERROR(sm_.Transition(CommState::kDataSending));
  NAARPC_RETURN_IF_ERROR(Reply(status, returns));
  // The spare receive posted earlier takes the host's next call, which may
  // already be on its way; this one replaces the receive the call consumed,
  // off the latency path (after the reply is posted).
  NAARPC_RETURN_IF_ERROR(PostDataRecv());
  return sm_.Transition(CommState::kFinished);
}

void ConnectionServer::BeginObserved(uint8_t function_code) {
  interceptors_ = nullptr;
  interceptors_accepted_ = 0;
  const InterceptorChain::List* list =
      options_.interceptors != nullptr ? options_.interceptors->current() : nullptr;
  if (options_.stats == nullptr && list == nullptr) return;
  observed_ = true;
  observed_code_ = function_code;
  observed_bytes_in_ = 0;
  if (stats_code_ != function_code) {
    const std::string_view name = handler_.RoutineName(function_code);
    routine_name_ = name.empty() ? "function_" + std::to_string(function_code) : std::string(name);
    stats_ = options_.stats != nullptr
                 ? &options_.stats->Get(CallSide::kNaa, routine_name_, peer_host_)
                 : nullptr;
    stats_code_ = function_code;
  }
  observed_stats_ = stats_;
  if (observed_stats_ != nullptr) observed_stats_->RecordStart();
  observed_start_ns_ = internal::CycleClock::NowNanos();
}

Status ConnectionServer::StartInterceptors(uint8_t function_code) {
  if (!observed_) return Status::Ok();
  const InterceptorChain::List* list =
      options_.interceptors != nullptr ? options_.interceptors->current() : nullptr;
  if (list == nullptr) return Status::Ok();
  const auto timeout = handler_.KernelTimeout(function_code);
  CallInfo info{.side = CallSide::kNaa,
                .routine = routine_name_,
                .peer = peer_host_,
                .function_code = function_code,
                .bytes_sent = 0,
                .bytes_received = observed_bytes_in_,
                .deadline = timeout > std::chrono::milliseconds::zero() ? Deadline::After(timeout)
                                                                        : Deadline::Infinite()};
  interceptors_ = list;
  Status s = InterceptorChain::RunStart(list, info, &interceptors_accepted_);
  if (!s.ok()) interceptors_ = nullptr;  // RunStart ended the accepted ones
  return s;
}

void ConnectionServer::EndObserved(uint8_t naa_status, uint64_t bytes_out) {
  if (!observed_) return;
  observed_ = false;
  const std::chrono::nanoseconds duration(internal::CycleClock::NowNanos() - observed_start_ns_);
  if (observed_stats_ != nullptr) {
    observed_stats_->RecordNaaEnd(naa_status, bytes_out, observed_bytes_in_,
                                  static_cast<uint64_t>(duration.count()));
  }
  if (interceptors_ != nullptr) {
    CallInfo info{.side = CallSide::kNaa,
                  .routine = routine_name_,
                  .peer = peer_host_,
                  .function_code = observed_code_,
                  .bytes_sent = bytes_out,
                  .bytes_received = observed_bytes_in_,
                  .deadline = Deadline::Infinite(),
                  .duration = duration};
    const Status status =
        naa_status == kNaaStatusSuccess
            ? Status::Ok()
            : Status(StatusCode::kNaaError, NaaStatusMetricName(naa_status)).set_wire_code(naa_status);
    InterceptorChain::RunEnd(interceptors_, interceptors_accepted_, info, status);
    interceptors_ = nullptr;
  }
}

Status ConnectionServer::Reply(uint8_t status, const std::vector<size_t>& returns) {
  slices_.clear();
  if (status == kNaaStatusSuccess) {
    // Each return parameter: the reply_length prefix, over its wire regions.
    for (size_t r = 0; r < returns.size(); ++r) {
      const size_t p = returns[r];
      const Group& g = groups_[param_index_[p]];
      const uint64_t want = std::min<uint64_t>(call_params_[p].reply_length, g.memory.size());
      for (size_t i = 0; i < g.entry_count; ++i) {
        const WireEntry& e = entries_[g.first_entry + i];
        if (want <= e.offset) break;
        const uint64_t len = std::min<uint64_t>(e.request.size, want - e.offset);
        slices_.push_back({{g.local_addr + e.offset, static_cast<uint32_t>(len), g.lkey},
                           e.request.addr, windows_ ? window_rkeys_[r] : e.request.rkey});
      }
    }
  }
  if (slices_.empty()) {
    // Error status (or nothing to return): one zero-length WRITE_WITH_IMM to
    // the first return region, else the first parameter region.
    const size_t p = returns.empty() ? 0 : returns.front();
    // A routine of streams only: the first stream's ring carries it.
    if (p >= param_index_.size() && stream_index_.empty()) {
      return ProtocolError("no host region to carry the status");
    }
    const Group& g = groups_[p < param_index_.size() ? param_index_[p] : stream_index_[0]];
    const WireEntry& e = entries_[g.first_entry];
    const bool window = windows_ && !returns.empty() && !window_rkeys_.empty();
    slices_.push_back({{g.local_addr, 0, g.lkey}, e.request.addr,
                       window ? window_rkeys_.front() : e.request.rkey});
  }
  const uint32_t requests = static_cast<uint32_t>(slices_.size());
  if (ep_.send_budget().NeedsReclaim(requests)) NAARPC_RETURN_IF_ERROR(ReclaimSendQueue());
  // The last reply of a connection is signaled and waited for, so that it
  // has left before the disconnect.
  NAARPC_RETURN_IF_ERROR(
      ep_.PostWrites(slices_, EncodeStatusImmediate(dialect_, status), kernel_overran_).status());
  if (kernel_overran_) return ReclaimSendQueue();
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------

class NaaServer::Impl {
 public:
  Transport& transport;
  NaaHandler& handler;
  ServerOptions options;
  std::unique_ptr<Listener> listener;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> accepted{0};
  std::shared_ptr<ServerShared> shared;
  std::mutex mu;
  std::condition_variable closed_cv;       // notified when `open` drops
  // Drives every connection; after `shared` (a connection ends before).
  std::unique_ptr<internal::EventEngine> engine;
  std::unique_ptr<MetricsServer> metrics;  // ServerOptions::metrics_port
  size_t open = 0;                         // guarded by mu
  bool shut_down = false;                  // guarded by mu

  Impl(Transport& t, NaaHandler& h, const ServerOptions& o)
      : transport(t), handler(h), options(o), shared(std::make_shared<ServerShared>(o)) {}

  void AcceptLoop() {
    while (!stopping.load()) {
      auto conn = listener->Accept(Deadline::Infinite());
      if (!conn.ok()) {
        if (stopping.load()) break;
        // A peer's failed handshake costs nothing; only running out of
        // descriptors backs off.
        shared->Log("naarpc NAA: accept failed: " + conn.status().ToString());
        if (conn.status().code() == StatusCode::kResourceExhausted) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        continue;
      }
      accepted.fetch_add(1);
      std::unique_ptr<Connection> c = std::move(conn).value();
      const std::string peer = c->peer_name();
      auto server =
          std::make_shared<ConnectionServer>(std::move(c), handler, shared, stopping, *engine);
      // A slot, per peer: short of slots, an idle session of a peer holding
      // more is reclaimed (docs/server.md, "What one peer can hold").
      std::weak_ptr<ConnectionServer> weak = server;
      auto admitted = shared->admission.Admit(internal::PeerHost(peer), [weak] {
        if (auto reclaimed = weak.lock()) reclaimed->Reclaim();
      });
      if (!admitted.ok()) {
        shared->Log("naarpc NAA: " + admitted.status().message() +
                    "; closing the connection from " + peer);
        server->Interrupt();
        continue;
      }
      server->SetAdmission(*admitted);
      {
        std::lock_guard<std::mutex> lock(mu);
        ++open;
      }
      server->SetOnEnd([this] {
        std::lock_guard<std::mutex> lock(mu);
        --open;
        closed_cv.notify_all();
      });
      Status begun = server->Begin();
      // Driven once at once: its first Drive() arms the notification
      // (the descriptor waits for nothing before that, transport.h).
      if (begun.ok()) begun = engine->Add(server, Deadline::Now());
      if (!begun.ok()) server->Abort(begun);
    }
  }
};

NaaServer::NaaServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NaaServer::~NaaServer() { Shutdown(); }

Result<std::unique_ptr<NaaServer>> NaaServer::Start(Transport& transport, const std::string& host,
                                                    uint16_t port, NaaHandler& handler,
                                                    const ServerOptions& options) {
  if (options.max_regions == 0) return InvalidArgumentError("max_regions must be > 0");
  if (options.max_connections == 0) return InvalidArgumentError("max_connections must be > 0");
  if (options.max_threads == 0) return InvalidArgumentError("max_threads must be > 0");
  if (options.max_handshakes_per_peer == 0) {
    return InvalidArgumentError("max_handshakes_per_peer must be > 0");
  }
  ServerOptions resolved = options;
  if (resolved.max_total_bytes == 0) {
    // Default: half of the physical memory.
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    resolved.max_total_bytes =
        pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 2 : uint64_t{8} << 30;
  }
  auto impl = std::make_unique<Impl>(transport, handler, resolved);
  internal::EventEngine::Options engine_options;
  engine_options.threads = resolved.engine_threads;
  engine_options.max_threads = resolved.max_threads;
  auto engine = internal::EventEngine::Start(engine_options);
  if (!engine.ok()) return engine.status();
  impl->engine = std::move(engine).value();
  // The metrics endpoint first: it listens once the NAA does.
  if (resolved.metrics_port.has_value()) {
    if (resolved.stats == nullptr) {
      return InvalidArgumentError("metrics_port needs statistics (ServerOptions::stats is null)");
    }
    auto metrics = MetricsServer::Start(resolved.stats, resolved.metrics_host, *resolved.metrics_port);
    if (!metrics.ok()) return metrics.status();
    impl->metrics = std::move(metrics).value();
  }
  auto listener = transport.Listen(host, port);
  if (!listener.ok()) {
    return listener.status().WithContext("listening on " + HostPort(host, port));
  }
  impl->listener = std::move(listener).value();
  // The MRSP receive is posted before the host can send its request (the
  // transport runs this before accepting): no RNR wait at set-up.
  // A connection it fails on is refused (the listener goes on with the
  // next): said in the log, like every other refusal.
  impl->listener->SetAcceptHook(
      [shared = impl->shared](Connection& conn) -> Result<std::shared_ptr<void>> {
        auto ep = std::make_shared<internal::Endpoint>();
        Status s = ep->SetUp(conn);
        if (s.ok()) s = ep->PostMrspReceive();
        if (!s.ok()) {
          shared->Log("naarpc NAA [" + conn.peer_name() +
                      "]: refused: preparing its MRSP receive failed: " + s.ToString());
          return s;
        }
        return std::shared_ptr<void>(std::move(ep));
      });
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  return std::unique_ptr<NaaServer>(new NaaServer(std::move(impl)));
}

uint16_t NaaServer::port() const { return impl_->listener->port(); }
uint16_t NaaServer::metrics_port() const {
  return impl_->metrics != nullptr ? impl_->metrics->port() : 0;
}
uint64_t NaaServer::connections_accepted() const { return impl_->accepted.load(); }
size_t NaaServer::connections_open() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->open;
}

bool NaaServer::WaitForOpenConnectionsAtMost(size_t n, Deadline deadline) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto few = [&] { return impl_->open <= n; };
  if (deadline.infinite()) {
    impl_->closed_cv.wait(lock, few);
    return true;
  }
  return impl_->closed_cv.wait_until(lock, deadline.when(), few);
}

void NaaServer::Shutdown() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  impl_->stopping.store(true);
  impl_->listener->Shutdown();
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  // Every connection ends now, a call in flight too (its host gets
  // kDisconnected); a running kernel is still waited for (it uses the
  // connection's memory), one that overran its limit at most shutdown_grace.
  impl_->engine->InterruptAll();
  impl_->engine->Stop();
  if (impl_->metrics != nullptr) impl_->metrics->Stop();
  // What still runs now are kernels that overran their limit.
  if (size_t left = impl_->shared->running_kernels.WaitNone(impl_->options.shutdown_grace);
      left > 0) {
    impl_->shared->Log("naarpc NAA: shutdown: " + std::to_string(left) +
                       " kernel(s) that overran their time limit still running after " +
                       std::to_string(impl_->options.shutdown_grace.count()) +
                       " ms; left to finish by themselves (the handler must outlive them)");
  }
}

}  // namespace naarpc
