#include "runtime/naa/connection_server.h"

#include <string>

namespace naarpc::internal {

Status ConnectionServer::OnMrspRequest(const Completion& c) {
  if (c.status != CompletionStatus::kSuccess) {
    return CompletionFailure(c, "MRSP receive", *conn_);
  }
  if (c.wr_id != Endpoint::MrspRecvId() || c.opcode != WorkOpcode::kRecv) {
    return ProtocolError("expected the MRSP request (a SEND) first");
  }
  const uint32_t len = c.byte_len;
  // Reserving may wait for reclaimed memory, registering takes time.
  server_.engine.BeforeBlocking();
  auto msg = ep_.ReceivedMrsp(len);
  if (!msg.ok()) return msg.status().WithContext("MRSP request from the host");
  const auto* req = std::get_if<AdvertisementRequestMessage>(&*msg);
  if (req == nullptr) {
    return ProtocolError("MRSP: expected an Advertisement+Request (0x01) from the host");
  }

  // Limits and NAA addresses (docs/protocol.md, "NAA limits").
  if (req->regions.size() > options().max_regions) {
    Log("MRSP: " + std::to_string(req->regions.size()) + " regions requested, limit " +
        std::to_string(options().max_regions));
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
      if (r.requested_naa_address >= options().naa_memory_size) {
        Log("MRSP: NAA address " + std::to_string(r.requested_naa_address) + " out of bounds");
        return SendMrspError(MrspErrorCode::kInvalidAddress);
      }
      if (r.size > options().naa_memory_size - r.requested_naa_address) {
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
  if (total > options().max_bytes_per_connection) {
    Log("MRSP: " + std::to_string(total) + " bytes requested, budget " +
        std::to_string(options().max_bytes_per_connection));
    return SendMrspError(MrspErrorCode::kNotEnoughMemory);
  }
  // Short of memory, idle sessions of peers holding more are reclaimed and
  // their memory waited for (docs/server.md).
  uint64_t in_use = 0;
  if (Status reserved = server_.shared->admission.Reserve(
          place_.admission_id, total, Deadline::After(options().mrsp_timeout), in_use);
      !reserved.ok()) {
    Log("MRSP: " + std::to_string(total) + " bytes requested; the server's memory budget " +
        std::to_string(options().max_total_bytes) + " has " + std::to_string(in_use) +
        " in use (" + reserved.message() + ")");
    return SendMrspError(MrspErrorCode::kNotEnoughMemory);
  }

  regions_.dialect = Dialect::kSpec;
  bool any_plain = false;  // an entry without the internal bit
  for (const RegionRequest& r : req->regions) {
    any_plain |= !(r.flags & kRegionFlagInternal);
    if (!(r.flags & kRegionFlagInternal) && (r.flags & (kRegionFlagInput | kRegionFlagOutput))) {
      regions_.dialect = Dialect::kReference;
    }
  }
  // A routine of streams only (docs/protocol.md 15): the spec dialect would
  // have sent its metadata region, so this is the reference dialect.
  if (!any_plain && stream_count != 0) regions_.dialect = Dialect::kReference;
  // Group the entries, then allocate and register one buffer per group.
  regions_.entries.clear();
  regions_.groups.clear();
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
      e.group = regions_.groups.size();
      regions_.stream_index.push_back(regions_.groups.size());
      regions_.groups.push_back(std::move(g));
      regions_.entries.push_back(e);
      continue;
    }
    const bool internal = r.flags & kRegionFlagInternal;
    const bool is_metadata =
        !internal && regions_.dialect == Dialect::kSpec && regions_.metadata_index == SIZE_MAX;
    if (!internal && !is_metadata && !regions_.groups.empty() && i > 0) {
      const WireEntry& prev = regions_.entries.back();
      const Group& g = regions_.groups.back();
      if (!(g.flags & kRegionFlagInternal) &&
          regions_.groups.size() - 1 != regions_.metadata_index &&
          prev.request.size == options().split_region_size && prev.request.rkey == r.rkey &&
          prev.request.flags == r.flags && prev.request.addr + prev.request.size == r.addr) {
        e.group = regions_.groups.size() - 1;
        e.offset = prev.offset + prev.request.size;
        regions_.groups.back().entry_count++;
        regions_.entries.push_back(e);
        continue;
      }
    }
    Group g;
    g.flags = r.flags;
    g.first_entry = i;
    g.entry_count = 1;
    e.group = regions_.groups.size();
    if (is_metadata) regions_.metadata_index = regions_.groups.size();
    if (internal) {
      regions_.internal_index.push_back(regions_.groups.size());
    } else if (!is_metadata) {
      regions_.param_index.push_back(regions_.groups.size());
    }
    regions_.groups.push_back(std::move(g));
    regions_.entries.push_back(e);
  }
  AdvertisementMessage adv;
  // Per-call windows: spec dialect, no streams (their rings keep
  // connection-long keys, docs/protocol.md 4.5).
  regions_.windows = (req->capabilities & kMrspCapMemoryWindows) && options().memory_windows &&
                     regions_.dialect == Dialect::kSpec && regions_.stream_index.empty();
  if (regions_.windows) adv.capabilities = kMrspCapMemoryWindows;
  for (Group& g : regions_.groups) {
    uint64_t size = 0;
    for (size_t i = 0; i < g.entry_count; ++i) {
      size += regions_.entries[g.first_entry + i].request.size;
    }
    auto mem = Buffer::Allocate(size);
    if (!mem.ok()) {
      Log("MRSP: " + mem.status().ToString());
      return SendMrspError(MrspErrorCode::kNotEnoughMemory);
    }
    g.memory = std::move(mem).value();
  }
  for (Group& g : regions_.groups) {
    if ((g.flags & kRegionFlagInternal) && !(g.flags & kRegionFlagStream)) continue;
    NAARPC_ASSIGN_OR_RETURN(g.mr, conn_->RegisterMemory(g.memory.data(), g.memory.size(),
                                                        kAccessLocalWrite | kAccessRemoteWrite));
    g.local_addr = g.mr->remote_addr();
    g.lkey = g.mr->lkey();
  }
  for (const WireEntry& e : regions_.entries) {
    const Group& g = regions_.groups[e.group];
    if (g.mr) adv.regions.push_back({g.mr->remote_addr() + e.offset, g.mr->rkey(), e.request.size});
  }

  // The receives for the first calls are posted before the host learns our
  // regions, so its WRITE_WITH_IMM always finds one. One spare stays posted
  // while a call runs (see HandleCall).
  for (int i = 0; i < kDataRecvDepth; ++i) NAARPC_RETURN_IF_ERROR(PostDataRecv());
  // Streams: the host's input chunks may follow its request at once, so
  // their receives stay up all the time (docs/protocol.md 15.3).
  for (size_t i = 0; i < regions_.stream_index.size(); ++i) {
    const Group& g = regions_.groups[regions_.stream_index[i]];
    const RegionRequest& host = regions_.entries[g.first_entry].request;
    streams_.list.push_back(std::make_unique<StreamImpl>(*this, static_cast<uint8_t>(i), g, host));
    streams_.ptrs.push_back(streams_.list.back().get());
    if (streams_.list.back()->is_input()) {
      for (uint32_t k = 0; k < streams_.list.back()->window(); ++k) {
        NAARPC_RETURN_IF_ERROR(PostDataRecv());
      }
    }
  }
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kMrspSending));
  NAARPC_RETURN_IF_ERROR(ep_.SendMrsp(MrspMessage(adv)));
  // A reply writes at most one request per parameter wire region. The MRSP
  // send is the first signaled request the budget tracks.
  uint32_t max_requests = 0;
  for (const WireEntry& e : regions_.entries) {
    max_requests += regions_.groups[e.group].mr != nullptr;
  }
  ep_.StartSendBudget(max_requests);
  ep_.send_budget().OnPosted(1, true, Endpoint::MrspSendId());
  // The send completes when the host acknowledges it; a call may already be
  // on its way: completions of either kind are handled as data completions.
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kMrspDone));
  server_.shared->admission.HandshakeDone(place_.admission_id);
  protocol_.phase = Phase::kServing;
  return Status::Ok();
}

Status ConnectionServer::SendMrspError(MrspErrorCode code) {
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kMrspSending));
  const uint64_t send_id = Endpoint::MrspSendId(1);
  NAARPC_RETURN_IF_ERROR(ep_.SendMrsp(MrspMessage(ErrorMessage{static_cast<uint8_t>(code)}), 1));
  // Wait (bounded) until the host has the message, then disconnect.
  Status s = PollUntil(*conn_, Deadline::After(options().mrsp_timeout), "sending MRSP error",
                       [&](const Completion& c, bool& done) {
                         done = c.wr_id == send_id;
                         return Status::Ok();
                       });
  if (!s.ok() && s.code() != StatusCode::kDisconnected) Log(s.ToString());
  protocol_.sm.Fail();  // the connection ends here
  protocol_.phase = Phase::kEnded;
  return Status::Ok();
}

}  // namespace naarpc::internal
