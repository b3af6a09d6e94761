#include "tools/naarpc/dynamic_call.h"

#include <cstring>

#include "naarpc/impl/codegen_support.h"
#include "runtime/cycle_clock.h"

namespace naarpc::cli {
namespace {

naarpc::Direction ToRuntime(idl::Direction d) {
  switch (d) {
    case idl::Direction::kIn:
      return naarpc::Direction::kIn;
    case idl::Direction::kOut:
      return naarpc::Direction::kOut;
    case idl::Direction::kInOut:
      return naarpc::Direction::kInOut;
  }
  return naarpc::Direction::kIn;
}

std::string TypeName(const idl::Param& p) { return std::string(idl::Describe(p.type).idl); }

// The streams of one call, from and into memory, indexed as the session
// numbers them (the order of the stream parameters): an input stream is read
// from its Value chunk by chunk, an output stream appended to its Value.
class MemoryStreams final : public StreamHandler {
 public:
  void AddInput(const idl::Param* param, const ValueView* value) {
    streams_.push_back({param, value, 0, {}});
  }
  void AddOutput(const idl::Param* param) { streams_.push_back({param, nullptr, 0, {}}); }
  bool empty() const { return streams_.empty(); }
  // The output streams' values, by parameter name.
  void MoveOutputs(std::map<std::string, Value>& outputs) {
    for (Stream& s : streams_) {
      if (s.input == nullptr) outputs[s.param->name] = std::move(s.output);
    }
  }
  Result<size_t> Produce(size_t stream, std::span<std::byte> slot) override {
    if (stream >= streams_.size() || streams_[stream].input == nullptr) {
      return InvalidArgumentError("no input stream " + std::to_string(stream));
    }
    Stream& s = streams_[stream];
    const size_t n = std::min(slot.size(), s.input->data.size() - s.offset);
    if (n != 0) std::memcpy(slot.data(), s.input->data.data() + s.offset, n);
    s.offset += n;
    return n;
  }

  Status Consume(size_t stream, std::span<const std::byte> chunk, bool end) override {
    if (stream >= streams_.size() || streams_[stream].input != nullptr) {
      return ProtocolError("no output stream " + std::to_string(stream));
    }
    Stream& s = streams_[stream];
    if (s.output.data.size() + chunk.size() > kMaxOutputBytes) {
      return ResourceExhaustedError("output stream '" + s.param->name +
                                    "' is over 1 GiB, which naarpc call holds in memory");
    }
    s.output.data.insert(s.output.data.end(), chunk.begin(), chunk.end());
    if (end) {
      const uint32_t size = idl::Describe(s.param->type).size;
      if (s.output.data.size() % size != 0) {
        return ProtocolError("output stream '" + s.param->name + "' ended after " +
                             std::to_string(s.output.data.size()) + " bytes, not whole " +
                             TypeName(*s.param) + " elements");
      }
      s.output.count = s.output.data.size() / size;
    }
    return Status::Ok();
  }

 private:
  static constexpr uint64_t kMaxOutputBytes = uint64_t{1} << 30;
  struct Stream {
    const idl::Param* param;
    const ValueView* input;  // null: an output stream
    size_t offset;       // input: bytes produced so far
    Value output;
  };
  std::vector<Stream> streams_;
};

}  // namespace

std::vector<RegionSpec> RegionsOf(const idl::Routine& routine) {
  std::vector<RegionSpec> regions;
  regions.reserve(routine.region_count());
  for (const idl::Param& p : routine.params) {
    regions.push_back({.name = p.name,
                       .direction = ToRuntime(p.direction),
                       .size = p.region_bytes(),
                       .single_send = p.single_send});
    if (auto stream = StreamOf(p)) {
      regions.back().stream = {
          .chunk_size = static_cast<uint32_t>(stream->chunk * idl::Describe(p.type).size),
          .window = stream->window};
    }
  }
  for (const idl::Internal& i : routine.internals) {
    regions.push_back({.name = i.name,
                       .direction = naarpc::Direction::kInternal,
                       .size = i.region_bytes(),
                       .naa_address = i.naa_address});
  }
  return regions;
}

std::string StatusName(const idl::Service& service, uint8_t status) {
  if (status == 0) return "OK";
  for (const idl::ErrorCode& e : service.errors) {
    if (e.code == status) return e.name;
  }
  return std::string(codegen::StandardStatusName(status));
}

Result<std::unique_ptr<DynamicCall>> DynamicCall::Open(
    Transport& transport, const std::string& host, uint16_t port, const idl::Service& service,
    const idl::Routine& routine, const ClientOptions& options, Deadline deadline,
    std::shared_ptr<StatsRegistry> stats) {
  // The routine's IDL declaration is the default of memory_windows
  // (docs/idl.md), as in generated clients.
  ClientOptions resolved = options;
  if (!resolved.memory_windows) resolved.memory_windows = routine.memory_windows;
  const int64_t started_ns = internal::CycleClock::NowNanos();
  auto session = ClientSession::Open(transport, host, port, RegionsOf(routine), resolved, deadline);
  if (!session.ok()) {
    Status failed = session.status().WithContext(service.name + "." + routine.name);
    if (stats != nullptr) {  // a call that failed to connect is a failed call
      stats->Get(CallSide::kHost, service.name + "." + routine.name, HostPort(host, port))
          .RecordUnstarted(failed,
                           static_cast<uint64_t>(internal::CycleClock::NowNanos() - started_ns));
    }
    return failed;
  }
  std::unique_ptr<DynamicCall> call(new DynamicCall(service, routine, std::move(*session),
                                                    std::move(stats), HostPort(host, port)));
  call->memory_windows_ = *resolved.memory_windows;
  return call;
}

void DynamicCall::BeginObserved() {
  if (stats_ == nullptr) return;
  stats_->RecordStart();
  observed_ = true;
  observed_start_ns_ = internal::CycleClock::NowNanos();
}

void DynamicCall::EndObserved(const Status& status) {
  if (!observed_) return;
  observed_ = false;
  stats_->RecordEnd(status, last_bytes_sent_, status.ok() ? last_bytes_received_ : 0,
                    static_cast<uint64_t>(internal::CycleClock::NowNanos() - observed_start_ns_));
}

Status DynamicCall::Invoke(const std::map<std::string, Value>& inputs,
                           std::map<std::string, Value>* outputs, Deadline deadline) {
  std::map<std::string, ValueView> views;
  for (const auto& [param_name, value] : inputs) {
    views[param_name] = ValueView{value.count, value.data};
  }
  Status status = Invoke(views, outputs, deadline);
  if (!status.ok()) return status;
  for (const idl::Param& p : routine_.params) {
    if (!p.is_output() || StreamOf(p)) continue;
    auto out = Output(p);
    if (!out.ok()) return out.status();
    if (outputs == nullptr) continue;
    Value& v = (*outputs)[p.name];
    v.count = out->count;
    v.data.assign(out->data.begin(), out->data.end());
  }
  return Status::Ok();
}

Result<ValueView> DynamicCall::Output(const idl::Param& p) {
  std::span<const std::byte> buffer = session_->buffer(p.index);
  uint64_t count = p.count;
  if (p.variable) {
    count = ReadLengthHeader(buffer);
    if (count > p.count) {
      return ProtocolError(name_ + ": the NAA returned " + std::to_string(count) +
                           " elements for '" + p.name + "', more than its maximum " +
                           std::to_string(p.count));
    }
  }
  return ValueView{count, buffer.subspan(p.data_offset(), count * idl::Describe(p.type).size)};
}

Status DynamicCall::Invoke(const std::map<std::string, ValueView>& inputs,
                           std::map<std::string, Value>* stream_outputs, Deadline deadline) {
  return InvokeWith(inputs, nullptr, stream_outputs, deadline, false);
}

Status DynamicCall::Invoke(const std::map<std::string, ValueView>& inputs,
                           StreamHandler& streams, Deadline deadline) {
  return InvokeWith(inputs, &streams, nullptr, deadline, false);
}

Status DynamicCall::Start(const std::map<std::string, ValueView>& inputs, Deadline deadline) {
  if (routine_.has_streams()) {
    return InvalidArgumentError(name_ + " has streams, which run with Invoke() only");
  }
  return InvokeWith(inputs, nullptr, nullptr, deadline, true);
}

std::optional<Status> DynamicCall::Continue() {
  std::optional<Status> done = session_->ContinueCall();
  if (!done) return std::nullopt;
  return Complete(*done);
}

std::optional<Status> DynamicCall::Wait(Deadline until) {
  std::optional<Status> done = session_->WaitCall(until);
  if (!done) return std::nullopt;
  return Complete(*done);
}

void DynamicCall::Abandon() {
  session_->AbandonCall();
  EndObserved(CancelledError(name_ + ": abandoned"));
}

Status DynamicCall::Complete(const Status& status) {
  // What the call's streams moved, however far it got.
  const ClientSession::StreamBytes streamed = session_->last_stream_bytes();
  last_bytes_sent_ += streamed.sent;
  last_bytes_received_ = streamed.received;
  Status result = Status::Ok();
  if (!status.ok()) {
    result = codegen::AnnotateCallStatus(
        status, name_, status.wire_code() ? StatusName(service_, *status.wire_code()) : "");
  } else {
    for (const idl::Param& p : routine_.params) {
      if (!p.is_output() || StreamOf(p)) continue;
      auto out = Output(p);
      if (!out.ok()) {
        result = out.status();
        break;
      }
      last_bytes_received_ += p.data_offset() + out->data.size();
    }
  }
  EndObserved(result);
  return result;
}

// Elements of the caller's memory a parameter's layout reaches (all arrays).
static uint64_t LayoutReach(const idl::Param& p) {
  uint64_t total = 0;
  if (p.layout) {
    for (uint64_t r : p.layout->reach) total += r;
  }
  return total;
}

Status DynamicCall::InvokeWith(const std::map<std::string, ValueView>& inputs,
                               StreamHandler* external,
                               std::map<std::string, Value>* stream_outputs, Deadline deadline,
                               bool start_only) {
  const std::string& name = name_;
  // Every input present and sized as the IDL says; no unknown names.
  for (const auto& [param_name, value] : inputs) {
    const idl::Param* p = routine_.FindParam(param_name);
    if (p == nullptr) {
      return InvalidArgumentError(name + ": no parameter '" + param_name + "'");
    }
    if (!p->is_input()) {
      return InvalidArgumentError(name + ": parameter '" + param_name + "' is an output (" +
                                  std::string(idl::DirectionName(p->direction)) +
                                  "); it takes no input");
    }
    const uint64_t want_bytes = value.count * idl::Describe(p->type).size;
    if (StreamOf(*p)) {
      if (external != nullptr) {
        return InvalidArgumentError(name + ": stream '" + param_name +
                                    "' is bound to the call's stream handler, not given as a "
                                    "value");
      }
      if (value.data.size() != want_bytes) {
        return InvalidArgumentError(name + ": stream '" + param_name + "' is not whole " +
                                    TypeName(*p) + " elements; nothing was sent");
      }
      continue;
    }
    if (p->layout && value.count == LayoutReach(*p) && value.data.size() == want_bytes) {
      continue;  // the caller's memory: gathered by the layout below
    }
    if ((p->variable ? value.count > p->count : value.count != p->count) ||
        value.data.size() != want_bytes) {
      if (p->layout) {
        return InvalidArgumentError(
            name + ": parameter '" + param_name + "' (caller's layout " +
            LayoutToString(p->layout->layout) + ") takes the caller's memory, " +
            std::to_string(LayoutReach(*p)) + " elements, or the packed " +
            std::to_string(p->count) + " elements (" + TypeName(*p) + "), got " +
            std::to_string(value.count) + "; nothing was sent");
      }
      return InvalidArgumentError(name + ": parameter '" + param_name + "' " +
                                  (p->variable ? "takes at most " : "needs exactly ") +
                                  std::to_string(p->count) + " elements (" + TypeName(*p) +
                                  "), got " + std::to_string(value.count) + "; nothing was sent");
    }
  }
  std::vector<uint64_t> send_lengths(session_->region_count(), 0);
  uint64_t sent = 0;
  MemoryStreams streams;
  for (const idl::Param& p : routine_.params) {
    std::span<std::byte> buffer = session_->buffer(p.index);
    send_lengths[p.index] = StreamOf(p) ? 0 : p.region_bytes();
    if (StreamOf(p) && p.is_output()) streams.AddOutput(&p);
    if (!p.is_input()) continue;
    if (StreamOf(p) && external != nullptr) continue;
    auto it = inputs.find(p.name);
    if (it == inputs.end()) {
      return InvalidArgumentError(name + ": no input for parameter '" + p.name + "' (" +
                                  std::string(idl::DirectionName(p.direction)) + ", " +
                                  (p.variable ? "at most " : "") + std::to_string(p.count) + " x " +
                                  TypeName(p) + "); nothing was sent");
    }
    const ValueView& v = it->second;
    if (StreamOf(p)) {
      streams.AddInput(&p, &v);  // its chunks count when the call ends (Complete)
      continue;
    }
    std::byte* const dst = buffer.data() + p.data_offset();
    if (p.layout && v.count == LayoutReach(p)) {
      // The caller's memory (interleaved: the arrays one after the other):
      // packed by the layout, as a generated stub does.
      const size_t elem = idl::Describe(p.type).size;
      std::vector<const std::byte*> bases;
      const std::byte* at = v.data.data();
      for (uint64_t reach : p.layout->reach) {
        bases.push_back(at);
        at += reach * elem;
      }
      GatherBytes(p.layout->layout, elem, bases, dst);
      sent += send_lengths[p.index];
      continue;
    }
    // Already in place (an array over the registered buffer): nothing to copy.
    if (!v.data.empty() && v.data.data() != dst) std::memmove(dst, v.data.data(), v.data.size());
    if (p.variable) {
      WriteLengthHeader(buffer, v.count);
      send_lengths[p.index] = kLengthHeaderSize + v.data.size();
    }
    sent += send_lengths[p.index];
  }
  CallOptions options;
  options.send_lengths = send_lengths;
  if (external != nullptr) {
    options.streams = external;
  } else if (!streams.empty()) {
    options.streams = &streams;
  }
  last_bytes_sent_ = sent;
  last_bytes_received_ = 0;
  BeginObserved();
  if (start_only) {
    started_send_lengths_ = std::move(send_lengths);  // lives while the call is in flight
    options.send_lengths = started_send_lengths_;
    Status started = session_->StartCall(routine_.code, deadline, options);
    return started.ok() ? started : Complete(started);
  }
  Status status = session_->Call(routine_.code, deadline, options);
  if (status.ok() && stream_outputs != nullptr) streams.MoveOutputs(*stream_outputs);
  return Complete(status);
}

}  // namespace naarpc::cli
