#include "runtime/host/client_session_impl.h"

namespace naarpc {

using internal::Buffer;
using internal::Hex;
using internal::IsInput;
using internal::IsOutput;
using internal::IsReturn;
using internal::Quote;

namespace {

// `s` (from connection setup or the MRSP, before the NAA's MRSP answer
// arrived) with what a disconnect there most likely means: a software NAA
// that refuses a connection at one of its limits closes it right after the
// transport accepted it, and the host sees only a flush or a down
// connection. The code and the transport's detail stay (callers, pools and
// channel failover go by the code).
Status ClosedBeforeMrspAnswer(Status s) {
  if (s.code() != StatusCode::kDisconnected) return s;
  return s.WithContext(
      "the connection ended during the MRSP handshake, before the NAA answered it: the NAA may "
      "have refused the connection at one of its limits (connections, handshakes per peer) - "
      "its log says which");
}

}  // namespace

Status ClientSession::Impl::BuildLayout(std::vector<RegionSpec> specs) {
  const Dialect dialect = options.dialect;
  if (options.max_region_size == 0 || options.max_region_size > kMaxRegionSize) {
    return InvalidArgumentError("max_region_size must be 1.." + std::to_string(kMaxRegionSize));
  }
  size_t outputs = 0, inputs = 0, stream_count = 0;
  uint32_t stream_windows = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    RegionSpec& r = specs[i];
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
      stream_windows += st.window;
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
  if (stream_windows > kMaxStreamWindowTotal) {
    return InvalidArgumentError("the streams' windows add up to " +
                                std::to_string(stream_windows) +
                                " (at most " + std::to_string(kMaxStreamWindowTotal) +
                                ", docs/protocol.md 15.3)");
  }
  if (outputs == 0) {
    return InvalidArgumentError("a call needs at least one output (return) region");
  }
  if (inputs == 0) {
    return InvalidArgumentError("a call needs at least one input region");
  }

  regions.params.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) regions.params[i].spec = std::move(specs[i]);

  // Split parameters into wire regions of at most max_region_size.
  std::vector<WireRegion> param_wire, stream_wire, internal_wire;
  size_t next_stream = 0;
  for (size_t i = 0; i < regions.params.size(); ++i) {
    const RegionSpec& r = regions.params[i].spec;
    if (r.stream.enabled()) {
      // One entry, never split (the ring is at most 2^29 bytes).
      WireRegion w;
      w.param = i;
      w.size = static_cast<uint32_t>(r.size);
      w.flags = r.direction == Direction::kIn ? kStreamFlagsIn : kStreamFlagsOut;
      w.naa_address = r.stream.chunk_size;
      regions.params[i].stream = next_stream++;
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
  regions.wire.clear();
  if (dialect == Dialect::kSpec) {
    size_t return_regions = 0;
    for (const WireRegion& w : param_wire) return_regions += IsReturn(regions.params[w.param].spec);
    WireRegion meta;
    meta.param = WireRegion::kMetadata;
    // A routine that returns only streams: one zero entry (an empty list).
    meta.size = static_cast<uint32_t>(
        std::max<size_t>(return_regions, 1) *
        (windows.enabled ? kMetadataWindowEntrySize : kMetadataEntrySize));
    regions.wire.push_back(meta);
  }
  regions.wire.insert(regions.wire.end(), param_wire.begin(), param_wire.end());
  regions.wire.insert(regions.wire.end(), stream_wire.begin(), stream_wire.end());
  regions.wire.insert(regions.wire.end(), internal_wire.begin(), internal_wire.end());
  if (regions.wire.size() > kMaxRegionsPerMessage) {
    return InvalidArgumentError("layout needs " + std::to_string(regions.wire.size()) +
                                " memory regions; one MRSP message carries at most " +
                                std::to_string(kMaxRegionsPerMessage));
  }
  streams.clear();
  regions.output_windows = 0;
  for (const WireRegion& w : regions.wire) {
    if (w.param == WireRegion::kMetadata || w.internal) continue;
    const RegionSpec& r = regions.params[w.param].spec;
    if (!r.stream.enabled()) continue;
    const bool input = r.direction == Direction::kIn;
    if (!input) regions.output_windows += r.stream.window;
    streams.emplace_back(w.param, &w, input, static_cast<uint32_t>(r.stream.chunk_size),
                         r.stream.window, "stream " + Quote(r.name));
  }
  return Status::Ok();
}

Status ClientSession::Impl::Register() {
  for (size_t i = 0; i < regions.params.size(); ++i) {
    Param& p = regions.params[i];
    if (p.spec.direction == Direction::kInternal) continue;
    if (p.spec.external_buffer != nullptr) {
      p.data = static_cast<std::byte*>(p.spec.external_buffer);
    } else {
      NAARPC_ASSIGN_OR_RETURN(p.owned, Buffer::Allocate(p.spec.size));
      p.data = p.owned.data();
    }
    // Minimal access: the NAA writes only return regions (with windows:
    // only through a window bound while a call runs).
    const bool windowed = windows.enabled && IsReturn(p.spec);
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
    NAARPC_ASSIGN_OR_RETURN(regions.metadata, Buffer::Allocate(regions.wire[0].size));
    // The return addresses, big-endian, in write-back order (with windows:
    // and each call's window key, OpenWindows).
    size_t k = 0;
    regions.metadata_params.clear();
    for (const WireRegion& w : regions.wire) {
      if (w.param == WireRegion::kMetadata || w.internal) continue;
      const Param& p = regions.params[w.param];
      if (!IsReturn(p.spec)) continue;
      auto* entry = reinterpret_cast<uint8_t*>(regions.metadata.data()) +
                    k * (windows.enabled ? kMetadataWindowEntrySize : kMetadataEntrySize);
      if (windows.enabled) {
        PutMetadataWindowEntry(entry, p.mr->remote_addr() + w.offset, p.window->rkey());
      } else {
        PutBe64(entry, p.mr->remote_addr() + w.offset);
      }
      regions.metadata_params.push_back(w.param);
      ++k;
    }
    auto mr = conn->RegisterMemory(regions.metadata.data(), regions.metadata.size(), 0);
    if (!mr.ok()) return mr.status().WithContext("registering the metadata region");
    regions.metadata_mr = std::move(mr).value();
  }
  NAARPC_RETURN_IF_ERROR(ClosedBeforeMrspAnswer(ep.SetUp(*conn)));
  for (WireRegion& w : regions.wire) {
    if (w.internal) continue;
    const MemoryRegion& mr =
        w.param == WireRegion::kMetadata ? *regions.metadata_mr : *regions.params[w.param].mr;
    w.local_addr = mr.remote_addr() + w.offset;
    w.lkey = mr.lkey();
  }
  return Status::Ok();
}

Status ClientSession::Impl::RunMrsp(Deadline call_deadline) {
  AdvertisementRequestMessage req;
  for (const WireRegion& w : regions.wire) {
    RegionRequest r;
    r.flags = w.flags;
    r.size = w.size;
    if (w.param != WireRegion::kMetadata && regions.params[w.param].spec.stream.enabled()) {
      const Param& p = regions.params[w.param];
      r.requested_naa_address = p.spec.stream.chunk_size;  // docs/protocol.md 15.1
      r.addr = p.mr->remote_addr();
      r.rkey = p.mr->rkey();
    } else if (w.internal) {
      r.requested_naa_address = w.naa_address;
    } else if (w.param == WireRegion::kMetadata) {
      r.addr = regions.metadata_mr->remote_addr();
      r.rkey = regions.metadata_mr->rkey();
    } else {
      const Param& p = regions.params[w.param];
      r.addr = p.mr->remote_addr() + w.offset;
      r.rkey = p.mr->rkey();
    }
    req.regions.push_back(r);
  }
  if (windows.enabled) req.capabilities = kMrspCapMemoryWindows;
  const Deadline deadline = Deadline::Earlier(call_deadline, Deadline::After(options.mrsp_timeout));
  const uint64_t recv_id = internal::Endpoint::MrspRecvId();
  const uint64_t send_id = internal::Endpoint::MrspSendId();
  NAARPC_RETURN_IF_ERROR(ClosedBeforeMrspAnswer(ep.PostMrspReceive()));
  NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kMrspSending));
  NAARPC_RETURN_IF_ERROR(ClosedBeforeMrspAnswer(ep.SendMrsp(MrspMessage(req))));

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
  // Received: the NAA answered, and what follows reports on its answer.
  NAARPC_RETURN_IF_ERROR(received ? polled : ClosedBeforeMrspAnswer(polled));
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
  if (windows.enabled && !(adv->capabilities & kMrspCapMemoryWindows)) {
    return FailedPreconditionError(
        "MRSP: the NAA did not accept per-call memory windows (capability 0x01, "
        "docs/protocol.md 3.6): it predates them, is not a naarpc NAA, or turned them off "
        "(ServerOptions::memory_windows); set ClientOptions::memory_windows to false (it "
        "overrides the IDL's memory_windows: required) to give it connection-long keys");
  }
  size_t expected = 0;
  for (const WireRegion& w : regions.wire) expected += !w.internal;
  if (adv->regions.size() != expected) {
    return ProtocolError("MRSP: the NAA advertised " + std::to_string(adv->regions.size()) +
                         " regions, expected " + std::to_string(expected) +
                         (streams.empty() ? std::string()
                                          : ": it does not support naarpc streams (it did not "
                                            "advertise the stream rings, docs/protocol.md 15.5)"));
  }
  size_t k = 0;
  for (WireRegion& w : regions.wire) {
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
  // A plain call's requests are built for these addresses, at most one per
  // wire region (or the one empty write), here so that no call allocates.
  writes.plain.clear();
  writes.plain.reserve(std::max<size_t>(k, 1));
  return sm.Transition(CommState::kMrspDone);
}

}  // namespace naarpc
