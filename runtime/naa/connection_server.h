// ConnectionServer: the NAA role on one connection. MRSP, then calls until
// the host leaves, driven by the server's EventEngine through the engine
// room's Endpoint and StateMachine. Internal to the NAA room; its parts:
//   connection_server.cc   lifecycle: Begin, Drive (completions, the call
//                          queue, lingering), idle tracking, the end
//   connection_mrsp.cc     the MRSP request: limits, regions, registration
//   connection_call.cc     one call: return regions, the kernel's view, the
//                          kernel (against the watchdog if it has a time limit),
//                          statistics and interceptors, the reply
//   connection_streams.cc  a call's streams (docs/protocol.md 15)
#ifndef NAARPC_RUNTIME_NAA_CONNECTION_SERVER_H_
#define NAARPC_RUNTIME_NAA_CONNECTION_SERVER_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "naarpc/comm_state.h"
#include "naarpc/deadline.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"
#include "runtime/engine/endpoint.h"
#include "runtime/engine/event_engine.h"
#include "runtime/engine/state_machine.h"
#include "runtime/engine/stream_rules.h"
#include "runtime/engine/wire_ops.h"
#include "runtime/naa/server_shared.h"
#include "runtime/wire/mrsp.h"
#include "runtime/wire/stream_frame.h"

namespace naarpc::internal {

// One MRSP entry as the host sent it, and where it lives on the NAA.
struct WireEntry {
  RegionRequest request;
  size_t group = 0;     // index into Regions::groups
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

// The regions the MRSP set up: its entries and the groups they form.
struct Regions {
  Dialect dialect = Dialect::kSpec;
  std::vector<WireEntry> entries;       // MRSP order
  std::vector<Group> groups;
  std::vector<size_t> param_index;      // groups index of each parameter
  std::vector<size_t> internal_index;   // groups index of each internal region
  size_t metadata_index = SIZE_MAX;     // groups index (spec dialect)
  std::vector<size_t> stream_index;     // groups index of each stream
  // Per-call memory windows negotiated (docs/protocol.md 4.5): each call's
  // metadata carries the window key of each return, in return order.
  bool windows = false;
};

// The call's return parameters, as the dialect names them, and what they
// were resolved from.
struct ReturnRegions {
  std::vector<size_t> list;     // parameter indices; per-call scratch, reused
  uint64_t version = 0;         // bumped when `list` is re-resolved
  // Spec dialect: the metadata bytes `list` was resolved from.
  std::vector<uint8_t> resolved_metadata;
  bool resolved_reference = false;  // reference dialect: resolved once
  std::vector<uint32_t> window_rkeys;   // per-call windows: the key of each return
  std::vector<size_t> window_scratch;
};

// What a kernel sees, rebuilt only when the return regions change; each
// call starts from a copy (a kernel may change its view, e.g. reply_length).
struct KernelView {
  std::vector<NaaRegion> params_template, params;
  std::vector<std::span<std::byte>> internal_template, internal;
  uint64_t version = UINT64_MAX;  // ReturnRegions::version it was built for
};

// Calls that arrived while polling for something else, oldest first (at
// most one per posted receive).
class CallQueue {
 public:
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == calls_.size(); }
  // REQUIRES: !full().
  void Push(uint32_t imm) { calls_[(head_ + count_++) % calls_.size()] = imm; }
  // REQUIRES: !empty().
  uint32_t Pop() {
    const uint32_t imm = calls_[head_];
    head_ = (head_ + 1) % calls_.size();
    --count_;
    return imm;
  }

 private:
  std::array<uint32_t, kDataRecvDepth> calls_{};
  size_t head_ = 0, count_ = 0;
};

// Idle logging and closing (ServerOptions::idle_log_after, idle_timeout).
struct IdleTracker {
  uint64_t calls_at_check = UINT64_MAX;
  Deadline::Clock::time_point since{};
  bool logged = false;
};

// The call's statistics and interceptors (ServerOptions::stats,
// interceptors), when either is on.
struct CallObservation {
  bool active = false;
  uint8_t code = 0;
  uint64_t bytes_in = 0;
  int64_t start_ns = 0;  // CycleClock
  RoutineStats* stats = nullptr;
  // The last function code's statistics (a session calls one routine).
  int cached_code = -1;
  RoutineStats* cached_stats = nullptr;
  std::string routine_name;  // of `code`
  const InterceptorChain::List* interceptors = nullptr;
  size_t interceptors_accepted = 0;
};

// Serves one connection: MRSP, then calls until the peer leaves. Driven by
// the server's EventEngine: each Drive() takes what has completed, answers
// the MRSP, runs the calls that came (on the engine thread that took the
// event) and arms the connection's notification again.
// Owned by a shared_ptr: a kernel that overran its time limit keeps the
// connection's memory alive (not its connection) until it returns.
class ConnectionServer final : public Driven,
                               public std::enable_shared_from_this<ConnectionServer>,
                               private KernelAlarm {
 public:
  ConnectionServer(std::unique_ptr<Connection> conn, NaaHandler& handler,
                   std::shared_ptr<ServerShared> shared, const std::atomic<bool>& stopping,
                   EventEngine& engine)
      : conn_(std::move(conn)),
        server_{handler, shared->options, std::move(shared), stopping, engine},
        place_(conn_->peer_name()) {}
  // The connection's slot and memory go back to the admission (by now
  // its buffers are freed, or are being: members end after this).
  ~ConnectionServer() override;

  // REQUIRES: before Begin(); `id` from Admission::Admit.
  void SetAdmission(uint64_t id) {
    place_.admission_id = id;
    place_.admission_slot = server_.shared->admission.Find(id);
  }
  // Called once, when the connection has ended (Ended()).
  void SetOnEnd(std::function<void()> on_end) { place_.on_end = std::move(on_end); }
  // Before the engine drives it: the MRSP buffer, the receive for the
  // host's request.
  Status Begin();
  // Ends a connection that Begin() or the engine refused.
  void Abort(Status why);

  int fd() const override { return place_.fd; }
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
  // protocol_.phase kEnded).
  Status Progress();
  Status OnMrspRequest(const Completion& c);
  Status ServeQueuedCalls();
  // After the connection ended (Drive, Abort): logs why, ends the host's
  // access (disconnect, registrations).
  void Finish(const Status& why);
  Status SendMrspError(MrspErrorCode code);
  Status PostDataRecv() { return ep_.PostDataRecv(); }
  // Handles one data-phase completion: queues a call's immediate, frees send
  // slots. Sets `host_left` on a flush.
  Status OnDataCompletion(const Completion& c, bool& host_left);
  // Polls until the pending signaled reply has completed (send_queue_budget.h).
  Status ReclaimSendQueue();
  Status HandleCall(uint32_t imm);
  uint8_t ResolveReturnRegions(std::vector<size_t>& returns);
  void BuildCallTemplate(const std::vector<size_t>& returns);
  // Runs the call's kernel on this thread; one with a time limit against the
  // server's watchdog. nullopt: the watchdog came first, answered the call
  // and ended the connection (TakeOverOverrun); the caller must return
  // without touching anything of the connection.
  std::optional<uint8_t> RunKernel(NaaCall& call);
  // NaaCall::retain_memory: this object (its regions' memory) for the
  // handler; the memory then outlives the connection (Ended()).
  std::shared_ptr<const void> RetainMemory();
  // The watchdog's alarm for the running kernel (KernelAlarm): takes the
  // connection over (TakeOverOverrun) if the kernel has not returned first.
  std::function<void()> Expired() override;
  // On the watchdog's thread, the kernel still running on `owner`: answers
  // kNaaStatusKernelTimeout, ends the connection, and has the engine give
  // the kernel's thread up.
  void TakeOverOverrun(const EventEngine::Owner& owner, std::chrono::milliseconds timeout,
                       uint8_t code);
  // After the kernel (or instead of it): ends the call's streams, counts and
  // observes it, sends the reply.
  Status EndCall(uint8_t status);
  // After each Drive() while serving: logs a connection idle past
  // ServerOptions::idle_log_after, once per idle spell; true once it has
  // been idle past ServerOptions::idle_timeout (then it is closed). Reads
  // the clock only if one of them is set.
  bool NoteIdle();
  // When NoteIdle has something to do next; infinite if nothing.
  Deadline IdleDeadline() const;
  // "Service.Routine (function 11)" (NaaHandler::RoutineName), or "function 11".
  std::string RoutineText(uint8_t function_code) const;
  Status Reply(uint8_t status, const std::vector<size_t>& returns);
  // Builds calls_.reply for this status and these returns.
  Status BuildReply(uint8_t status, const std::vector<size_t>& returns);
  void Log(const std::string& line) const;

  // ---- Streams (docs/protocol.md 15) ----
  class StreamImpl;
  friend class StreamImpl;
  // Polls once (up to `deadline`) and applies what came: chunks and
  // credits of the call's streams, our own write completions. An error
  // sticks in streams_.error. REQUIRES: streams_.pump_mu held.
  Status PumpStreams(Deadline deadline);
  // Applies one stream frame of the running call. REQUIRES:
  // streams_.pump_mu held or no kernel running.
  Status ApplyFrame(uint32_t imm, uint32_t byte_len);
  // Waits (pumping) until `ready()` or an error; bounded by the idle
  // timeout between frames. REQUIRES: streams_.pump_mu held.
  template <typename Ready>
  Status PumpUntil(std::unique_lock<std::mutex>& lock, Ready&& ready, const char* waiting_for);
  // Posts one stream frame; pumps first while the send queue is full.
  // REQUIRES: streams_.pump_mu held.
  Status PostStreamFrame(std::unique_lock<std::mutex>& lock, LocalBuffer local,
                         uint64_t remote_addr, uint32_t rkey, uint32_t imm);
  // After the kernel: drains unread input, ends open outputs, waits for
  // every credit (docs/protocol.md 15.4). A connection that ends
  // mid-stream (e.g. the host found one of our frames out of sequence and
  // failed its call) is logged with where each stream stood.
  Status FinishStreams();
  // "; stream 0: 3 chunk(s) received, ...; stream 1: ..." for the log.
  // REQUIRES: streams_.pump_mu held.
  std::string StreamTotalsLocked() const;
  Status FinishStreamsLocked(std::unique_lock<std::mutex>& lock);

  // The call's statistics and interceptors. EndObserved runs once per
  // call, whichever way HandleCall returns.
  void BeginObserved(uint8_t function_code);
  Status StartInterceptors(uint8_t function_code);
  void EndObserved(uint8_t naa_status, uint64_t bytes_out);

  // Streams: per connection, in stream order; pump_mu hands the connection
  // over from a kernel that overran to the watchdog's thread.
  struct CallStreams {
    std::vector<std::unique_ptr<StreamImpl>> list;
    std::vector<NaaStream*> ptrs;
    std::mutex pump_mu;      // conn_ while a streaming kernel runs
    Status error;            // sticky within a call
    bool abandoned = false;  // the kernel overran: hands off conn_
    // Frames that came behind a call's request while waiting for it;
    // applied once the call starts.
    std::vector<std::pair<uint32_t, uint32_t>> early_frames;  // immediate, byte count
  };

  // The server's parts a connection uses.
  struct ServerParts {
    NaaHandler& handler;
    const ServerOptions& options;                // shared->options
    const std::shared_ptr<ServerShared> shared;  // outlives the server if a kernel does
    const std::atomic<bool>& stopping;
    EventEngine& engine;
  };

  // The connection's place in the server: whom it serves, its descriptor in
  // the engine, its admission slot, what the server runs when it has ended.
  struct Place {
    explicit Place(std::string peer_name)
        : peer(std::move(peer_name)), peer_host(PeerHost(peer)) {}

    const std::string peer;
    const std::string peer_host;  // the statistics' peer
    int fd = -1;                  // conn_->notify_fd()
    uint64_t admission_id = 0;    // its slot and bytes in ServerShared::admission
    Admission::Slot* admission_slot = nullptr;  // of admission_id, until it is released
    std::function<void()> on_end;
  };

  // Where the protocol stands: phase, the MRSP's time limit, the state machine.
  struct ProtocolState {
    Phase phase = Phase::kMrsp;
    Deadline mrsp_deadline = Deadline::Infinite();
    StateMachine sm{Role::kNaa};
  };

  // A reply's write sequence (BuildWriteSequence), posted again as it is
  // while what it was built from stays: a success over return regions
  // ReturnRegions::version with these lengths, without memory windows.
  struct ReplyWrites {
    std::vector<WriteSlice> slices;     // scratch
    std::vector<SendRequest> requests;  // of the last reply
    bool reusable = false;
    uint64_t version = 0;
    std::vector<uint64_t> lengths;  // per return parameter
  };

  // Calls: those waiting, the one running, its reply's writes, how many so
  // far (and how long none came: idle tracking).
  struct Calls {
    CallQueue queued;
    NaaCall call;        // outlives a runaway kernel
    ReplyWrites reply;   // the reply's writes, reused
    uint64_t count = 0;
    // A kernel with a time limit: the race against the watchdog, the
    // current round, and what the watchdog's expiry needs (set before the
    // alarm is armed; the owner is cleared after the kernel won).
    KernelRace race;
    KernelRace::Round round = 0;
    EventEngine::Owner kernel_owner;
    std::chrono::milliseconds kernel_timeout{0};
    bool kernel_overran = false;  // its kernel given up; the connection ends
    std::atomic<bool> memory_retained{false};  // RetainMemory() was called
    // A call is being served, or a result write of the last one was flushed
    // unacknowledged: the connection ending now is logged.
    bool in_call = false;
    bool results_unacked = false;
    uint8_t code = 0;  // of the last call
    IdleTracker idle;
  };

  const ServerOptions& options() const { return server_.options; }

  // Guards conn_ itself: Ended() resets it (engine thread) while
  // Interrupt() may disconnect it from any thread (Shutdown, Reclaim).
  std::mutex conn_mu_;
  std::unique_ptr<Connection> conn_;
  const ServerParts server_;
  Place place_;
  // The protocol: where it stands, the regions, the endpoint (MRSP messages,
  // receives for the host's writes, the send budget: what the host's side
  // does alike, runtime/engine/endpoint.h).
  ProtocolState protocol_;
  Regions regions_;
  Endpoint ep_;
  // Calls, and what each one resolves, shows its kernel, observes, streams.
  Calls calls_;
  ReturnRegions returns_;
  KernelView view_;
  CallObservation observation_;
  CallStreams streams_;
};

// ---- Streams (docs/protocol.md 15) ----

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

  // Before each call.
  void Reset();

  bool is_input() const override { return input_; }
  size_t chunk_size() const override { return chunk_; }
  uint32_t window() const override { return window_; }
  bool ended() const override { return ended_; }

  Result<std::span<const std::byte>> Next() override;
  Result<std::span<std::byte>> NextSlot() override;
  Status Commit(size_t bytes) override;
  Status Write(std::span<const std::byte> data) override;
  Status Close() override;

 private:
  friend class ConnectionServer;

  // REQUIRES: streams_.pump_mu held.
  Status Usable(bool want_input, const char* op) const;
  // An empty end chunk: hands its slot back at once; the stream has ended.
  Result<std::span<const std::byte>> ReleaseTheEnd(std::unique_lock<std::mutex>& lock);
  // Hands the held chunk's slot back: one credit.
  Status Release(std::unique_lock<std::mutex>& lock);
  Result<std::span<std::byte>> NextSlotLocked(std::unique_lock<std::mutex>& lock);
  Status CommitLocked(std::unique_lock<std::mutex>& lock, size_t bytes);
  Status CloseLocked(std::unique_lock<std::mutex>& lock);
  // A frame for this stream arrived (docs/protocol.md 15.3); `byte_len`:
  // its write's length.
  Status OnFrame(const StreamFrame& f, uint32_t byte_len);

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

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_NAA_CONNECTION_SERVER_H_
