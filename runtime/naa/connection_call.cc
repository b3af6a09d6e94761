#include "runtime/naa/connection_server.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "runtime/cycle_clock.h"
#include "runtime/wire/metadata.h"

namespace naarpc::internal {

namespace {

// "0x00000085" (log lines).
std::string ImmText(uint32_t imm) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", imm);
  return buf;
}

}  // namespace

std::string ConnectionServer::RoutineText(uint8_t function_code) const {
  const std::string_view name = server_.handler.RoutineName(function_code);
  const std::string code = "function " + std::to_string(function_code);
  return name.empty() ? code : std::string(name) + " (" + code + ")";
}

uint8_t ConnectionServer::ResolveReturnRegions(std::vector<size_t>& returns) {
  if (regions_.dialect == Dialect::kReference) {
    // Fixed by the MRSP flags: resolved once per connection.
    if (!returns_.resolved_reference) {
      returns.clear();
      for (size_t p = 0; p < regions_.param_index.size(); ++p) {
        if (regions_.groups[regions_.param_index[p]].flags & kRegionFlagOutput) {
          returns.push_back(p);
        }
      }
      returns_.resolved_reference = true;
      ++returns_.version;
    }
    return kNaaStatusSuccess;
  }
  // Spec dialect: the metadata region holds the host addresses of the
  // return regions (one per wire region of a split parameter).
  if (regions_.metadata_index == SIZE_MAX ||
      (regions_.param_index.empty() && regions_.stream_index.empty())) {
    return kNaaStatusBadRegionLayout;
  }
  const Group& meta = regions_.groups[regions_.metadata_index];
  const auto* bytes = reinterpret_cast<const uint8_t*>(meta.memory.data());
  auto param_of = [&](uint64_t addr) -> size_t {
    for (size_t p = 0; p < regions_.param_index.size(); ++p) {
      const Group& g = regions_.groups[regions_.param_index[p]];
      for (size_t i = 0; i < g.entry_count; ++i) {
        if (regions_.entries[g.first_entry + i].request.addr == addr) return p;
      }
    }
    return SIZE_MAX;
  };
  if (regions_.windows) {
    // The keys change every call: resolved every call; the kernel's view is
    // rebuilt only when the return regions change.
    if (!ResolveMetadataWindowReturns(std::span<const uint8_t>(bytes, meta.memory.size()), param_of,
                                      returns_.window_scratch, returns_.window_rkeys)) {
      return kNaaStatusBadRegionLayout;
    }
    if (returns_.window_scratch != returns) {
      returns = returns_.window_scratch;
      ++returns_.version;
    }
    return kNaaStatusSuccess;
  }
  // The host rewrites the same addresses every call: reuse the last answer.
  if (returns_.resolved_metadata.size() == meta.memory.size() &&
      std::memcmp(returns_.resolved_metadata.data(), bytes, meta.memory.size()) == 0) {
    return kNaaStatusSuccess;
  }
  returns_.resolved_metadata.clear();
  ++returns_.version;
  if (!ResolveMetadataReturns(std::span<const uint8_t>(bytes, meta.memory.size()),
                              param_of, returns)) {
    returns.clear();
    // A routine that returns only streams sends an empty list (all zero).
    const bool empty_list =
        std::all_of(bytes, bytes + meta.memory.size(), [](uint8_t b) { return b == 0; });
    if (regions_.stream_index.empty() || !empty_list) return kNaaStatusBadRegionLayout;
  }
  returns_.resolved_metadata.assign(bytes, bytes + meta.memory.size());
  return kNaaStatusSuccess;
}

void ConnectionServer::BuildCallTemplate(const std::vector<size_t>& returns) {
  view_.params_template.clear();
  std::vector<uint8_t> is_return(regions_.param_index.size(), 0);  // per parameter
  for (size_t p : returns) is_return[p] = 1;
  for (size_t p = 0; p < regions_.param_index.size(); ++p) {
    Group& g = regions_.groups[regions_.param_index[p]];
    NaaRegion v;
    v.data = g.memory.span();
    v.flags = g.flags;
    v.is_output = is_return[p] != 0;
    v.is_input = regions_.dialect == Dialect::kSpec ? true : (g.flags & kRegionFlagInput) != 0;
    v.reply_length = g.memory.size();
    view_.params_template.push_back(v);
  }
  view_.internal_template.clear();
  for (size_t i : regions_.internal_index) {
    view_.internal_template.push_back(regions_.groups[i].memory.span());
  }
  view_.params.resize(view_.params_template.size());
  view_.internal.resize(view_.internal_template.size());
  view_.version = returns_.version;
}

std::optional<uint8_t> ConnectionServer::RunKernel(NaaCall& call) {
  auto run = [this, &call]() -> uint8_t {
    try {
      return server_.handler.Handle(call);
    } catch (const std::exception& e) {
      Log("kernel of " + RoutineText(call.function_code) + " threw: " + e.what());
    } catch (...) {
      Log("kernel of " + RoutineText(call.function_code) + " threw");
    }
    return kNaaStatusKernelFailed;
  };
  const auto timeout = server_.handler.KernelTimeout(call.function_code);
  if (timeout <= std::chrono::milliseconds::zero()) return run();
  // On this thread, against the watchdog: whichever of the kernel's return
  // and the time limit comes first answers the call.
  const std::shared_ptr<ServerShared> shared = server_.shared;  // outlives a given-up connection
  calls_.round = calls_.race.Begin();
  calls_.kernel_owner = server_.engine.CurrentOwner();
  calls_.kernel_timeout = timeout;
  if (Status armed = shared->kernel_watchdog.Arm(*this, Deadline::Clock::now() + timeout);
      !armed.ok()) {
    // Its time limit cannot be enforced: the kernel does not run.
    calls_.kernel_owner = {};
    Log("kernel of " + RoutineText(call.function_code) + " not run: " +
        armed.message());
    return kNaaStatusKernelFailed;
  }
  shared->running_kernels.Add();
  const uint8_t status = run();
  if (!calls_.race.Win(calls_.round)) {
    // The watchdog answered the call and ended the connection: nothing of
    // it may be touched from here on (it may be gone).
    EventEngine::LeaveGivenUp();
    shared->running_kernels.Done();
    return std::nullopt;
  }
  shared->kernel_watchdog.Disarm(*this);
  calls_.kernel_owner = {};  // it holds the engine's entry, which holds us
  shared->running_kernels.Done();
  return status;
}

std::shared_ptr<const void> ConnectionServer::RetainMemory() {
  calls_.memory_retained.store(true);
  return shared_from_this();
}

std::function<void()> ConnectionServer::Expired() {
  // Under the watchdog's lock, the kernel's thread still in RunKernel (it
  // disarms before it leaves): everything read here is the current call's.
  return [self = shared_from_this(), round = calls_.round, owner = calls_.kernel_owner,
          timeout = calls_.kernel_timeout, code = calls_.call.function_code] {
    if (!self->calls_.race.Win(round)) return;
    // The kernel's thread will not clear it (it may not touch the
    // connection now), and it holds the engine's entry, which holds us.
    self->calls_.kernel_owner = {};
    self->TakeOverOverrun(owner, timeout, code);
  };
}

void ConnectionServer::TakeOverOverrun(const EventEngine::Owner& owner,
                                       std::chrono::milliseconds timeout, uint8_t code) {
  Log("kernel of " + RoutineText(code) + " exceeded " +
      std::to_string(timeout.count()) + " ms; answering 0x02 and closing the connection "
      "(the kernel runs on with its own memory)");
  calls_.kernel_overran = true;
  {
    // A streaming kernel pumps the connection from its thread: take the
    // connection back (it waits at most one bounded poll).
    std::lock_guard<std::mutex> lock(streams_.pump_mu);
    streams_.abandoned = true;
  }
  // What the call's thread would have done: answer, then end the connection.
  Status s = EndCall(kNaaStatusKernelTimeout);
  if (s.ok() && place_.admission_slot != nullptr) {
    server_.shared->admission.Idle(*place_.admission_slot);
  }
  Finish(s);
  server_.engine.GiveUp(owner);  // Ended(), here
}

Status ConnectionServer::HandleCall(uint32_t imm) {
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kDataReceiving));
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kCalculating));
  std::vector<size_t>& returns = returns_.list;
  uint8_t status = kNaaStatusSuccess;
  for (auto& st : streams_.list) st->Reset();
  streams_.error = Status::Ok();
  for (const auto& [imm, byte_len] : streams_.early_frames) {
    if (streams_.error.ok()) streams_.error = ApplyFrame(imm, byte_len);
  }
  streams_.early_frames.clear();
  const std::optional<RequestImmediate> req = DecodeRequestImmediate(imm);
  BeginObserved(req ? req->function_code : static_cast<uint8_t>(imm & 0xff));
  // Ends the call's observation however this returns.
  struct EndObservation {
    ConnectionServer* self;
    const uint8_t* status;
    ~EndObservation() {
      if (self != nullptr) self->EndObserved(*status, 0);
    }
  } end_observation{this, &status};
  if (!req) {
    status = kNaaStatusUnknownFunction;
    Log("call refused (0x03): request immediate " + ImmText(imm) +
        " names no function (expected a function code 1..127" +
        ((imm & kImmHostToNaaBit) == 0 ? std::string(" and, in the spec dialect, nothing else)")
                                       : std::string(")")));
  } else if (req->host_to_naa_bit != (regions_.dialect == Dialect::kReference)) {
    status = kNaaStatusBadRegionLayout;  // immediate of the other dialect
    Log("call of function " + std::to_string(req->function_code) + " refused (0x04): request "
        "immediate " + ImmText(imm) + " is of the " +
        std::string(DialectName(req->host_to_naa_bit ? Dialect::kReference : Dialect::kSpec)) +
        " dialect (bit 7 " + (req->host_to_naa_bit ? "set" : "clear") + "); the MRSP chose the " +
        std::string(DialectName(regions_.dialect)) + " dialect (bit 7 " +
        (regions_.dialect == Dialect::kReference ? "set" : "clear") + " expected)");
  } else if (options().dialect.has_value() && *options().dialect != regions_.dialect) {
    status = kNaaStatusBadRegionLayout;
    Log("call of function " + std::to_string(req->function_code) +
        " refused: this NAA serves the " + std::string(DialectName(*options().dialect)) +
        " dialect only (ServerOptions::dialect)");
  } else {
    status = ResolveReturnRegions(returns);
  }
  if (status == kNaaStatusSuccess) {
    if (view_.version != returns_.version) BuildCallTemplate(returns);
    std::copy(view_.params_template.begin(), view_.params_template.end(), view_.params.begin());
    std::copy(view_.internal_template.begin(), view_.internal_template.end(),
              view_.internal.begin());
    // Every field, so nothing a kernel left in calls_.call reaches the next call.
    calls_.call = NaaCall{.function_code = req->function_code,
                          .dialect = regions_.dialect,
                          .user_bits = req->user_bits,
                          .call_index = calls_.count,
                          .params = view_.params,
                          .internal = view_.internal,
                          .streams = streams_.ptrs,
                          .failure_detail = {},
                          .retain_memory = [this] { return RetainMemory(); }};
    if (observation_.active) {
      for (const NaaRegion& r : view_.params) {
        if (r.is_input) observation_.bytes_in += r.data.size();
      }
    }
    if (Status rejected = StartInterceptors(req->function_code); !rejected.ok()) {
      status = rejected.wire_code().value_or(kNaaStatusKernelFailed);
      if (status == kNaaStatusSuccess) status = kNaaStatusKernelFailed;
      Log("call of function " + std::to_string(req->function_code) +
          " rejected by an interceptor: " + rejected.ToString());
    } else {
      const std::optional<uint8_t> ran = RunKernel(calls_.call);
      if (!ran) {
        // Given up: the watchdog answered and ended the call (TakeOverOverrun).
        end_observation.self = nullptr;
        return DeadlineExceededError("kernel given up at its time limit");
      }
      status = *ran;
    }
    if (status != kNaaStatusSuccess && !calls_.call.failure_detail.empty()) {
      Log("call of function " + std::to_string(calls_.call.function_code) + " failed with status " +
          std::to_string(status) + ": " + calls_.call.failure_detail);
    } else if (status == kNaaStatusUnknownFunction) {
      Log("call of function " + std::to_string(req->function_code) +
          " answered 0x03 (unknown function): the handler serves no routine with that code");
    }
  }
  return EndCall(status);
}

Status ConnectionServer::EndCall(uint8_t status) {
  const std::vector<size_t>& returns = returns_.list;
  if (!streams_.list.empty() && !calls_.kernel_overran) {
    // Every stream ends before the status, whether or not the kernel ran
    // (docs/protocol.md 15.4); a stream that cannot end (the host left or
    // broke the protocol) ends the connection.
    NAARPC_RETURN_IF_ERROR(FinishStreams());
  }
  ++calls_.count;
  if (observation_.active) {
    // Recorded before the reply leaves: once the host has the answer, the
    // NAA's statistics count the call.
    uint64_t bytes_out = 0;
    if (status == kNaaStatusSuccess) {
      for (size_t p : returns) {
        bytes_out += std::min<uint64_t>(view_.params[p].reply_length,
                                        regions_.groups[regions_.param_index[p]].memory.size());
      }
    }
    EndObserved(status, bytes_out);
  }
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kDataSending));
  NAARPC_RETURN_IF_ERROR(Reply(status, returns));
  // The spare receive posted earlier takes the host's next call, which may
  // already be on its way; this one replaces the receive the call consumed,
  // off the latency path (after the reply is posted).
  NAARPC_RETURN_IF_ERROR(PostDataRecv());
  return protocol_.sm.Transition(CommState::kFinished);
}

void ConnectionServer::BeginObserved(uint8_t function_code) {
  observation_.interceptors = nullptr;
  observation_.interceptors_accepted = 0;
  const InterceptorChain::List* list =
      options().interceptors != nullptr ? options().interceptors->current() : nullptr;
  if (options().stats == nullptr && list == nullptr) return;
  observation_.active = true;
  observation_.code = function_code;
  observation_.bytes_in = 0;
  if (observation_.cached_code != function_code) {
    const std::string_view name = server_.handler.RoutineName(function_code);
    observation_.routine_name =
        name.empty() ? "function_" + std::to_string(function_code) : std::string(name);
    observation_.cached_stats =
        options().stats != nullptr
            ? &options().stats->Get(CallSide::kNaa, observation_.routine_name, place_.peer_host)
            : nullptr;
    observation_.cached_code = function_code;
  }
  observation_.stats = observation_.cached_stats;
  if (observation_.stats != nullptr) observation_.stats->RecordStart();
  observation_.start_ns = CycleClock::NowNanos();
}

Status ConnectionServer::StartInterceptors(uint8_t function_code) {
  if (!observation_.active) return Status::Ok();
  const InterceptorChain::List* list =
      options().interceptors != nullptr ? options().interceptors->current() : nullptr;
  if (list == nullptr) return Status::Ok();
  const auto timeout = server_.handler.KernelTimeout(function_code);
  CallInfo info{.side = CallSide::kNaa,
                .routine = observation_.routine_name,
                .peer = place_.peer_host,
                .function_code = function_code,
                .bytes_sent = 0,
                .bytes_received = observation_.bytes_in,
                .deadline = timeout > std::chrono::milliseconds::zero() ? Deadline::After(timeout)
                                                                        : Deadline::Infinite()};
  observation_.interceptors = list;
  Status s = InterceptorChain::RunStart(list, info, &observation_.interceptors_accepted);
  if (!s.ok()) observation_.interceptors = nullptr;  // RunStart ended the accepted ones
  return s;
}

void ConnectionServer::EndObserved(uint8_t naa_status, uint64_t bytes_out) {
  if (!observation_.active) return;
  observation_.active = false;
  if (!streams_.list.empty()) {
    // The data the call's streams moved (a kernel left running after its
    // time limit no longer touches them once abandoned, under pump_mu).
    std::lock_guard<std::mutex> lock(streams_.pump_mu);
    for (const auto& st : streams_.list) {
      if (st->input_) {
        observation_.bytes_in += st->inbound_.bytes();
      } else {
        bytes_out += st->outbound_.bytes();
      }
    }
  }
  const std::chrono::nanoseconds duration(CycleClock::NowNanos() - observation_.start_ns);
  if (observation_.stats != nullptr) {
    observation_.stats->RecordNaaEnd(naa_status, bytes_out, observation_.bytes_in,
                                  static_cast<uint64_t>(duration.count()));
  }
  if (observation_.interceptors != nullptr) {
    CallInfo info{.side = CallSide::kNaa,
                  .routine = observation_.routine_name,
                  .peer = place_.peer_host,
                  .function_code = observation_.code,
                  .bytes_sent = bytes_out,
                  .bytes_received = observation_.bytes_in,
                  .deadline = Deadline::Infinite(),
                  .duration = duration};
    const Status status = naa_status == kNaaStatusSuccess
                              ? Status::Ok()
                              : Status(StatusCode::kNaaError, NaaStatusMetricName(naa_status))
                                    .set_wire_code(naa_status);
    InterceptorChain::RunEnd(observation_.interceptors, observation_.interceptors_accepted, info,
                             status);
    observation_.interceptors = nullptr;
  }
}

Status ConnectionServer::Reply(uint8_t status, const std::vector<size_t>& returns) {
  ReplyWrites& w = calls_.reply;
  // How much of return parameter p goes back.
  auto reply_length = [&](size_t p) {
    return std::min<uint64_t>(view_.params[p].reply_length,
                              regions_.groups[regions_.param_index[p]].memory.size());
  };
  bool same = w.reusable && status == kNaaStatusSuccess && w.version == returns_.version &&
              w.lengths.size() == returns.size();
  for (size_t r = 0; same && r < returns.size(); ++r) same = w.lengths[r] == reply_length(returns[r]);
  if (!same) NAARPC_RETURN_IF_ERROR(BuildReply(status, returns));
  const uint32_t requests = static_cast<uint32_t>(w.requests.size());
  if (ep_.send_budget().NeedsReclaim(requests)) NAARPC_RETURN_IF_ERROR(ReclaimSendQueue());
  // The last reply of a connection is signaled and waited for, so that it
  // has left before the disconnect.
  NAARPC_RETURN_IF_ERROR(ep_.PostSequence(w.requests,
                                          EncodeStatusImmediate(regions_.dialect, status),
                                          calls_.kernel_overran)
                             .status());
  if (calls_.kernel_overran) return ReclaimSendQueue();
  return Status::Ok();
}

Status ConnectionServer::BuildReply(uint8_t status, const std::vector<size_t>& returns) {
  ReplyWrites& w = calls_.reply;
  w.reusable = false;
  w.slices.clear();
  w.lengths.clear();
  if (status == kNaaStatusSuccess) {
    // Each return parameter: the reply_length prefix, over its wire regions.
    for (size_t r = 0; r < returns.size(); ++r) {
      const size_t p = returns[r];
      const Group& g = regions_.groups[regions_.param_index[p]];
      const uint64_t want = std::min<uint64_t>(view_.params[p].reply_length, g.memory.size());
      w.lengths.push_back(want);
      for (size_t i = 0; i < g.entry_count; ++i) {
        const WireEntry& e = regions_.entries[g.first_entry + i];
        if (want <= e.offset) break;
        const uint64_t len = std::min<uint64_t>(e.request.size, want - e.offset);
        w.slices.push_back({{g.local_addr + e.offset, static_cast<uint32_t>(len), g.lkey},
                            e.request.addr,
                            regions_.windows ? returns_.window_rkeys[r] : e.request.rkey});
      }
    }
  }
  if (w.slices.empty()) {
    // Error status (or nothing to return): one zero-length WRITE_WITH_IMM to
    // the first return region, else the first parameter region.
    const size_t p = returns.empty() ? 0 : returns.front();
    // A routine of streams only: the first stream's ring carries it.
    if (p >= regions_.param_index.size() && regions_.stream_index.empty()) {
      return ProtocolError("no host region to carry the status");
    }
    const Group& g = regions_.groups[p < regions_.param_index.size() ? regions_.param_index[p]
                                                                     : regions_.stream_index[0]];
    const WireEntry& e = regions_.entries[g.first_entry];
    const bool window = regions_.windows && !returns.empty() && !returns_.window_rkeys.empty();
    w.slices.push_back({{g.local_addr, 0, g.lkey},
                        e.request.addr,
                        window ? returns_.window_rkeys.front() : e.request.rkey});
  }
  BuildWriteSequence(w.slices, w.requests);
  // Memory windows: new keys every call.
  w.reusable = status == kNaaStatusSuccess && !regions_.windows;
  w.version = returns_.version;
  return Status::Ok();
}

}  // namespace naarpc::internal
