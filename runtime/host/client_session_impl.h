// ClientSession::Impl: one connection to a NAA, on the engine room's
// Endpoint. Internal to the host room; its parts live in
//   client_session.cc          the public ClientSession: Open (connect), accessors, Close
//   client_session_setup.cc    the region layout, registration, the MRSP handshake
//   client_session_call.cc     a call: issue, completions, finish
//   client_session_windows.cc  per-call memory windows (docs/protocol.md 4.5)
//   client_session_streams.cc  a call's streams (docs/protocol.md 15)
#ifndef NAARPC_RUNTIME_HOST_CLIENT_SESSION_IMPL_H_
#define NAARPC_RUNTIME_HOST_CLIENT_SESSION_IMPL_H_

#include "naarpc/client_session.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "runtime/engine/endpoint.h"
#include "runtime/engine/send_queue_budget.h"
#include "runtime/engine/state_machine.h"
#include "runtime/engine/stream_rules.h"
#include "runtime/engine/wire_ops.h"
#include "runtime/wire/byte_order.h"
#include "runtime/wire/metadata.h"
#include "runtime/wire/mrsp.h"
#include "runtime/wire/stream_frame.h"

namespace naarpc {

namespace internal {

inline bool IsInput(Direction d) { return d == Direction::kIn || d == Direction::kInOut; }
inline bool IsOutput(Direction d) { return d == Direction::kOut || d == Direction::kInOut; }
// Parameters written before / returned after the kernel (not streams).
inline bool IsCallInput(const RegionSpec& r) { return !r.stream.enabled() && IsInput(r.direction); }
inline bool IsReturn(const RegionSpec& r) { return !r.stream.enabled() && IsOutput(r.direction); }

inline std::string Quote(const std::string& s) { return "'" + s + "'"; }

inline std::string Hex(uint8_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", v);
  return b;
}

}  // namespace internal

class ClientSession::Impl {
 public:
  // One wire region: a slice of a parameter buffer (or the metadata region,
  // param == kMetadata), at most max_region_size bytes.
  struct WireRegion {
    static constexpr size_t kMetadata = SIZE_MAX;
    size_t param = 0;
    uint64_t offset = 0;   // within the parameter
    uint32_t size = 0;
    uint8_t flags = 0;
    bool internal = false;
    uint64_t naa_address = 0;
    // Filled by the MRSP answer (non-internal only).
    uint64_t peer_addr = 0;
    uint32_t peer_rkey = 0;
    // The host-side slice (non-internal only), cached once registered.
    uint64_t local_addr = 0;
    uint32_t lkey = 0;
  };

  // One stream during a call (docs/protocol.md 15).
  struct Stream {
    Stream(size_t param, const WireRegion* wire, bool input, uint32_t chunk, uint32_t window,
           const std::string& name)
        : param(param), wire(wire), input(input), chunk(chunk), window(window),
          outbound({name, chunk, window}), inbound({name, chunk, window}) {}
    size_t param = 0;
    const WireRegion* wire = nullptr;
    bool input = false;
    uint32_t chunk = 0, window = 0;
    internal::StreamOutbound outbound;  // input: the chunks we write
    internal::StreamInbound inbound;    // output: the chunks the NAA writes, our credits
    const std::string& name() const { return inbound.name(); }
    bool ended() const { return input ? outbound.ended() : inbound.ended(); }
    std::string Totals() const { return input ? outbound.Totals() : inbound.Totals(); }
  };

  struct Param {
    RegionSpec spec;
    size_t stream = SIZE_MAX;     // index among the streams
    internal::Buffer owned;       // when spec.external_buffer == nullptr
    std::byte* data = nullptr;
    std::unique_ptr<MemoryRegion> mr;
    // Per-call memory windows: the window over `mr` (return parameters);
    // declared after `mr`, so destroyed before it.
    std::unique_ptr<MemoryWindow> window;
  };

  // The connection: its state, options, queue pair and engine (MRSP
  // messages, receives for the NAA's writes, the send budget: what the NAA's
  // side does alike, runtime/engine/endpoint.h).
  StateMachine sm{Role::kHost};
  ClientOptions options;
  SetupTimes setup_times;
  std::unique_ptr<Connection> conn;
  internal::Endpoint ep;

  // The registered regions: parameters, their wire regions, the metadata.
  struct Regions {
    std::vector<Param> params;
    std::vector<WireRegion> wire;  // MRSP order: [metadata], params, internal
    internal::Buffer metadata;     // spec dialect
    std::unique_ptr<MemoryRegion> metadata_mr;
    std::vector<size_t> metadata_params;  // the parameter of each metadata entry
    uint32_t output_windows = 0;  // receives kept up for output stream chunks
  };
  Regions regions;
  // The streams in stream order (docs/protocol.md 15); the calls completed.
  std::vector<Stream> streams;
  uint64_t calls_completed = 0;

  // Per-call memory windows (ClientOptions::memory_windows, docs/protocol.md
  // 4.5): whether used; whether bound now (between BeginCall and EndCall).
  struct Windows {
    bool enabled = false;
    bool open = false;
    uint64_t seq = 0;
    std::vector<SendRequest> wrs;  // scratch
  };
  Windows windows;

  // The write sequence of a call: its slices (scratch, reused per call) and
  // the zero-copy inputs staged for it (StageGatherInput, docs/protocol.md
  // 16.2): gather entries in caller memory, per parameter a range of them.
  struct StagedInput {
    size_t param = 0;
    size_t begin = 0, end = 0;              // in gather_sges
    size_t first_slice = 0, end_slice = 0;  // in slices, set by BeginCall
  };
  struct Writes {
    std::vector<internal::WriteSlice> slices;
    std::vector<LocalBuffer> gather_sges;
    std::vector<StagedInput> staged;
    std::vector<SendRequest> batch;  // scratch: one batch of a long chain
    // The requests of a plain call (PlainCall()), built at the first one
    // and posted as they are by every later one; cleared when the regions'
    // NAA addresses change (MRSP).
    std::vector<SendRequest> plain;
  };
  Writes writes;
  // Staged inputs stay until their call's last batch is posted.
  void DropStaged() {
    writes.staged.clear();
    writes.gather_sges.clear();
  }
  // A call whose write sequence is the same every time: after the first
  // call (which writes the metadata and single-send inputs), every input
  // whole, nothing staged for zero-copy, no windows (new keys in the
  // metadata) and no streams.
  bool PlainCall(const CallOptions& call_options) const {
    return calls_completed > 0 && call_options.send_lengths.empty() && writes.staged.empty() &&
           !windows.enabled && streams.empty();
  }
  bool StageGather(size_t index, const Layout& layout, size_t elem,
                   std::span<const std::byte* const> bases);

  // ERROR is terminal: the peer's access to our memory ends at once, so a
  // late write cannot land in the user's buffers.
  Status Fail(Status s) {
    call.active = false;
    call.chain.active = false;
    sm.Fail();
    ReleaseRemoteAccess();
    return s;
  }
  void ReleaseRemoteAccess() {
    if (conn) conn->Disconnect().IgnoreError();
    windows.open = false;
    for (auto& p : regions.params) p.window.reset();  // before its region
    for (auto& p : regions.params) p.mr.reset();
    regions.metadata_mr.reset();
    DropStaged();
    writes.plain.clear();  // names the regions just deregistered
    if (options.user_memory && conn) options.user_memory->ForgetConnection(conn.get());
  }

  // Posts one receive for a result (the NAA's WRITE_WITH_IMM).
  Status PostDataRecv() { return ep.PostDataRecv(); }

  Status BuildLayout(std::vector<RegionSpec> specs);
  Status Register();
  Status RunMrsp(Deadline call_deadline);
  Status DoCall(uint8_t fncode, Deadline deadline, const CallOptions& options);
  // The halves of a call (DoCall, or StartCall + ContinueCall): validate and
  // post; take one completion; turn the outcome into the caller's status.
  Status BeginCall(uint8_t fncode, Deadline deadline, const CallOptions& options);
  // The call's write sequence into writes.slices (BeginCall); whether it
  // gathers zero-copy inputs.
  Result<bool> BuildWrites(std::span<const uint64_t> lengths);
  // Binds every return parameter's window (new keys) and writes the keys
  // into the metadata; CloseWindows invalidates them and waits until done.
  Status OpenWindows();
  Status CloseWindows(std::optional<Deadline> wait);
  Status OnCallCompletion(const Completion& c, bool& done);
  // A write sequence longer than the send queue takes at once: posts what
  // fits of it (call.chain); OnChainBatch takes a batch's completion.
  Status PostChain();
  Status OnChainBatch(uint64_t wr_id);
  // Where a batched sequence stands, for an error that ends it.
  std::string ChainProgress() const;
  Status EndCall(Status polled);
  std::optional<Status> ContinueCall();
  std::optional<Status> WaitCall(Deadline until);
  Status FinishCall();

  // The call in flight, from BeginCall to EndCall.
  struct CallInFlight {
    bool active = false;
    uint8_t fncode = 0;
    Deadline deadline = Deadline::Infinite();
    uint64_t write_id = 0;
    bool written = false, answered = false;
    uint32_t status_imm = 0;
    // A write sequence posted in batches of at most `limit` requests
    // (docs/protocol.md 16.2): slices [0, next) are posted, [0, acked)
    // acknowledged; the batches in flight (at most two) end with the
    // signaled requests ids[0..in_flight), after slices ends[...]; `unfreed`
    // send-queue slots are not known free. Active until the last batch, the
    // one with the WRITE_WITH_IMM, is posted.
    struct Chain {
      bool active = false;
      uint32_t imm = 0;
      uint32_t limit = 0;
      uint32_t unfreed = 0;
      uint32_t batches = 0;  // posted
      size_t next = 0, acked = 0;
      uint32_t in_flight = 0;
      std::array<uint64_t, 2> ids{};
      std::array<size_t, 2> ends{};
    };
    Chain chain{};
  };
  CallInFlight call;
  // Completion notification as ContinueCall leaves it, across calls (an
  // event loop drives a pooled session call after call): `armed` by
  // RequestNotify and not consumed by WaitNotify since; whether completions
  // were taken since the arming (its event is then `maybe_raised`, so it is
  // consumed before the session next sleeps). Only StartCall / ContinueCall
  // keep it: anything else that may arm or consume (blocking calls,
  // PeerGone) clears it, and arming again is harmless.
  struct NotifyArming {
    bool armed = false;
    bool maybe_raised = false;
  };
  NotifyArming notify;
  void ForgetNotify() { notify = {}; }
  // The streaming part of a call, from the request write to the status.
  Status RunStreams(StreamHandler& handler, uint64_t write_id, Deadline deadline,
                    uint32_t& status_imm);
  // "; stream 'x': 3 chunk(s) written, 2 credited; ...": where every
  // stream of the call stands.
  std::string StreamTotals() const {
    std::string state;
    for (const Stream& st : streams) state += "; " + st.name() + ": " + st.Totals();
    return state;
  }
  // Posts one stream frame (a WRITE_WITH_IMM); false if the send queue
  // has no slot until the pending signaled request completes.
  Result<bool> PostFrame(LocalBuffer local, uint64_t remote_addr, uint32_t rkey, uint32_t imm);
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_HOST_CLIENT_SESSION_IMPL_H_
