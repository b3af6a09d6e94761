#include "runtime/host/client_session_impl.h"

namespace naarpc {

using internal::Hex;
using internal::IsCallInput;
using internal::IsReturn;
using internal::MakeWrId;
using internal::Quote;
using internal::WrIdKind;
using internal::WrKind;
using internal::WriteSlice;

Status ClientSession::Impl::DoCall(uint8_t fncode, Deadline deadline,
                                   const CallOptions& call_options) {
  NAARPC_RETURN_IF_ERROR(BeginCall(fncode, deadline, call_options));
  ForgetNotify();  // a blocking call: PollCompletions arms and consumes on its own
  if (streams.empty()) return FinishCall();
  if (call.chain.active) {
    // The streams start once the request is out: the batches first.
    Status posted = internal::PollUntil(
        *conn, deadline, "waiting for the NAA", [this](const Completion& c, bool& done) {
          NAARPC_RETURN_IF_ERROR(OnCallCompletion(c, done));
          done = !call.chain.active;
          return Status::Ok();
        });
    if (!posted.ok()) return EndCall(std::move(posted));
  }
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
  // What StageGatherInput staged is for this call only, posted or not (a
  // batched chain keeps it until its last batch is posted).
  struct DropStagedOnExit {
    Impl* impl;
    ~DropStagedOnExit() {
      if (!impl->call.chain.active) impl->DropStaged();
    }
  } drop_staged{this};
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
  if (!lengths.empty() && lengths.size() != regions.params.size()) {
    return InvalidArgumentError("send_lengths has " + std::to_string(lengths.size()) +
                                " entries, expected " + std::to_string(regions.params.size()));
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (IsCallInput(regions.params[i].spec) && lengths[i] > regions.params[i].spec.size) {
      return InvalidArgumentError("parameter " + Quote(regions.params[i].spec.name) +
                                  ": send length " + std::to_string(lengths[i]) +
                                  " exceeds its size " +
                                  std::to_string(regions.params[i].spec.size));
    }
  }

  // A plain call posts the requests its first one built.
  const bool plain = PlainCall(call_options);
  bool gathered = false;
  if (!plain || writes.plain.empty()) {
    NAARPC_ASSIGN_OR_RETURN(gathered, BuildWrites(lengths));
    if (plain) internal::BuildWriteSequence(writes.slices, writes.plain);
  }

  NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kDataSending));
  call = CallInFlight{.active = true, .fncode = fncode, .deadline = deadline};
  // The result's receive must be up before the request leaves (the NAA may
  // answer at once); the spare of kDataRecvDepth is posted after it, while
  // the NAA works.
  Status s;
  // Streams: the NAA may write output chunks as soon as the request lands,
  // so their receives go up first (docs/protocol.md 15.3).
  const int before = streams.empty() ? 1 : internal::kDataRecvDepth + int(regions.output_windows);
  while (ep.posted_data_recvs() < before) {
    s = PostDataRecv();
    if (!s.ok()) return Fail(s.WithContext("posting the result receive"));
  }
  // The windows open (bind work requests, then the keys in the metadata)
  // before the writes that carry the request.
  if (windows.enabled) {
    s = OpenWindows();
    if (!s.ok()) return Fail(s.WithContext("opening the call's memory windows"));
  }
  const uint32_t imm = EncodeRequestImmediate(options.dialect, fncode, call_options.user_bits);
  // The NAA's answer implies our writes landed, so the final write is
  // signaled only when the send queue needs its slots back; a signaled one
  // is waited for within this call (so none is pending between calls).
  // A gather chain may pass the budget's sequence: signaled, so the send
  // queue is known free again when the call ends; if the send queue cannot
  // take it at once, in batches as completions free slots (PostChain).
  const uint32_t depth = gathered ? conn->send_queue_depth() : 0;
  const uint32_t unfreed = ep.send_budget().unfreed();
  if (depth != 0 && uint64_t{unfreed} + writes.slices.size() > depth) {
    call.chain = {.active = true,
                  .imm = imm,
                  .limit = std::max<uint32_t>(depth / 2, 1),
                  .unfreed = unfreed};
    s = PostChain();
    if (!s.ok()) {
      return Fail(s.WithContext("posting the input writes: " + ChainProgress()));
    }
  } else {
    auto posted = plain ? ep.PostSequence(writes.plain, imm)
                        : ep.PostWrites(writes.slices, imm, gathered);
    if (!posted.ok()) return Fail(posted.status().WithContext("posting the input writes"));
    call.write_id = posted->wr_id;
    call.written = !posted->signaled;
  }
  while (ep.posted_data_recvs() < internal::kDataRecvDepth) {
    s = PostDataRecv();
    if (!s.ok()) return Fail(s.WithContext("posting the result receive"));
  }
  return Status::Ok();
}

// The call's write sequence in writes.slices: in region order, [metadata],
// then the input slices (prefixes, or the zero-copy runs staged); whether
// it gathers staged inputs.
Result<bool> ClientSession::Impl::BuildWrites(std::span<const uint64_t> lengths) {
  writes.slices.clear();
  bool gathered = false;
  const WireRegion* first_return = nullptr;
  const WireRegion* first_advertised = nullptr;
  for (const WireRegion& w : regions.wire) {
    if (w.internal) continue;
    if (w.param == WireRegion::kMetadata) {
      if (options.metadata_every_call || calls_completed == 0 || windows.enabled) {
        writes.slices.push_back({{w.local_addr, w.size, w.lkey}, w.peer_addr, w.peer_rkey});
      }
      continue;
    }
    const Param& p = regions.params[w.param];
    if (first_advertised == nullptr) first_advertised = &w;
    if (IsReturn(p.spec) && first_return == nullptr) first_return = &w;
    if (!IsCallInput(p.spec)) continue;
    if (p.spec.single_send && calls_completed > 0) continue;
    const uint64_t want = lengths.empty() ? p.spec.size : lengths[w.param];
    if (auto g = std::find_if(writes.staged.begin(), writes.staged.end(),
                              [&](const StagedInput& x) { return x.param == w.param; });
        g != writes.staged.end()) {
      // Zero-copy: chained writes whose gather lists name the caller's runs,
      // at consecutive addresses of the parameter's (one) NAA region.
      if (want != p.spec.size) {
        return InvalidArgumentError("parameter " + Quote(p.spec.name) +
                                    ": staged for a zero-copy send, which sends it whole; "
                                    "send length " + std::to_string(want));
      }
      const size_t max_sge = std::max<uint32_t>(conn->max_send_sge(), 1);
      g->first_slice = writes.slices.size();
      uint64_t remote = w.peer_addr;
      for (size_t i = g->begin; i < g->end; i += max_sge) {
        WriteSlice slice{{}, remote, w.peer_rkey};
        slice.sg_list = std::span<const LocalBuffer>(writes.gather_sges.data() + i,
                                                     std::min(max_sge, g->end - i));
        for (const LocalBuffer& b : slice.sg_list) remote += b.length;
        writes.slices.push_back(slice);
      }
      g->end_slice = writes.slices.size();
      gathered = true;
      continue;
    }
    if (want <= w.offset) continue;
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(w.size, want - w.offset));
    writes.slices.push_back({{w.local_addr, len, w.lkey}, w.peer_addr, w.peer_rkey});
  }
  if (writes.slices.empty()) {
    // Nothing to send (all inputs empty or single-send, or streams only): a
    // zero-length WRITE_WITH_IMM still carries the function code.
    const WireRegion& w = first_return != nullptr ? *first_return : *first_advertised;
    writes.slices.push_back({{w.local_addr, 0, w.lkey}, w.peer_addr, w.peer_rkey});
  }

  return gathered;
}

Status ClientSession::Impl::OnCallCompletion(const Completion& c, bool& done) {
  if (internal::FlushedAfterAnswer(c, call.answered)) {
    done = true;  // the connection went down after the answer: the answer stands
    return Status::Ok();
  }
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
  } else if (call.chain.in_flight != 0 && c.wr_id == call.chain.ids[0]) {
    NAARPC_RETURN_IF_ERROR(OnChainBatch(c.wr_id));
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
        notify.maybe_raised = false;
        if (*event) notify.armed = false;  // consumed: the CQ is unarmed
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
    if (notify.armed && notify.maybe_raised) {
      // The event of an earlier arming is probably raised (the last call
      // ended on a completion taken without waiting): consume it first, so
      // the descriptor waits for what comes next.
      wait_now(end);
      if (end) return end;
    }
    if (!notify.armed) {
      Status s = conn->RequestNotify(NotifyMode::kNextCompletion);
      if (!s.ok()) return EndCall(s.WithContext("arming the completion notification"));
      notify.armed = true;
      notify.maybe_raised = false;
    }
    Result<size_t> n = conn->TryPollCompletions(batch);
    if (!n.ok()) return EndCall(n.status().WithContext("waiting for the NAA"));
    if (*n > 0) notify.maybe_raised = true;
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

Status ClientSession::Impl::EndCall(Status s) {
  // An error before the last batch of a chain was posted: say how far the
  // inputs got (the request immediate was not sent).
  std::string chain_progress;
  if (call.chain.active) {
    if (!s.ok()) chain_progress = ChainProgress();
    call.chain.active = false;
  }
  // The NAA's access ends before the caller sees results or regains its
  // buffers, whatever ended the call.
  if (windows.open) {
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
  if (!chain_progress.empty()) {
    s = s.code() == StatusCode::kDeadlineExceeded
            ? DeadlineExceededError(what() + ": the deadline passed while the inputs were "
                                             "written: " + chain_progress)
            : s.WithContext(what() + ": " + chain_progress);
  } else if (!s.ok() && s.code() == StatusCode::kDeadlineExceeded && streams.empty()) {
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

bool ClientSession::Impl::StageGather(size_t index, const Layout& layout, size_t elem,
                                      std::span<const std::byte* const> bases) {
  auto it = std::find_if(writes.staged.begin(), writes.staged.end(),
                         [&](const StagedInput& x) { return x.param == index; });
  if (it != writes.staged.end()) return true;  // already staged for this call
  if (index >= regions.params.size() || !IsCallInput(regions.params[index].spec) || elem == 0) {
    return false;
  }
  const RegionSpec& spec = regions.params[index].spec;
  UserMemoryRegistry* registry = options.user_memory.get();
  if (registry == nullptr) return false;
  const uint64_t bytes = LayoutElements(layout) * elem;
  const uint64_t runs = LayoutRuns(layout);
  auto pack = [&] {
    registry->CountPacked(bytes);
    return false;
  };
  if (!conn || sm.failed() || call.active || bases.size() != LayoutArrays(layout) ||
      bytes != spec.size || spec.size > options.max_region_size || runs == 0 ||
      bytes / runs < options.zero_copy_min_run_bytes) {
    return pack();
  }
  // Any number of runs: a chain the send queue cannot take at once is
  // posted in batches (BeginCall).
  // Every array lies in one registered range (its lkey on this connection).
  std::array<uint32_t, kMaxLayoutArrays> lkeys{};
  for (size_t a = 0; a < bases.size(); ++a) {
    const uint64_t addr = reinterpret_cast<uintptr_t>(bases[a]);
    Result<bool> found = registry->LocalKey(*conn, addr, LayoutExtent(layout, a) * elem, &lkeys[a]);
    if (!found.ok() || !*found) return pack();
  }
  const size_t begin = writes.gather_sges.size();
  ForEachRun(layout, [&](size_t array, uint64_t offset, uint64_t length) {
    writes.gather_sges.push_back({reinterpret_cast<uintptr_t>(bases[array]) + offset * elem,
                                  static_cast<uint32_t>(length * elem), lkeys[array]});
  });
  writes.staged.push_back({index, begin, writes.gather_sges.size()});
  registry->CountZeroCopy(bytes);
  return true;
}

// Batches of plain RDMA WRITEs of at most chain.limit requests (half the
// send queue), each closed by a signaled request, at most two in flight and
// within the send queue's free slots; then, once every batch completed, the
// rest ending with the WRITE_WITH_IMM (signaled, like any chain). RC
// ordering: the NAA sees every byte before the immediate.
Status ClientSession::Impl::PostChain() {
  auto& ch = call.chain;
  const std::vector<WriteSlice>& slices = writes.slices;
  const uint32_t depth = conn->send_queue_depth();
  while (ch.active) {
    const size_t left = slices.size() - ch.next;
    if (left <= ch.limit) {
      if (ch.in_flight != 0) return Status::Ok();
      auto posted = ep.PostWrites(std::span(slices).subspan(ch.next), ch.imm, true);
      NAARPC_RETURN_IF_ERROR(posted.status());
      call.write_id = posted->wr_id;
      call.written = false;
      ch.next = slices.size();
      ++ch.batches;
      ch.active = false;
      DropStaged();
      return Status::Ok();
    }
    if (ch.in_flight == ch.ids.size() || ch.unfreed >= depth) return Status::Ok();
    const size_t n = std::min<size_t>(ch.limit, depth - ch.unfreed);
    const uint64_t id = MakeWrId(WrKind::kChain, ++ch.batches);
    writes.batch.clear();
    for (size_t i = ch.next; i < ch.next + n; ++i) {
      SendRequest wr;
      wr.opcode = WorkOpcode::kRdmaWrite;
      wr.local = slices[i].local;
      wr.sg_list = slices[i].sg_list;
      wr.remote_addr = slices[i].remote_addr;
      wr.rkey = slices[i].rkey;
      wr.signaled = i + 1 == ch.next + n;
      wr.wr_id = wr.signaled ? id : 0;
      writes.batch.push_back(wr);
    }
    NAARPC_RETURN_IF_ERROR(conn->PostSend(writes.batch));
    ep.send_budget().OnPosted(static_cast<uint32_t>(n), true, id);
    ch.ids[ch.in_flight] = id;
    ch.ends[ch.in_flight] = ch.next + n;
    ++ch.in_flight;
    ch.next += n;
    ch.unfreed += static_cast<uint32_t>(n);
  }
  return Status::Ok();
}

// The oldest batch in flight completed: it and everything posted before it
// are free; post what fits now.
Status ClientSession::Impl::OnChainBatch(uint64_t wr_id) {
  ep.OnSendCompleted(wr_id);
  auto& ch = call.chain;
  ch.acked = ch.ends[0];
  ch.unfreed = ch.in_flight == 2 ? static_cast<uint32_t>(ch.ends[1] - ch.ends[0]) : 0;
  ch.ids[0] = ch.ids[1];
  ch.ends[0] = ch.ends[1];
  --ch.in_flight;
  Status s = PostChain();
  return s.ok() ? s : s.WithContext("posting the next batch of input writes");
}

std::string ClientSession::Impl::ChainProgress() const {
  const auto& ch = call.chain;
  const std::vector<WriteSlice>& slices = writes.slices;
  auto bytes = [&](size_t from, size_t to) {
    uint64_t n = 0;
    for (size_t i = from; i < to; ++i) {
      if (slices[i].sg_list.empty()) n += slices[i].local.length;
      for (const LocalBuffer& b : slices[i].sg_list) n += b.length;
    }
    return n;
  };
  // The zero-copy input the first write not acknowledged belongs to (or the
  // next one).
  const StagedInput* at = nullptr;
  for (const StagedInput& g : writes.staged) {
    if (ch.acked < g.end_slice) {
      at = &g;
      break;
    }
  }
  std::string s = "the inputs' " + std::to_string(slices.size()) +
                  " write requests went in batches of at most " + std::to_string(ch.limit) +
                  ": " + std::to_string(ch.next) + " posted in " + std::to_string(ch.batches) +
                  " batch(es), " + std::to_string(ch.acked) + " acknowledged";
  if (at != nullptr) {
    const size_t done = std::clamp(ch.acked, at->first_slice, at->end_slice);
    s += "; parameter " + Quote(regions.params[at->param].spec.name) + " (zero-copy): " +
         std::to_string(bytes(at->first_slice, done)) + " of " +
         std::to_string(bytes(at->first_slice, at->end_slice)) + " bytes acknowledged";
  }
  return s + "; the request immediate was not sent: the NAA ran nothing";
}

}  // namespace naarpc
