#include "tools/naarpc/dynamic_naa.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "naarpc/impl/codegen_support.h"
#include "naarpc/protocol.h"
#include "tools/naarpc/dynamic_call.h"

namespace naarpc::cli {
namespace {

using idl::ElementType;

Result<uint64_t> ParseNumber(std::string_view text) {
  std::string s(text);
  if (s.empty() || s[0] == '-' || s[0] == '+') return InvalidArgumentError("not a number");
  char* end = nullptr;
  errno = 0;
  const uint64_t v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || end != s.c_str() + s.size()) return InvalidArgumentError("not a number");
  return v;
}

// Adds 1 to every element of `data` (count elements of `type`).
void Increment(ElementType type, std::span<std::byte> data, uint64_t count) {
  const uint32_t size = idl::Describe(type).size;
  for (uint64_t i = 0; i < count; ++i) {
    std::byte* p = data.data() + i * size;
    if (type == ElementType::kF32) {
      float f;
      std::memcpy(&f, p, sizeof f);
      f += 1;
      std::memcpy(p, &f, sizeof f);
    } else if (type == ElementType::kF64) {
      double d;
      std::memcpy(&d, p, sizeof d);
      d += 1;
      std::memcpy(p, &d, sizeof d);
    } else {
      // Little-endian add with carry, wrapping at the type's width.
      for (uint32_t b = 0; b < size; ++b) {
        const uint8_t v = std::to_integer<uint8_t>(p[b]) + 1;
        p[b] = std::byte{v};
        if (v != 0) break;
      }
    }
  }
}

}  // namespace

Result<Kernel> ParseKernel(std::string_view spec, const idl::Service& service) {
  Kernel k;
  if (spec == "echo") return k;
  if (spec == "increment") {
    k.kind = Kernel::Kind::kIncrement;
    return k;
  }
  if (spec == "zeros") {
    k.kind = Kernel::Kind::kZeros;
    return k;
  }
  if (spec.starts_with("sleep:")) {
    auto ms = ParseNumber(spec.substr(6));
    if (!ms.ok() || *ms > 86'400'000) {
      return InvalidArgumentError("kernel '" + std::string(spec) +
                                  "': sleep takes milliseconds (0..86400000)");
    }
    k.kind = Kernel::Kind::kSleep;
    k.sleep = std::chrono::milliseconds(*ms);
    return k;
  }
  if (spec.starts_with("fail:")) {
    const std::string_view what = spec.substr(5);
    k.kind = Kernel::Kind::kFail;
    for (const idl::ErrorCode& e : service.errors) {
      if (e.name == what) {
        k.status = e.code;
        return k;
      }
    }
    auto code = ParseNumber(what);
    if (!code.ok() || *code < 1 || *code > kNaaStatusLastApplication) {
      return InvalidArgumentError("kernel '" + std::string(spec) +
                                  "': fail takes a status 0x01..0x7f or an error name of " +
                                  service.name);
    }
    k.status = static_cast<uint8_t>(*code);
    return k;
  }
  return InvalidArgumentError("unknown kernel '" + std::string(spec) +
                              "' (echo, increment, zeros, sleep:MS, fail:CODE)");
}

Result<std::unique_ptr<DynamicNaa>> DynamicNaa::Create(
    std::vector<const idl::Service*> services, const std::vector<std::string>& kernel_specs) {
  std::unique_ptr<DynamicNaa> naa(new DynamicNaa());
  for (const idl::Service* s : services) {
    for (const idl::Routine& r : s->routines) {
      Entry& e = naa->by_code_[r.code];
      if (e.routine != nullptr) {
        return InvalidArgumentError("function code " + std::to_string(r.code) +
                                    " is used by both " + e.service->name + "." + e.routine->name +
                                    " and " + s->name + "." + r.name +
                                    "; serve one of the services (--service)");
      }
      e = Entry{s, &r, Kernel{}, "echo", nullptr, s->name + "." + r.name, {}, {}};
      for (const idl::Param& p : r.params) {
        e.params.push_back(codegen::ParamDesc{
            .name = p.name,
            .type = idl::Describe(p.type).idl,
            .direction = p.direction == idl::Direction::kIn    ? Direction::kIn
                         : p.direction == idl::Direction::kOut ? Direction::kOut
                                                               : Direction::kInOut,
            .element_size = idl::Describe(p.type).size,
            .count = p.count,
            .variable = p.variable,
            .single_send = p.single_send,
            .chunk_bytes = static_cast<uint32_t>(p.chunk_bytes()),
            .window = p.stream ? p.stream->window : 0});
      }
      for (const idl::Internal& i : r.internals) {
        e.internals.push_back(codegen::InternalDesc{
            .name = i.name, .bytes = i.region_bytes(), .naa_address = i.naa_address});
      }
      naa->codes_.push_back(r.code);
    }
  }
  std::sort(naa->codes_.begin(), naa->codes_.end());
  for (const std::string& spec : kernel_specs) {
    const size_t eq = spec.find('=');
    const std::string target = eq == std::string::npos ? "" : spec.substr(0, eq);
    const std::string kernel = eq == std::string::npos ? spec : spec.substr(eq + 1);
    bool matched = false;
    for (uint8_t code : naa->codes_) {
      Entry& e = naa->by_code_[code];
      const std::string full = e.service->name + "." + e.routine->name;
      if (!target.empty() && target != e.routine->name && target != full) continue;
      auto k = ParseKernel(kernel, *e.service);
      if (!k.ok()) return k.status().WithContext("--kernel " + spec);
      e.kernel = *k;
      e.kernel_spec = kernel;
      matched = true;
    }
    if (!matched) {
      return InvalidArgumentError("--kernel " + spec + ": no routine '" + target +
                                  "' in the served services");
    }
  }
  return naa;
}

Status DynamicNaa::SetKernel(std::string_view routine, KernelFunction fn, std::string label) {
  bool matched = false;
  for (uint8_t code : codes_) {
    Entry& e = by_code_[code];
    const std::string full = e.service->name + "." + e.routine->name;
    if (routine != e.routine->name && routine != full) continue;
    if (matched) {
      return InvalidArgumentError("routine '" + std::string(routine) +
                                  "' is in several services; write Service." +
                                  std::string(routine));
    }
    e.function = std::make_shared<const KernelFunction>(fn);
    e.kernel_spec = label;
    matched = true;
  }
  if (!matched) {
    std::string all;
    for (uint8_t code : codes_) {
      all += (all.empty() ? "" : ", ") + by_code_[code].service->name + "." +
             by_code_[code].routine->name;
    }
    return NotFoundError("no routine '" + std::string(routine) + "' in the served services (" +
                         all + ")");
  }
  return Status::Ok();
}

uint8_t DynamicNaa::RunFunction(const Entry& e, NaaCall& call,
                                const std::vector<uint64_t>& counts,
                                const std::vector<std::span<const std::byte>>& in_data) {
  const idl::Routine& r = *e.routine;
  KernelArgs args;
  args.call = &call;
  args.service = e.service;
  args.routine = &r;
  args.data.resize(r.params.size());
  args.counts.assign(counts.begin(), counts.end());
  args.streams.assign(r.params.size(), nullptr);
  std::optional<uint64_t> first_variable_input;
  for (const idl::Param& p : r.params) {
    if (p.is_input() && p.variable && !first_variable_input) first_variable_input = counts[p.index];
  }
  for (const idl::Param& p : r.params) {
    if (StreamOf(p)) {
      args.streams[p.index] = call.streams[p.stream->index];
      continue;
    }
    NaaRegion& region = call.params[p.naa_index];
    const size_t elem = idl::Describe(p.type).size;
    if (p.is_output()) {
      args.data[p.index] = region.data.subspan(p.data_offset(), p.count * elem);
      if (p.variable && !p.is_input()) {
        args.counts[p.index] = std::min<uint64_t>(first_variable_input.value_or(p.count), p.count);
      }
    } else {
      // Inputs are the NAA's own buffers: writable, though the host never sees it.
      args.data[p.index] = std::span<std::byte>(const_cast<std::byte*>(in_data[p.index].data()),
                                                in_data[p.index].size());
    }
  }
  const uint8_t status = (*e.function)(args);
  if (status != kNaaStatusSuccess) return status;
  for (const idl::Param& p : r.params) {
    if (!p.is_output() || !p.variable || StreamOf(p)) continue;
    const uint64_t count = args.counts[p.index];
    if (count > p.count) {
      call.failure_detail = e.service->name + "." + r.name + ": the kernel returned " +
                            std::to_string(count) + " elements for '" + p.name +
                            "', more than its maximum " + std::to_string(p.count);
      return kNaaStatusKernelFailed;
    }
    NaaRegion& out = call.params[p.naa_index];
    WriteLengthHeader(out.data, count);
    out.reply_length = kLengthHeaderSize + count * idl::Describe(p.type).size;
  }
  return kNaaStatusSuccess;
}

std::chrono::milliseconds DynamicNaa::KernelTimeout(uint8_t function_code) const {
  const Entry& e = by_code_[function_code & 0x7f];
  if (e.routine == nullptr) return std::chrono::milliseconds::zero();
  return std::chrono::milliseconds(e.routine->timeout_ms);
}

std::string_view DynamicNaa::RoutineName(uint8_t function_code) const {
  return by_code_[function_code & 0x7f].name;
}

std::string DynamicNaa::Describe() const {
  std::string out;
  for (uint8_t code : codes_) {
    const Entry& e = by_code_[code];
    out += "  " + e.service->name + "." + e.routine->name + " (code " + std::to_string(code) +
           "): " + e.kernel_spec + "\n";
  }
  return out;
}

uint8_t DynamicNaa::Handle(NaaCall& call) {
  if (call.function_code > kMaxFunctionCode || by_code_[call.function_code].routine == nullptr) {
    return kNaaStatusUnknownFunction;
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  const Entry& e = by_code_[call.function_code];
  try {
    return Run(e, call);
  } catch (const std::exception& ex) {
    return codegen::KernelThrew(call, e.name, ex.what());
  } catch (...) {
    return codegen::KernelThrew(call, e.name, {});
  }
}

uint8_t DynamicNaa::Run(const Entry& e, NaaCall& call) {
  const idl::Routine& r = *e.routine;
  const std::string& name = e.name;
  // The layout, as a generated skeleton checks it.
  if (!codegen::RegionsMatch(call, codegen::RoutineDesc{.name = e.name,
                                                        .method = r.name,
                                                        .code = r.code,
                                                        .params = e.params,
                                                        .internals = e.internals})) {
    return kNaaStatusBadRegionLayout;
  }
  // Each input's elements: in its region, or (streams) read into memory below.
  std::vector<uint64_t> counts(r.params.size());
  std::vector<std::span<const std::byte>> in_data(r.params.size());
  for (const idl::Param& p : r.params) {
    if (StreamOf(p)) continue;
    const NaaRegion& region = call.params[p.naa_index];
    counts[p.index] = p.variable && p.is_input() ? ReadLengthHeader(region.data) : p.count;
    in_data[p.index] =
        region.data.subspan(p.data_offset(), counts[p.index] * idl::Describe(p.type).size);
  }

  if (e.function) return RunFunction(e, call, counts, in_data);
  const Kernel& k = e.kernel;
  if (k.kind == Kernel::Kind::kFail) return k.status;
  if (k.kind == Kernel::Kind::kSleep) std::this_thread::sleep_for(k.sleep);

  // Input streams, read whole (a test stand-in, not a streaming kernel).
  constexpr uint64_t kMaxStreamBytes = uint64_t{1} << 30;
  std::vector<std::vector<std::byte>> stream_in(r.params.size());
  std::vector<const idl::Param*> inputs, input_streams;
  for (const idl::Param& p : r.params) {
    if (!p.is_input()) continue;
    inputs.push_back(&p);
    if (!StreamOf(p)) continue;
    input_streams.push_back(&p);
    NaaStream& s = *call.streams[p.stream->index];
    std::vector<std::byte>& data = stream_in[p.index];
    for (;;) {
      auto chunk = s.Next();
      if (!chunk.ok()) {
        call.failure_detail = name + ": stream '" + p.name + "': " + chunk.status().ToString();
        return kNaaStatusKernelFailed;
      }
      if (chunk->empty()) break;
      if (data.size() + chunk->size() > kMaxStreamBytes) {
        call.failure_detail =
            name + ": stream '" + p.name + "' is over 1 GiB, which naarpc serve holds in memory";
        return kNaaStatusKernelFailed;
      }
      data.insert(data.end(), chunk->begin(), chunk->end());
    }
    counts[p.index] = data.size() / idl::Describe(p.type).size;
    in_data[p.index] =
        std::span<const std::byte>(data).first(counts[p.index] * idl::Describe(p.type).size);
  }

  size_t next_input = 0, next_stream = 0;
  for (const idl::Param& p : r.params) {
    if (!p.is_output()) continue;
    const uint32_t out_size = idl::Describe(p.type).size;
    if (StreamOf(p)) {
      // An output stream echoes the next input stream (else the next input).
      const idl::Param* src = nullptr;
      if (!input_streams.empty()) {
        src = input_streams[next_stream++ % input_streams.size()];
      } else if (!inputs.empty()) {
        src = inputs[next_input++ % inputs.size()];
      }
      std::vector<std::byte> bytes;
      if (src != nullptr) bytes.assign(in_data[src->index].begin(), in_data[src->index].end());
      const uint64_t count = bytes.size() / out_size;
      bytes.resize(count * out_size);
      if (k.kind == Kernel::Kind::kZeros) std::fill(bytes.begin(), bytes.end(), std::byte{0});
      if (k.kind == Kernel::Kind::kIncrement) Increment(p.type, bytes, count);
      NaaStream& s = *call.streams[p.stream->index];
      Status written = s.Write(bytes);
      if (written.ok()) written = s.Close();
      if (!written.ok()) {
        call.failure_detail = name + ": stream '" + p.name + "': " + written.ToString();
        return kNaaStatusKernelFailed;
      }
      continue;
    }
    const idl::Param* src = &p;
    if (!p.is_input() && !inputs.empty()) src = inputs[next_input++ % inputs.size()];
    NaaRegion& out = call.params[p.naa_index];
    const std::span<std::byte> out_data = out.data.subspan(p.data_offset());
    uint64_t count = p.count;
    if (src != &p || k.kind == Kernel::Kind::kZeros) {
      const std::span<const std::byte> in = in_data[src->index];
      const size_t bytes = std::min(in.size(), out_data.size());
      if (p.variable) count = std::min<uint64_t>(p.count, in.size() / out_size);
      // (An empty source, e.g. an empty stream, has no data pointer: no
      // memmove from null.)
      if (k.kind == Kernel::Kind::kZeros) {
        std::fill(out_data.begin(), out_data.end(), std::byte{0});
      } else {
        if (bytes > 0) std::memmove(out_data.data(), in.data(), bytes);
        if (!p.variable) std::fill(out_data.begin() + bytes, out_data.end(), std::byte{0});
      }
    } else if (p.variable) {
      count = counts[p.index];  // inout echo: unchanged
    }
    if (k.kind == Kernel::Kind::kIncrement) Increment(p.type, out_data, count);
    if (p.variable) {
      WriteLengthHeader(out.data, count);
      out.reply_length = kLengthHeaderSize + count * out_size;
    }
  }
  return kNaaStatusSuccess;
}

}  // namespace naarpc::cli
