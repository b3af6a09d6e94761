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

using internal::Buffer;
using internal::MakeWrId;
using internal::WrIdKind;
using internal::WrKind;
using internal::WriteSlice;

namespace {

bool IsInput(Direction d) { return d == Direction::kIn || d == Direction::kInOut; }
bool IsOutput(Direction d) { return d == Direction::kOut || d == Direction::kInOut; }
// Parameters written before / returned after the kernel (not streams).
bool IsCallInput(const RegionSpec& r) { return !r.stream.enabled() && IsInput(r.direction); }
bool IsReturn(const RegionSpec& r) { return !r.stream.enabled() && IsOutput(r.direction); }

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string Hex(uint8_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", v);
  return b;
}

}  // namespace

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
    Buffer owned;                 // when spec.external_buffer == nullptr
    std::byte* data = nullptr;
    std::unique_ptr<MemoryRegion> mr;
    // Per-call memory windows: the window over `mr` (return parameters);
    // declared after `mr`, so destroyed before it.
    std::unique_ptr<MemoryWindow> window;
  };

  StateMachine sm{Role::kHost};
  ClientOptions options;
  std::unique_ptr<Connection> conn;
  std::vector<Param> params;
  std::vector<WireRegion> wire;      // MRSP order: [metadata], params, internal
  Buffer metadata;                   // spec dialect
  std::unique_ptr<MemoryRegion> metadata_mr;
  // MRSP messages, receives for the NAA's writes, the send budget: what the
  // NAA's side does alike (runtime/engine/endpoint.h).
  internal::Endpoint ep;
  std::vector<WriteSlice> slices;    // scratch, reused per call
  uint64_t calls_completed = 0;
  std::vector<Stream> streams;       // in stream order
  uint32_t output_windows = 0;       // receives kept up for output chunks
  // Per-call memory windows (ClientOptions::memory_windows, docs/protocol.md
  // 4.5): the parameter of each metadata entry; whether the windows are
  // bound now (between BeginCall and EndCall); scratch work requests.
  bool use_windows = false;
  std::vector<size_t> metadata_params;
  bool windows_open = false;
  uint64_t window_seq = 0;
  std::vector<SendRequest> window_wrs;

  // ERROR is terminal: the peer's access to our memory ends at once, so a
  // late write cannot land in the user's buffers.
  Status Fail(Status s) {
    call.active = false;
    sm.Fail();
    ReleaseRemoteAccess();
    return s;
  }
  void ReleaseRemoteAccess() {
    if (conn) conn->Disconnect().IgnoreError();
    windows_open = false;
    for (auto& p : params) p.window.reset();  // before its region
    for (auto& p : params) p.mr.reset();
    metadata_mr.reset();
  }

  // Posts one receive for a result (the NAA's WRITE_WITH_IMM).
  Status PostDataRecv() { return ep.PostDataRecv(); }

  Status BuildLayout(std::vector<RegionSpec> regions);
  Status Register();
  Status RunMrsp(Deadline call_deadline);
  Status DoCall(uint8_t fncode, Deadline deadline, const CallOptions& options);
  // The halves of a call (DoCall, or StartCall + ContinueCall): validate and
  // post; take one completion; turn the outcome into the caller's status.
  Status BeginCall(uint8_t fncode, Deadline deadline, const CallOptions& options);
  // Binds every return parameter's window (new keys) and writes the keys
  // into the metadata; CloseWindows invalidates them and waits until done.
  Status OpenWindows();
  Status CloseWindows(std::optional<Deadline> wait);
  Status OnCallCompletion(const Completion& c, bool& done);
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
  };
  CallInFlight call;
  // Completion notification as ContinueCall leaves it, across calls (an
  // event loop drives a pooled session call after call): armed by
  // RequestNotify and not consumed by WaitNotify since; and whether
  // completions were taken since the arming (its event is then probably
  // raised, so it is consumed before the session next sleeps). Only
  // StartCall / ContinueCall keep it: anything else that may arm or consume
  // (blocking calls, PeerGone) clears it, and arming again is harmless.
  bool notify_armed = false;
  bool notify_maybe_raised = false;
  void ForgetNotify() { notify_armed = notify_maybe_raised = false; }
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

Status ClientSession::Impl::BuildLayout(std::vector<RegionSpec> regions) {
  const Dialect dialect = options.dialect;
  if (options.max_region_size == 0 || options.max_region_size > kMaxRegionSize) {
    return InvalidArgumentError("max_region_size must be 1.." + std::to_string(kMaxRegionSize));
  }
  size_t outputs = 0, inputs = 0, stream_count = 0;
  uint32_t windows = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    RegionSpec& r = regions[i];
    const std::string where = "region " + std::to_string(i) + " " + Quote(r.name);
    if (r.stream.enabled()) {
      const StreamSpec& st = r.stream;
      if (r.direction != Direction::kIn && r.direction != Direction::kOut) {
        return InvalidArgumentError(where + ": a stream is an input or an output (kIn, kOut)");
      }
      if (st.chunk_size > kMaxStreamChunkSize) {
        return InvalidArgumentError(where + ": stream chunk size " + std::to_string(st.chunk_size) +
                                    " (must be 1.." + std::to_string(kMaxStreamChunkSize) + ")");
      }
      if (st.window == 0 || st.window > kMaxStreamWindow) {
        return InvalidArgumentError(where + ": stream window " + std::to_string(st.window) +
                                    " (must be 1.." + std::to_string(kMaxStreamWindow) + ")");
      }
      const uint64_t ring = uint64_t{st.chunk_size} * st.window;
      if (r.size != 0 && r.size != ring) {
        return InvalidArgumentError(where + ": size " + std::to_string(r.size) +
                                    " is not the stream's ring (chunk size x window = " +
                                    std::to_string(ring) + ")");
      }
      if (r.single_send || r.external_buffer != nullptr || r.naa_address != 0) {
        return InvalidArgumentError(where + ": a stream has no single_send, external buffer or "
                                            "NAA address");
      }
      r.size = ring;
      windows += st.window;
      if (++stream_count > kMaxStreams) {
        return InvalidArgumentError("more than " + std::to_string(kMaxStreams) + " streams");
      }
    }
    if (r.size == 0) return InvalidArgumentError(where + ": size is 0");
    if (r.direction == Direction::kInternal) {
      if (r.naa_address > kMaxNaaAddress ||
          (r.naa_address != 0 && r.size - 1 > kMaxNaaAddress - r.naa_address)) {
        return InvalidArgumentError(where + ": NAA address range does not fit in 56 bits");
      }
      if (r.external_buffer != nullptr) {
        return InvalidArgumentError(where + ": internal regions have no host buffer");
      }
    }
    if (r.single_send && dialect != Dialect::kReference) {
      return InvalidArgumentError(where + ": single_send needs the reference dialect");
    }
    if (r.single_send && !IsInput(r.direction)) {
      return InvalidArgumentError(where + ": single_send applies to input regions only");
    }
    outputs += IsOutput(r.direction);
    inputs += IsInput(r.direction);
  }
  if (windows > kMaxStreamWindowTotal) {
    return InvalidArgumentError("the streams' windows add up to " + std::to_string(windows) +
                                " (at most " + std::to_string(kMaxStreamWindowTotal) +
                                ", docs/protocol.md 15.3)");
  }
  if (outputs == 0) {
    return InvalidArgumentError("a call needs at least one output (return) region");
  }
  if (inputs == 0) {
    return InvalidArgumentError("a call needs at least one input region");
  }

  params.resize(regions.size());
  for (size_t i = 0; i < regions.size(); ++i) params[i].spec = std::move(regions[i]);

  // Split parameters into wire regions of at most max_region_size.
  std::vector<WireRegion> param_wire, stream_wire, internal_wire;
  size_t next_stream = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const RegionSpec& r = params[i].spec;
    if (r.stream.enabled()) {
      // One entry, never split (the ring is at most 2^29 bytes).
      WireRegion w;
      w.param = i;
      w.size = static_cast<uint32_t>(r.size);
      w.flags = r.direction == Direction::kIn ? kStreamFlagsIn : kStreamFlagsOut;
      w.naa_address = r.stream.chunk_size;
      params[i].stream = next_stream++;
      stream_wire.push_back(w);
      continue;
    }
    for (uint64_t off = 0; off < r.size; off += options.max_region_size) {
      WireRegion w;
      w.param = i;
      w.offset = off;
      w.size = static_cast<uint32_t>(std::min<uint64_t>(options.max_region_size, r.size - off));
      if (r.direction == Direction::kInternal) {
        w.internal = true;
        w.flags = kRegionFlagInternal;
        w.naa_address = r.naa_address == 0 ? 0 : r.naa_address + off;
        internal_wire.push_back(w);
        continue;
      }
      if (dialect == Dialect::kReference) {
        w.flags = uint8_t((IsInput(r.direction) ? kRegionFlagInput : 0) |
                          (IsOutput(r.direction) ? kRegionFlagOutput : 0) |
                          (r.single_send ? kRegionFlagSingleSend : 0));
      }
      param_wire.push_back(w);
    }
  }
  wire.clear();
  if (dialect == Dialect::kSpec) {
    size_t return_regions = 0;
    for (const WireRegion& w : param_wire) return_regions += IsReturn(params[w.param].spec);
    WireRegion meta;
    meta.param = WireRegion::kMetadata;
    // A routine that returns only streams: one zero entry (an empty list).
    meta.size = static_cast<uint32_t>(std::max<size_t>(return_regions, 1) *
                                      (use_windows ? kMetadataWindowEntrySize : kMetadataEntrySize));
    wire.push_back(meta);
  }
  wire.insert(wire.end(), param_wire.begin(), param_wire.end());
  wire.insert(wire.end(), stream_wire.begin(), stream_wire.end());
  wire.insert(wire.end(), internal_wire.begin(), internal_wire.end());
  if (wire.size() > kMaxRegionsPerMessage) {
    return InvalidArgumentError("layout needs " + std::to_string(wire.size()) +
                                " memory regions; one MRSP message carries at most " +
                                std::to_string(kMaxRegionsPerMessage));
  }
  streams.clear();
  output_windows = 0;
  for (const WireRegion& w : wire) {
    if (w.param == WireRegion::kMetadata || w.internal) continue;
    const RegionSpec& r = params[w.param].spec;
    if (!r.stream.enabled()) continue;
    const bool input = r.direction == Direction::kIn;
    if (!input) output_windows += r.stream.window;
    streams.emplace_back(w.param, &w, input, static_cast<uint32_t>(r.stream.chunk_size),
                         r.stream.window, "stream " + Quote(r.name));
  }
  return Status::Ok();
}

Status ClientSession::Impl::Register() {
  for (size_t i = 0; i < params.size(); ++i) {
    Param& p = params[i];
    if (p.spec.direction == Direction::kInternal) continue;
    if (p.spec.external_buffer != nullptr) {
      p.data = static_cast<std::byte*>(p.spec.external_buffer);
    } else {
      NAARPC_ASSIGN_OR_RETURN(p.owned, Buffer::Allocate(p.spec.size));
      p.data = p.owned.data();
    }
    // Minimal access: the NAA writes only return regions (with windows:
    // only through a window bound while a call runs).
    const bool windowed = use_windows && IsReturn(p.spec);
    const uint32_t access = !IsOutput(p.spec.direction) ? 0
                            : windowed                  ? (kAccessLocalWrite | kAccessMwBind)
                                                        : (kAccessLocalWrite | kAccessRemoteWrite);
    auto mr = conn->RegisterMemory(p.data, p.spec.size, access);
    if (!mr.ok()) return mr.status().WithContext("registering " + Quote(p.spec.name));
    p.mr = std::move(mr).value();
    if (windowed) {
      auto w = conn->AllocateWindow();
      if (!w.ok()) return w.status().WithContext("memory window for " + Quote(p.spec.name));
      p.window = std::move(w).value();
    }
  }
  if (options.dialect == Dialect::kSpec) {
    NAARPC_ASSIGN_OR_RETURN(metadata, Buffer::Allocate(wire[0].size));
    // The return addresses, big-endian, in write-back order (with windows:
    // and each call's window key, OpenWindows).
    size_t k = 0;
    metadata_params.clear();
    for (const WireRegion& w : wire) {
      if (w.param == WireRegion::kMetadata || w.internal) continue;
      const Param& p = params[w.param];
      if (!IsReturn(p.spec)) continue;
      auto* entry = reinterpret_cast<uint8_t*>(metadata.data()) +
                    k * (use_windows ? kMetadataWindowEntrySize : kMetadataEntrySize);
      if (use_windows) {
        PutMetadataWindowEntry(entry, p.mr->remote_addr() + w.offset, p.window->rkey());
      } else {
        PutBe64(entry, p.mr->remote_addr() + w.offset);
      }
      metadata_params.push_back(w.param);
      ++k;
    }
    auto mr = conn->RegisterMemory(metadata.data(), metadata.size(), 0);
    if (!mr.ok()) return mr.status().WithContext("registering the metadata region");
    metadata_mr = std::move(mr).value();
  }
  NAARPC_RETURN_IF_ERROR(ep.SetUp(*conn));
  for (WireRegion& w : wire) {
    if (w.internal) continue;
    const MemoryRegion& mr = w.param == WireRegion::kMetadata ? *metadata_mr : *params[w.param].mr;
    w.local_addr = mr.remote_addr() + w.offset;
    w.lkey = mr.lkey();
  }
  return Status::Ok();
}

Status ClientSession::Impl::RunMrsp(Deadline call_deadline) {
  AdvertisementRequestMessage req;
  for (const WireRegion& w : wire) {
    RegionRequest r;
    r.flags = w.flags;
    r.size = w.size;
    if (w.param != WireRegion::kMetadata && params[w.param].spec.stream.enabled()) {
      const Param& p = params[w.param];
      r.requested_naa_address = p.spec.stream.chunk_size;  // docs/protocol.md 15.1
      r.addr = p.mr->remote_addr();
      r.rkey = p.mr->rkey();
    } else if (w.internal) {
      r.requested_naa_address = w.naa_address;
    } else if (w.param == WireRegion::kMetadata) {
      r.addr = metadata_mr->remote_addr();
      r.rkey = metadata_mr->rkey();
    } else {
      const Param& p = params[w.param];
      r.addr = p.mr->remote_addr() + w.offset;
      r.rkey = p.mr->rkey();
    }
    req.regions.push_back(r);
  }
  if (use_windows) req.capabilities = kMrspCapMemoryWindows;
  const Deadline deadline = Deadline::Earlier(call_deadline, Deadline::After(options.mrsp_timeout));
  const uint64_t recv_id = internal::Endpoint::MrspRecvId();
  const uint64_t send_id = internal::Endpoint::MrspSendId();
  NAARPC_RETURN_IF_ERROR(ep.PostMrspReceive());
  NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kMrspSending));
  NAARPC_RETURN_IF_ERROR(ep.SendMrsp(MrspMessage(req)));

  bool sent = false, received = false;
  uint32_t reply_len = 0;
  Status polled = internal::PollUntil(
      *conn, deadline, "MRSP", [&](const Completion& c, bool& done) -> Status {
        if (c.status != CompletionStatus::kSuccess) {
          return internal::CompletionFailure(
              c, c.wr_id == send_id ? "MRSP send" : "MRSP receive", *conn);
        }
        if (c.wr_id == send_id) {
          sent = true;
          if (sm.state() == CommState::kMrspSending) {
            NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kMrspReceiving));
          }
        } else if (c.wr_id == recv_id) {
          if (c.opcode != WorkOpcode::kRecv) {
            return ProtocolError("MRSP: expected a SEND from the NAA, got an RDMA write");
          }
          received = true;
          reply_len = c.byte_len;
        } else {
          return ProtocolError("MRSP: unexpected completion wr_id " + std::to_string(c.wr_id));
        }
        done = sent && received;
        return Status::Ok();
      });
  if (polled.code() == StatusCode::kDeadlineExceeded) {
    // Say what was not seen (docs/protocol.md 7.4).
    if (call_deadline.expired()) {
      return DeadlineExceededError(std::string("MRSP: the call's deadline passed before the NAA ") +
                                   (sent ? "answered" : "acknowledged") + " the MRSP request");
    }
    const std::string ms = std::to_string(options.mrsp_timeout.count()) + " ms";
    if (!sent) {
      return DeadlineExceededError(
          "MRSP: the request was not acknowledged within " + ms +
          " (the peer's queue pair does not take it: unreachable, or not serving this connection)");
    }
    return DeadlineExceededError(
        "MRSP: the NAA acknowledged the request but sent no answer within " + ms +
        " (a NAAICE NAA answers only an MRSP request it accepts, and is woken only by the "
        "solicited-event bit, which naarpc sets: check that the peer is a NAAICE NAA and "
        "expects the " + std::string(DialectName(options.dialect)) + " dialect)");
  }
  NAARPC_RETURN_IF_ERROR(polled);
  if (sm.state() == CommState::kMrspSending) {
    NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kMrspReceiving));
  }

  auto reply = ep.ReceivedMrsp(reply_len);
  if (!reply.ok()) return reply.status().WithContext("MRSP answer from the NAA");
  if (const auto* err = std::get_if<ErrorMessage>(&*reply)) {
    return Status(StatusCode::kMrspError,
                  "NAA rejected the memory regions: MRSP error " + Hex(err->code) +
                      " (" + std::string(MrspErrorName(err->code)) + ")")
        .set_wire_code(err->code);
  }
  const auto* adv = std::get_if<AdvertisementMessage>(&*reply);
  if (adv == nullptr) {
    return ProtocolError("MRSP: the NAA answered with an Advertisement+Request, expected Advertisement");
  }
  if (use_windows && !(adv->capabilities & kMrspCapMemoryWindows)) {
    return FailedPreconditionError(
        "MRSP: the NAA did not accept per-call memory windows (capability 0x01, "
        "docs/protocol.md 3.6): it predates them, is not a naarpc NAA, or turned them off "
        "(ServerOptions::memory_windows); open the session without "
        "ClientOptions::memory_windows to give it connection-long keys");
  }
  size_t expected = 0;
  for (const WireRegion& w : wire) expected += !w.internal;
  if (adv->regions.size() != expected) {
    return ProtocolError("MRSP: the NAA advertised " + std::to_string(adv->regions.size()) +
                         " regions, expected " + std::to_string(expected) +
                         (streams.empty() ? std::string()
                                          : ": it does not support naarpc streams (it did not "
                                            "advertise the stream rings, docs/protocol.md 15.5)"));
  }
  size_t k = 0;
  for (WireRegion& w : wire) {
    if (w.internal) continue;
    const RegionAdvertisement& a = adv->regions[k++];
    if (a.size < w.size) {
      return ProtocolError("MRSP: NAA region " + std::to_string(k - 1) + " has " +
                           std::to_string(a.size) + " bytes, requested " +
                           std::to_string(w.size));
    }
    w.peer_addr = a.addr;
    w.peer_rkey = a.rkey;
  }
  return sm.Transition(CommState::kMrspDone);
}

Status ClientSession::Impl::DoCall(uint8_t fncode, Deadline deadline,
                                   const CallOptions& call_options) {
  NAARPC_RETURN_IF_ERROR(BeginCall(fncode, deadline, call_options));
  ForgetNotify();  // a blocking call: PollCompletions arms and consumes on its own
  if (streams.empty()) return FinishCall();
  Status s = RunStreams(*call_options.streams, call.write_id, deadline, call.status_imm);
  if (!s.ok() && s.code() != StatusCode::kProtocolError &&
      s.code() != StatusCode::kDeadlineExceeded) {
    // Say where each stream stood (a frame out of sequence and a deadline
    // say it already): e.g. the NAA found one of our frames out of sequence
    // and closed the connection, failing a completion or a post.
    s = s.WithContext("mid-stream" + StreamTotals());
  }
  call.written = call.answered = s.ok();
  return EndCall(std::move(s));
}

Status ClientSession::Impl::BeginCall(uint8_t fncode, Deadline deadline,
                                      const CallOptions& call_options) {
  if (call.active) return FailedPreconditionError("a call is already in flight on this session");
  if (sm.failed()) {
    return FailedPreconditionError("session is in ERROR after an earlier failure; reopen it");
  }
  if (sm.state() != CommState::kMrspDone && sm.state() != CommState::kFinished) {
    return FailedPreconditionError(std::string("cannot call in state ") +
                                   std::string(CommStateName(sm.state())));
  }
  if (fncode < kMinFunctionCode || fncode > kMaxFunctionCode) {
    return InvalidArgumentError("function code " + std::to_string(fncode) +
                                " out of range 1..127");
  }
  if (call_options.user_bits > 0xffffffu) {
    return InvalidArgumentError("user_bits must fit in 24 bits");
  }
  if (call_options.user_bits != 0 && options.dialect != Dialect::kReference) {
    return InvalidArgumentError("user_bits need the reference dialect");
  }
  if ((call_options.streams != nullptr) != !streams.empty()) {
    return InvalidArgumentError(streams.empty()
                                    ? "CallOptions::streams is set, but the session has no streams"
                                    : "the session has " + std::to_string(streams.size()) +
                                          " stream(s): CallOptions::streams must be set");
  }
  const auto& lengths = call_options.send_lengths;
  if (!lengths.empty() && lengths.size() != params.size()) {
    return InvalidArgumentError("send_lengths has " + std::to_string(lengths.size()) +
                                " entries, expected " + std::to_string(params.size()));
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (IsCallInput(params[i].spec) && lengths[i] > params[i].spec.size) {
      return InvalidArgumentError("parameter " + Quote(params[i].spec.name) + ": send length " +
                                  std::to_string(lengths[i]) + " exceeds its size " +
                                  std::to_string(params[i].spec.size));
    }
  }

  // Inputs in region order: [metadata], then input slices (prefixes).
  slices.clear();
  const WireRegion* first_return = nullptr;
  const WireRegion* first_advertised = nullptr;
  for (const WireRegion& w : wire) {
    if (w.internal) continue;
    if (w.param == WireRegion::kMetadata) {
      if (options.metadata_every_call || calls_completed == 0 || use_windows) {
        slices.push_back({{w.local_addr, w.size, w.lkey}, w.peer_addr, w.peer_rkey});
      }
      continue;
    }
    const Param& p = params[w.param];
    if (first_advertised == nullptr) first_advertised = &w;
    if (IsReturn(p.spec) && first_return == nullptr) first_return = &w;
    if (!IsCallInput(p.spec)) continue;
    if (p.spec.single_send && calls_completed > 0) continue;
    const uint64_t want = lengths.empty() ? p.spec.size : lengths[w.param];
    if (want <= w.offset) continue;
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(w.size, want - w.offset));
    slices.push_back({{w.local_addr, len, w.lkey}, w.peer_addr, w.peer_rkey});
  }
  if (slices.empty()) {
    // Nothing to send (all inputs empty or single-send, or streams only): a
    // zero-length WRITE_WITH_IMM still carries the function code.
    const WireRegion& w = first_return != nullptr ? *first_return : *first_advertised;
    slices.push_back({{w.local_addr, 0, w.lkey}, w.peer_addr, w.peer_rkey});
  }

  NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kDataSending));
  call = CallInFlight{.active = true, .fncode = fncode, .deadline = deadline};
  // The result's receive must be up before the request leaves (the NAA may
  // answer at once); the spare of kDataRecvDepth is posted after it, while
  // the NAA works.
  Status s;
  // Streams: the NAA may write output chunks as soon as the request lands,
  // so their receives go up first (docs/protocol.md 15.3).
  const int before = streams.empty() ? 1 : internal::kDataRecvDepth + int(output_windows);
  while (ep.posted_data_recvs() < before) {
    s = PostDataRecv();
    if (!s.ok()) return Fail(s.WithContext("posting the result receive"));
  }
  // The windows open (bind work requests, then the keys in the metadata)
  // before the writes that carry the request.
  if (use_windows) {
    s = OpenWindows();
    if (!s.ok()) return Fail(s.WithContext("opening the call's memory windows"));
  }
  const uint32_t imm = EncodeRequestImmediate(options.dialect, fncode, call_options.user_bits);
  // The NAA's answer implies our writes landed, so the final write is
  // signaled only when the send queue needs its slots back; a signaled one
  // is waited for within this call (so none is pending between calls).
  auto posted = ep.PostWrites(slices, imm);
  if (!posted.ok()) return Fail(posted.status().WithContext("posting the input writes"));
  call.write_id = posted->wr_id;
  call.written = !posted->signaled;
  while (ep.posted_data_recvs() < internal::kDataRecvDepth) {
    s = PostDataRecv();
    if (!s.ok()) return Fail(s.WithContext("posting the result receive"));
  }
  return Status::Ok();
}

Status ClientSession::Impl::OnCallCompletion(const Completion& c, bool& done) {
  if (c.status != CompletionStatus::kSuccess) {
    return internal::CompletionFailure(
        c, WrIdKind(c.wr_id) == WrKind::kDataRecv ? "result receive" : "input write", *conn);
  }
  if (c.wr_id == call.write_id) {
    call.written = true;
    ep.OnSendCompleted(c.wr_id);
    if (sm.state() == CommState::kDataSending) {
      NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kDataReceiving));
    }
  } else if (WrIdKind(c.wr_id) == WrKind::kDataRecv) {
    // Receives complete in posting order: this is the oldest posted one.
    ep.DataRecvConsumed();
    if (c.opcode != WorkOpcode::kRecvRdmaWithImm || !c.has_imm) {
      return ProtocolError("expected the NAA's WRITE_WITH_IMM, got a SEND");
    }
    if (call.answered) return ProtocolError("the NAA wrote again after its status");
    call.answered = true;
    call.status_imm = c.imm_data;
  } else {
    return ProtocolError("unexpected completion wr_id " + std::to_string(c.wr_id));
  }
  done = call.written && call.answered;
  return Status::Ok();
}

// Non-blocking progress of a call started by BeginCall: arms the
// notification (unless still armed), then polls once (what completed before
// the arming raises no event), and, if the call has not ended, WaitNotify
// (Deadline::Now()) as the last step before its owner sleeps on notify_fd.
// Nothing is polled twice: one progress step of the transport per state.
std::optional<Status> ClientSession::Impl::ContinueCall() {
  if (!call.active) return FailedPreconditionError("no call in flight on this session");
  if (!conn) return EndCall(DisconnectedError("the session was closed during the call"));
  std::array<Completion, 4> batch;
  // Takes n completions of the batch (all of them, even once done); the
  // call's status if they end it.
  auto take = [&](size_t n) -> std::optional<Status> {
    bool done = false;
    for (size_t i = 0; i < n; ++i) {
      Status s = OnCallCompletion(batch[i], done);
      if (!s.ok()) return EndCall(std::move(s));
    }
    if (done) return EndCall(Status::Ok());
    return std::nullopt;
  };
  // WaitNotify(now): true/false as it returns, or the call's status once the
  // connection is down and nothing is left.
  auto wait_now = [&](std::optional<Status>& end) -> bool {
    for (;;) {
      Result<bool> event = conn->WaitNotify(Deadline::Now());
      if (event.ok()) {
        notify_maybe_raised = false;
        if (*event) notify_armed = false;  // consumed: the CQ is unarmed
        return *event;
      }
      // Down: what is left completes as flushed work, or nothing is left.
      Result<size_t> left = conn->TryPollCompletions(batch);
      if (!left.ok() || *left == 0) {
        end = EndCall(event.status().WithContext("waiting for the NAA"));
        return false;
      }
      if ((end = take(*left))) return false;
    }
  };
  std::optional<Status> end;
  for (;;) {
    if (notify_armed && notify_maybe_raised) {
      // The event of an earlier arming is probably raised (the last call
      // ended on a completion taken without waiting): consume it first, so
      // the descriptor waits for what comes next.
      wait_now(end);
      if (end) return end;
    }
    if (!notify_armed) {
      Status s = conn->RequestNotify(NotifyMode::kNextCompletion);
      if (!s.ok()) return EndCall(s.WithContext("arming the completion notification"));
      notify_armed = true;
      notify_maybe_raised = false;
    }
    Result<size_t> n = conn->TryPollCompletions(batch);
    if (!n.ok()) return EndCall(n.status().WithContext("waiting for the NAA"));
    if (*n > 0) notify_maybe_raised = true;
    if ((end = take(*n))) return end;
    if (*n == batch.size()) continue;  // more may be queued
    if (call.deadline.expired()) {
      return EndCall(DeadlineExceededError("waiting for the NAA: deadline exceeded"));
    }
    const bool event = wait_now(end);
    if (end) return end;
    if (!event) return std::nullopt;  // armed; notify_fd() signals the next step
  }
}

// Waits on the connection itself (as FinishCall) until the call ends or
// `until` passes.
std::optional<Status> ClientSession::Impl::WaitCall(Deadline until) {
  if (!call.active) return FailedPreconditionError("no call in flight on this session");
  ForgetNotify();  // PollCompletions arms and consumes on its own
  if (!conn) return EndCall(DisconnectedError("the session was closed during the call"));
  const Deadline wait = Deadline::Earlier(until, call.deadline);
  std::array<Completion, 4> batch;
  for (;;) {
    Result<size_t> n = conn->PollCompletions(batch, wait);
    if (!n.ok()) return EndCall(n.status().WithContext("waiting for the NAA"));
    // The whole batch, even once done (a write's completion frees slots).
    bool done = false;
    for (size_t i = 0; i < *n; ++i) {
      Status s = OnCallCompletion(batch[i], done);
      if (!s.ok()) return EndCall(std::move(s));
    }
    if (done) return EndCall(Status::Ok());
    if (*n > 0) continue;
    if (call.deadline.expired()) {
      return EndCall(DeadlineExceededError("waiting for the NAA: deadline exceeded"));
    }
    if (wait.expired()) return std::nullopt;
  }
}

// Blocks until the call started by BeginCall ends.
Status ClientSession::Impl::FinishCall() {
  if (!call.active) return FailedPreconditionError("no call in flight on this session");
  ForgetNotify();  // PollCompletions arms and consumes on its own
  if (!conn) return EndCall(DisconnectedError("the session was closed during the call"));
  return EndCall(internal::PollUntil(
      *conn, call.deadline, "waiting for the NAA",
      [this](const Completion& c, bool& done) { return OnCallCompletion(c, done); }));
}

Status ClientSession::Impl::OpenWindows() {
  window_wrs.clear();
  for (size_t k = 0; k < metadata_params.size(); ++k) {
    Param& p = params[metadata_params[k]];
    if (k > 0 && metadata_params[k - 1] == metadata_params[k]) continue;  // a split parameter
    SendRequest r;
    r.wr_id = MakeWrId(WrKind::kWindow, ++window_seq);
    r.opcode = WorkOpcode::kBindWindow;
    r.signaled = false;
    r.window = p.window.get();
    r.window_region = p.mr.get();
    r.local = {p.mr->remote_addr(), static_cast<uint32_t>(p.spec.size), p.mr->lkey()};
    r.window_access = kAccessRemoteWrite;
    window_wrs.push_back(r);
  }
  NAARPC_RETURN_IF_ERROR(conn->PostSend(window_wrs));
  ep.send_budget().OnPosted(static_cast<uint32_t>(window_wrs.size()), false, 0);
  windows_open = true;
  // This call's keys, next to the addresses the NAA writes to.
  for (size_t k = 0; k < metadata_params.size(); ++k) {
    auto* entry = reinterpret_cast<uint8_t*>(metadata.data()) + k * kMetadataWindowEntrySize;
    PutBe32(entry + 8, params[metadata_params[k]].window->rkey());
  }
  return Status::Ok();
}

Status ClientSession::Impl::CloseWindows(std::optional<Deadline> wait) {
  windows_open = false;
  if (!conn) return Status::Ok();
  window_wrs.clear();
  for (size_t k = 0; k < metadata_params.size(); ++k) {
    if (k > 0 && metadata_params[k - 1] == metadata_params[k]) continue;
    SendRequest r;
    r.wr_id = MakeWrId(WrKind::kWindow, ++window_seq);
    r.opcode = WorkOpcode::kLocalInvalidate;
    r.signaled = false;
    r.rkey = params[metadata_params[k]].window->rkey();
    window_wrs.push_back(r);
  }
  window_wrs.back().signaled = true;  // its completion frees every earlier request
  const uint64_t last = window_wrs.back().wr_id;
  Status s = conn->PostSend(window_wrs);
  if (s.ok() && wait) {
    ep.send_budget().OnPosted(static_cast<uint32_t>(window_wrs.size()), true, last);
    // Blocks on the connection (a local completion, also from ContinueCall):
    // PollCompletions arms and consumes on its own.
    ForgetNotify();
    s = internal::PollUntil(*conn, *wait, "invalidating the call's memory windows",
                            [&](const Completion& c, bool& done) -> Status {
                              if (c.status != CompletionStatus::kSuccess) {
                                return internal::CompletionFailure(
                                    c, "invalidating the call's memory windows", *conn);
                              }
                              ep.OnSendCompleted(c.wr_id);
                              if (WrIdKind(c.wr_id) == WrKind::kDataRecv) ep.DataRecvConsumed();
                              done = c.wr_id == last;
                              return Status::Ok();
                            });
  }
  // Not closed in order: the caller fails the session, which ends the
  // connection and with it the NAA's access.
  return s;
}

Status ClientSession::Impl::EndCall(Status s) {
  // The NAA's access ends before the caller sees results or regains its
  // buffers, whatever ended the call.
  if (windows_open) {
    // Success: invalidated and waited for (a local operation, bounded by
    // its own deadline, not the call's). Otherwise the invalidates are
    // posted (they take effect in send-queue order, at once) and the
    // session fails below without waiting for a peer that may be stuck:
    // deallocating the windows and the connection ends the access too,
    // before the caller regains its buffers.
    Status closed = CloseWindows(s.ok() ? Deadline::After(options.mrsp_timeout)
                                        : std::optional<Deadline>());
    if (!closed.ok() && s.ok()) s = closed;
  }
  call.active = false;
  const uint8_t fncode = call.fncode;
  const bool written = call.written;
  const uint32_t status_imm = call.status_imm;
  // Names the call in errors; built only when one occurs.
  auto what = [fncode] { return "call of function " + std::to_string(fncode); };
  if (!s.ok() && s.code() == StatusCode::kDeadlineExceeded && streams.empty()) {
    s = DeadlineExceededError(
        what() + ": no answer from the NAA before the deadline" +
        (written ? "" : " (the inputs were not acknowledged either)") +
        ": its kernel may still run, or the NAA is stuck or unreachable; an NAA built on the "
        "NAAICE reference library also never answers a function code it does not serve: "
        "check that the NAA serves function " + std::to_string(fncode) + " in the " +
        std::string(DialectName(options.dialect)) + " dialect");
  } else if (!s.ok()) {
    s = s.WithContext(what());
  }
  if (!s.ok()) return Fail(s);
  if (sm.state() == CommState::kDataSending) {
    NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kDataReceiving));
  }
  NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kFinished));
  ++calls_completed;
  const uint8_t naa_status = DecodeStatusImmediate(status_imm);
  if (naa_status == kNaaStatusKernelTimeout) {
    // The NAA's kernel may still run on these regions: the NAA closes the
    // connection, and so do we (docs/protocol.md 7.4).
    return Fail(Status(StatusCode::kNaaError,
                       what() + ": NAA returned status 0x02 (kernel timeout); the connection "
                                "is closed, since the kernel may still be running: reopen the "
                                "session")
                    .set_wire_code(naa_status));
  }
  if (naa_status != kNaaStatusSuccess) {
    return Status(StatusCode::kNaaError, what() + ": NAA returned status " + Hex(naa_status) + " (" +
                                             std::string(NaaStatusName(naa_status)) + ")")
        .set_wire_code(naa_status);
  }
  return Status::Ok();
}

Result<bool> ClientSession::Impl::PostFrame(LocalBuffer local, uint64_t remote_addr,
                                            uint32_t rkey, uint32_t imm) {
  if (ep.send_budget().NeedsReclaim(1)) return false;
  const WriteSlice slice{local, remote_addr, rkey};
  NAARPC_RETURN_IF_ERROR(ep.PostWrites(std::span<const WriteSlice>(&slice, 1), imm).status());
  return true;
}

// docs/protocol.md 15: writes input chunks as the windows allow, takes output
// chunks and credits them, until the NAA's status (which comes only once every
// stream has ended) and our last signaled write are in.
Status ClientSession::Impl::RunStreams(StreamHandler& handler, uint64_t write_id,
                                       Deadline deadline, uint32_t& status_imm) {
  for (Stream& st : streams) {
    st.outbound.Reset();
    st.inbound.Reset();
  }
  bool answered = false;
  std::array<Completion, 8> batch;
  auto next_check = Deadline::CoarseNow() + kStreamCheckInterval;
  for (;;) {
    // Send what the windows and the send queue allow: owed credits first.
    for (size_t i = 0; i < streams.size(); ++i) {
      Stream& st = streams[i];
      const Param& p = params[st.param];
      if (!st.input) {
        // One credit per chunk (the NAA posted a receive for each).
        while (st.inbound.credited() < st.inbound.received()) {
          if (ep.send_budget().NeedsReclaim(1)) break;
          NAARPC_ASSIGN_OR_RETURN(
              bool posted,
              PostFrame({p.mr->remote_addr(), 0, p.mr->lkey()}, st.wire->peer_addr,
                        st.wire->peer_rkey, st.inbound.TakeCredit(uint8_t(i), false)));
          if (!posted) return InternalError("send queue full after the budget allowed a credit");
        }
        continue;
      }
      while (st.outbound.CanSend()) {
        if (ep.send_budget().NeedsReclaim(1)) break;
        const uint64_t slot = st.outbound.NextSlotOffset();
        size_t len = 0;
        if (!st.outbound.stop()) {
          Result<size_t> n = handler.Produce(i, std::span<std::byte>(p.data + slot, st.chunk));
          if (!n.ok()) {
            return n.status().WithContext(st.name() + ": producing chunk " +
                                          std::to_string(st.outbound.sent()));
          }
          if (*n > st.chunk) {
            return InvalidArgumentError(st.name() + ": Produce returned " + std::to_string(*n) +
                                        " bytes for a chunk of " + std::to_string(st.chunk));
          }
          len = *n;
        }
        // The receive for the credit this chunk earns goes up first.
        NAARPC_RETURN_IF_ERROR(PostDataRecv());
        const uint64_t sequence = st.outbound.sent();
        const uint32_t imm = st.outbound.TakeChunk(uint8_t(i), static_cast<uint32_t>(len));
        NAARPC_ASSIGN_OR_RETURN(
            bool posted,
            PostFrame({p.mr->remote_addr() + slot, static_cast<uint32_t>(len), p.mr->lkey()},
                      st.wire->peer_addr + slot, st.wire->peer_rkey, imm));
        if (!posted) {
          return InternalError("send queue full after the budget allowed chunk " +
                               std::to_string(sequence));
        }
      }
    }
    if (answered && !ep.send_budget().signal_pending()) return Status::Ok();

    // Waits in slices, and the handler may end the call between them (Check).
    Result<size_t> n = conn->PollCompletions(
        batch, Deadline::Earlier(deadline, Deadline::At(next_check)));
    if (!n.ok()) return n.status().WithContext("streaming");
    if (const auto now = Deadline::CoarseNow(); now >= next_check) {
      next_check = now + kStreamCheckInterval;
      NAARPC_RETURN_IF_ERROR(handler.Check());
    }
    if (*n == 0 && deadline.expired()) {
      return DeadlineExceededError(
          std::string(answered ? "the NAA answered, but our last write was not acknowledged"
                               : "no status from the NAA") +
          " before the deadline, mid-stream" + StreamTotals());
    }
    for (size_t k = 0; k < *n; ++k) {
      const Completion& c = batch[k];
      if (c.status != CompletionStatus::kSuccess) {
        return internal::CompletionFailure(
            c, WrIdKind(c.wr_id) == WrKind::kDataRecv ? "stream receive" : "stream write", *conn);
      }
      if (WrIdKind(c.wr_id) == WrKind::kDataWrite) {
        ep.OnSendCompleted(c.wr_id);
        if (c.wr_id == write_id && sm.state() == CommState::kDataSending) {
          NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kDataReceiving));
        }
        continue;
      }
      if (WrIdKind(c.wr_id) != WrKind::kDataRecv) {
        return ProtocolError("unexpected completion wr_id " + std::to_string(c.wr_id));
      }
      ep.DataRecvConsumed();
      if (c.opcode != WorkOpcode::kRecvRdmaWithImm || !c.has_imm) {
        return ProtocolError("expected the NAA's WRITE_WITH_IMM, got a SEND");
      }
      if (answered) return ProtocolError("the NAA wrote again after its status");
      if (!IsStreamFrame(c.imm_data)) {
        // The status: every stream must have ended and every input chunk
        // been credited (docs/protocol.md 15.4), unless the kernel overran
        // its time limit (the NAA then closes the connection at once, 7.4).
        const bool timeout = DecodeStatusImmediate(c.imm_data) == kNaaStatusKernelTimeout;
        for (const Stream& st : streams) {
          if (!timeout && (!st.ended() || (st.input && !st.outbound.all_consumed()))) {
            return ProtocolError("the NAA sent its status before " + st.name() + " ended (" +
                                 st.Totals() + ")");
          }
        }
        answered = true;
        status_imm = c.imm_data;
        continue;
      }
      const std::optional<StreamFrame> f = DecodeStreamFrame(c.imm_data);
      if (!f || f->stream >= streams.size()) {
        char imm[16];
        std::snprintf(imm, sizeof imm, "0x%08x", c.imm_data);
        return ProtocolError(std::string("stream frame ") + imm + " is not valid for the " +
                             std::to_string(streams.size()) + " stream(s) of this routine");
      }
      Stream& st = streams[f->stream];
      if (f->credit) {
        if (!st.input) return ProtocolError("the NAA credited output " + st.name());
        NAARPC_RETURN_IF_ERROR(st.outbound.OnCredit(*f, c.byte_len));
        continue;
      }
      if (st.input) return ProtocolError("the NAA wrote a chunk into input " + st.name());
      const uint64_t sequence = st.inbound.received();
      NAARPC_ASSIGN_OR_RETURN(const uint32_t length, st.inbound.OnChunk(*f, c.byte_len));
      const std::byte* chunk = params[st.param].data + st.inbound.SlotOffset(sequence);
      if (Status s = handler.Consume(f->stream, std::span<const std::byte>(chunk, length), f->end);
          !s.ok()) {
        return s.WithContext(st.name() + ": consuming chunk " + std::to_string(sequence));
      }
      // The receive the chunk consumed is replaced for the next one.
      NAARPC_RETURN_IF_ERROR(PostDataRecv());
    }
  }
}

// ---------------------------------------------------------------------------

ClientSession::ClientSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClientSession::~ClientSession() { Close().IgnoreError(); }

Result<std::unique_ptr<ClientSession>> ClientSession::Open(
    Transport& transport, const std::string& host, uint16_t port,
    std::vector<RegionSpec> regions, const ClientOptions& options) {
  return Open(transport, host, port, std::move(regions), options, Deadline::Infinite());
}

Result<std::unique_ptr<ClientSession>> ClientSession::Open(
    Transport& transport, const std::string& host, uint16_t port,
    std::vector<RegionSpec> regions, const ClientOptions& options, Deadline deadline) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.memory_windows.value_or(false)) {
    if (options.dialect != Dialect::kSpec) {
      return InvalidArgumentError(
          "ClientOptions::memory_windows needs the spec dialect (the window keys travel in its "
          "metadata region, docs/protocol.md 4.5)");
    }
    for (const RegionSpec& r : regions) {
      if (r.stream.enabled()) {
        return InvalidArgumentError("ClientOptions::memory_windows: not with streams (" +
                                    Quote(r.name) + "); their rings keep connection-long keys");
      }
      if (IsReturn(r) && r.size > UINT32_MAX) {
        return InvalidArgumentError("ClientOptions::memory_windows: result " + Quote(r.name) +
                                    " is larger than one window binds here (4 GiB - 1)");
      }
    }
    impl->use_windows = true;
  }
  NAARPC_RETURN_IF_ERROR(impl->BuildLayout(std::move(regions)));
  NAARPC_RETURN_IF_ERROR(impl->sm.Transition(CommState::kReady));
  const std::string where = "NAA at " + HostPort(host, port);
  ConnectOptions connect;
  connect.retry_refused = options.retry_refused_connect;
  auto conn = transport.Connect(
      host, port, Deadline::Earlier(deadline, Deadline::After(options.connect_timeout)), connect);
  if (!conn.ok()) {
    if (conn.status().code() == StatusCode::kDeadlineExceeded && deadline.expired()) {
      return DeadlineExceededError("connecting to " + where +
                                   ": the call's deadline passed before the connection was "
                                   "established");
    }
    return conn.status().WithContext("connecting to " + where);
  }
  impl->conn = std::move(conn).value();
  NAARPC_RETURN_IF_ERROR(impl->sm.Transition(CommState::kConnected));
  Status s;
  if (impl->use_windows && !impl->conn->supports_memory_windows()) {
    s = FailedPreconditionError(
        "ClientOptions::memory_windows: the transport's device has no type-2 memory windows");
  }
  if (s.ok()) s = impl->Register();
  if (s.ok()) s = impl->RunMrsp(deadline);
  if (s.ok()) {
    // A call posts at most one write per host-side wire region.
    uint32_t max_requests = 0;
    for (const auto& w : impl->wire) max_requests += !w.internal;
    // Per-call windows: a bind per return parameter before the writes.
    if (impl->use_windows) max_requests += static_cast<uint32_t>(impl->metadata_params.size());
    impl->ep.StartSendBudget(max_requests);
  }
  if (!s.ok()) {
    impl->sm.Fail();
    impl->conn->Disconnect().IgnoreError();
    return s.WithContext(where);
  }
  return std::unique_ptr<ClientSession>(new ClientSession(std::move(impl)));
}

std::span<std::byte> ClientSession::buffer(size_t index) {
  if (index >= impl_->params.size()) return {};
  auto& p = impl_->params[index];
  if (p.data == nullptr) return {};
  return {p.data, p.spec.size};
}

size_t ClientSession::region_count() const { return impl_->params.size(); }
const RegionSpec& ClientSession::spec(size_t index) const { return impl_->params.at(index).spec; }

Status ClientSession::Call(uint8_t function_code, Deadline deadline, const CallOptions& options) {
  return impl_->DoCall(function_code, deadline, options);
}

Status ClientSession::StartCall(uint8_t function_code, Deadline deadline,
                                const CallOptions& options) {
  if (!impl_->streams.empty()) {
    return InvalidArgumentError("StartCall: a session with streams runs its calls with Call()");
  }
  return impl_->BeginCall(function_code, deadline, options);
}

std::optional<Status> ClientSession::ContinueCall() { return impl_->ContinueCall(); }
std::optional<Status> ClientSession::WaitCall(Deadline until) { return impl_->WaitCall(until); }

Status ClientSession::FinishCall() { return impl_->FinishCall(); }

void ClientSession::AbandonCall() {
  if (impl_->call.active) {
    impl_->EndCall(CancelledError("the call was abandoned (its client was destroyed)")).IgnoreError();
  }
}

int ClientSession::notify_fd() const { return impl_->conn ? impl_->conn->notify_fd() : -1; }

bool ClientSession::call_in_flight() const { return impl_->call.active; }

CommState ClientSession::state() const { return impl_->sm.state(); }

bool ClientSession::PeerGone() {
  if (impl_->sm.state() == CommState::kError || !impl_->conn) return true;
  if (impl_->call.active) return false;
  // One non-blocking progress step: a disconnect shows as kDisconnected.
  Result<bool> r = impl_->conn->WaitNotify(Deadline::Now());
  if (r.ok()) {
    // It consumed a raised event (the CQ is unarmed), or none is raised.
    if (*r) impl_->notify_armed = false;
    impl_->notify_maybe_raised = false;
  }
  if (r.ok() || r.status().code() != StatusCode::kDisconnected) return false;
  impl_->Fail(r.status()).IgnoreError();
  return true;
}

Dialect ClientSession::dialect() const { return impl_->options.dialect; }
uint64_t ClientSession::calls_completed() const { return impl_->calls_completed; }

Status ClientSession::Close() {
  if (!impl_ || !impl_->conn) return Status::Ok();
  Status s = impl_->conn->Disconnect();
  if (!impl_->sm.failed() && impl_->sm.state() != CommState::kDisconnected) {
    impl_->sm.Transition(CommState::kDisconnected).IgnoreError();
  }
  // Deregister before the memory goes away, then drop the connection.
  impl_->windows_open = false;
  for (auto& p : impl_->params) p.window.reset();  // before its region
  for (auto& p : impl_->params) p.mr.reset();
  impl_->metadata_mr.reset();
  impl_->ep.ReleaseRegistrations();
  impl_->conn.reset();
  return s;
}

}  // namespace naarpc
