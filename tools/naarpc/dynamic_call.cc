#include "tools/naarpc/dynamic_call.h"

#include <cstring>

#include "naarpc/codegen_support.h"

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

}  // namespace

std::vector<RegionSpec> RegionsOf(const idl::Routine& routine) {
  std::vector<RegionSpec> regions;
  regions.reserve(routine.region_count());
  for (const idl::Param& p : routine.params) {
    regions.push_back({.name = p.name,
                       .direction = ToRuntime(p.direction),
                       .size = p.region_bytes(),
                       .single_send = p.single_send});
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
    const idl::Routine& routine, const ClientOptions& options, Deadline deadline) {
  auto session = ClientSession::Open(transport, host, port, RegionsOf(routine), options, deadline);
  if (!session.ok()) {
    return session.status().WithContext(service.name + "." + routine.name);
  }
  return std::unique_ptr<DynamicCall>(new DynamicCall(service, routine, std::move(*session)));
}

Status DynamicCall::Invoke(const std::map<std::string, Value>& inputs,
                           std::map<std::string, Value>* outputs, Deadline deadline) {
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
    if ((p->variable ? value.count > p->count : value.count != p->count) ||
        value.data.size() != want_bytes) {
      return InvalidArgumentError(name + ": parameter '" + param_name + "' " +
                                  (p->variable ? "takes at most " : "needs exactly ") +
                                  std::to_string(p->count) + " elements (" + TypeName(*p) +
                                  "), got " + std::to_string(value.count) + "; nothing was sent");
    }
  }
  std::vector<uint64_t> send_lengths(session_->region_count(), 0);
  uint64_t sent = 0;
  for (const idl::Param& p : routine_.params) {
    std::span<std::byte> buffer = session_->buffer(p.index);
    send_lengths[p.index] = p.region_bytes();
    if (!p.is_input()) continue;
    auto it = inputs.find(p.name);
    if (it == inputs.end()) {
      return InvalidArgumentError(name + ": no input for parameter '" + p.name + "' (" +
                                  std::string(idl::DirectionName(p.direction)) + ", " +
                                  (p.variable ? "at most " : "") + std::to_string(p.count) + " x " +
                                  TypeName(p) + "); nothing was sent");
    }
    const Value& v = it->second;
    if (!v.data.empty()) std::memcpy(buffer.data() + p.data_offset(), v.data.data(), v.data.size());
    if (p.variable) {
      codegen::WriteLengthHeader(buffer, v.count);
      send_lengths[p.index] = codegen::kLengthHeaderSize + v.data.size();
    }
    sent += send_lengths[p.index];
  }
  CallOptions options;
  options.send_lengths = send_lengths;
  Status status = session_->Call(routine_.code, deadline, options);
  last_bytes_sent_ = sent;
  last_bytes_received_ = 0;
  if (!status.ok()) {
    return codegen::AnnotateCallStatus(
        status, name, status.wire_code() ? StatusName(service_, *status.wire_code()) : "");
  }
  for (const idl::Param& p : routine_.params) {
    if (!p.is_output()) continue;
    std::span<const std::byte> buffer = session_->buffer(p.index);
    uint64_t count = p.count;
    if (p.variable) {
      count = codegen::ReadLengthHeader(buffer);
      if (count > p.count) {
        return ProtocolError(name + ": the NAA returned " + std::to_string(count) +
                             " elements for '" + p.name + "', more than its maximum " +
                             std::to_string(p.count));
      }
    }
    const size_t bytes = count * idl::Describe(p.type).size;
    last_bytes_received_ += p.data_offset() + bytes;
    if (outputs == nullptr) continue;
    Value& v = (*outputs)[p.name];
    v.count = count;
    v.data.assign(buffer.begin() + p.data_offset(), buffer.begin() + p.data_offset() + bytes);
  }
  return Status::Ok();
}

}  // namespace naarpc::cli
