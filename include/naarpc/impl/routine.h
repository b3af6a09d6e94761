// The call machinery of generated stubs and skeletons, written once: a
// generated file describes each routine with a constexpr RoutineDesc (its
// parameters and internal regions, from the IDL) and calls these templates.
// Only generated code includes this header.
#ifndef NAARPC_IMPL_ROUTINE_H_
#define NAARPC_IMPL_ROUTINE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/deadline.h"
#include "naarpc/impl/call_engine.h"
#include "naarpc/impl/codegen_stream.h"
#include "naarpc/impl/codegen_support.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "naarpc/region_layout.h"
#include "naarpc/status.h"

namespace naarpc::codegen {

// One parameter of a routine as declared in the IDL.
struct ParamDesc {
  std::string_view name;
  std::string_view type;  // the IDL element type ("u32"), for messages
  Direction direction = Direction::kIn;
  uint32_t element_size = 1;  // bytes
  uint64_t count = 0;         // elements; the maximum if variable; 0 for a stream
  bool variable = false;      // `max:`: the region starts with a length header
  bool single_send = false;
  uint32_t chunk_bytes = 0;  // streams: bytes per chunk (0: not a stream)
  uint32_t window = 0;       // streams: chunks in flight

  constexpr bool is_stream() const { return chunk_bytes != 0; }
  constexpr bool is_input() const { return direction != Direction::kOut; }
  constexpr bool is_output() const { return direction != Direction::kIn; }
  constexpr uint64_t data_offset() const { return variable ? kLengthHeaderSize : 0; }
  // A stream's region is its ring.
  constexpr uint64_t region_bytes() const {
    return is_stream() ? uint64_t{chunk_bytes} * window : count * element_size + data_offset();
  }
  // The reference dialect's MRSP flags of the region (direction, single send).
  constexpr uint8_t reference_flags() const {
    return (is_input() ? kRegionFlagInput : 0) | (is_output() ? kRegionFlagOutput : 0) |
           (single_send ? kRegionFlagSingleSend : 0);
  }
};

// The flags a skeleton compares with reference_flags().
inline constexpr uint8_t kReferenceDirectionFlags =
    kRegionFlagInput | kRegionFlagOutput | kRegionFlagSingleSend;

// An internal region (NAA-only).
struct InternalDesc {
  std::string_view name;
  uint64_t bytes = 0;
  uint64_t naa_address = 0;  // 0: the NAA chooses
};

struct RoutineDesc {
  std::string_view name;    // "Service.Routine", for messages
  std::string_view method;  // "Routine"
  uint8_t code = 0;         // function code
  std::span<const ParamDesc> params;
  std::span<const InternalDesc> internals;
  // The IDL name of an NAA status ("" if unknown): <Service>ErrorName.
  std::string_view (*error_name)(uint8_t) = nullptr;
  // Declared `memory_windows: required` (docs/idl.md): its sessions use
  // per-call memory windows unless ClientOptions::memory_windows is set.
  bool memory_windows = false;

  constexpr size_t region_count() const { return params.size() + internals.size(); }
  constexpr bool has_variable() const {
    for (const ParamDesc& p : params) {
      if (p.variable) return true;
    }
    return false;
  }
};

// A routine's descriptor with its tables: what a generated file defines,
// as a constexpr, for each routine.
template <size_t P, size_t I>
struct RoutineTable {
  std::string_view name;
  std::string_view method;
  uint8_t code = 0;
  std::string_view (*error_name)(uint8_t) = nullptr;
  bool memory_windows = false;
  std::array<ParamDesc, P> params{};
  std::array<InternalDesc, I> internals{};
  constexpr operator RoutineDesc() const {  // NOLINT: used as a RoutineDesc
    return {.name = name,
            .method = method,
            .code = code,
            .params = params,
            .internals = internals,
            .error_name = error_name,
            .memory_windows = memory_windows};
  }
};

// ----- Host side

// The routine's regions, for its SessionPool.
inline std::vector<RegionSpec> RegionSpecs(const RoutineDesc& r) {
  std::vector<RegionSpec> regions;
  regions.reserve(r.region_count());
  for (const ParamDesc& p : r.params) {
    RegionSpec s{.name = std::string(p.name),
                 .direction = p.direction,
                 .size = p.region_bytes(),
                 .single_send = p.single_send};
    if (p.is_stream()) s.stream = {.chunk_size = p.chunk_bytes, .window = p.window};
    regions.push_back(std::move(s));
  }
  for (const InternalDesc& i : r.internals) {
    regions.push_back({.name = std::string(i.name),
                       .direction = Direction::kInternal,
                       .size = i.bytes,
                       .naa_address = i.naa_address});
  }
  return regions;
}

inline std::shared_ptr<SessionPool> NewPool(Transport& transport, const std::string& host,
                                            uint16_t port, const RoutineDesc& r,
                                            const StubOptions& options) {
  return std::make_shared<SessionPool>(transport, host, port, std::string(r.name), r.code,
                                       RegionSpecs(r),
                                       r.memory_windows ? WithMemoryWindows(options) : options);
}

// A zero-copy call object on a session of `pool`: `make(lease)` (the
// generated client may construct its call objects).
template <typename MakeF>
auto NewCall(SessionPool& pool, Deadline deadline, MakeF&& make)
    -> Result<decltype(make(SessionPool::Lease()))> {
  auto lease = pool.Acquire(deadline);
  if (!lease.ok()) return lease.status();
  return make(std::move(lease).value());
}

// Parameter `i` of a zero-copy call: its data in the session's buffer.
template <typename T>
std::span<T> ParamView(const SessionPool::Lease& lease, const RoutineDesc& r, size_t i) {
  if (!lease) return {};
  const ParamDesc& p = r.params[i];
  return TypedView<T>(lease.session()->buffer(i), p.data_offset(), p.count);
}

// An MRSP request counts its regions in 8 bits.
inline constexpr size_t kMaxRoutineRegions = 255;

// The checks and options of a call: the variable-length inputs' counts
// (`sizes`, by parameter index) checked and written as length headers.
// `lengths` holds region_count() entries.
inline Status PrepareCall(SessionPool::Lease& lease, const RoutineDesc& r,
                          std::span<const size_t> sizes, uint64_t* lengths, CallOptions* options) {
  if (!lease) {
    return FailedPreconditionError(std::string(r.name) +
                                   ": the call's connection failed; start a new call with New" +
                                   std::string(r.method) + "Call()");
  }
  if (!r.has_variable()) return Status::Ok();
  for (size_t i = 0; i < r.region_count(); ++i) {
    lengths[i] = i < r.params.size() && !r.params[i].is_stream() ? r.params[i].region_bytes() : 0;
  }
  for (size_t i = 0; i < r.params.size(); ++i) {
    const ParamDesc& p = r.params[i];
    if (!p.variable || !p.is_input()) continue;
    if (sizes[i] > p.count) {
      return InvalidArgumentError(std::string(r.name) + ": parameter '" + std::string(p.name) +
                                  "' takes at most " + std::to_string(p.count) + " elements (" +
                                  std::string(p.type) + "), got " + std::to_string(sizes[i]) +
                                  "; nothing was sent");
    }
    WriteLengthHeader(lease.session()->buffer(i), sizes[i]);
    lengths[i] = kLengthHeaderSize + sizes[i] * p.element_size;
  }
  options->send_lengths = std::span<const uint64_t>(lengths, r.region_count());
  return Status::Ok();
}

// A call's end: a failure annotated for the user, else the counts of the
// variable-length outputs read into `sizes`.
inline Status CallResult(SessionPool::Lease& lease, const RoutineDesc& r, std::span<size_t> sizes,
                         Status status) {
  if (!status.ok()) {
    return AnnotateCallStatus(status, r.name,
                              status.wire_code() ? r.error_name(*status.wire_code()) : "");
  }
  for (size_t i = 0; i < r.params.size(); ++i) {
    const ParamDesc& p = r.params[i];
    if (!p.variable || !p.is_output()) continue;
    sizes[i] = ReadLengthHeader(lease.session()->buffer(i));
    if (sizes[i] > p.count) {
      const uint64_t bad = std::exchange(sizes[i], 0);
      return ProtocolError(std::string(r.name) + ": the NAA returned " + std::to_string(bad) +
                           " elements for '" + std::string(p.name) + "', more than its maximum " +
                           std::to_string(p.count));
    }
  }
  return Status::Ok();
}

// The zero-copy call object's steps, given its lease and the counts of its
// variable-length parameters (by parameter index; empty if it has none).
//   StartAsync: checks, then Lease::StartCall; `finish` (FinishAsync) gets
//   a call that failed to start.
template <typename Finish>
Status StartCall(SessionPool::Lease& lease, const RoutineDesc& r, std::span<const size_t> sizes,
                 Deadline deadline, Finish&& finish) {
  uint64_t lengths[kMaxRoutineRegions];
  CallOptions options;
  NAARPC_RETURN_IF_ERROR(PrepareCall(lease, r, sizes, lengths, &options));
  Status status = lease.StartCall(r.code, deadline, options);
  return status.ok() ? status : finish(std::move(status));
}
//   FinishAsync: Lease::EndCall, then the results.
inline Status FinishCall(SessionPool::Lease& lease, const RoutineDesc& r, std::span<size_t> sizes,
                         Status status) {
  return CallResult(lease, r, sizes, lease.EndCall(std::move(status)));
}
//   Invoke of a routine with streams: the whole call, blocking, with the
//   streams `bind(bindings)` binds.
template <typename Bind>
Status StreamingCall(SessionPool::Lease& lease, const RoutineDesc& r, std::span<size_t> sizes,
                     Deadline deadline, Bind&& bind) {
  uint64_t lengths[kMaxRoutineRegions];
  CallOptions options;
  NAARPC_RETURN_IF_ERROR(PrepareCall(lease, r, sizes, lengths, &options));
  StreamBindings streams;
  bind(streams);
  options.streams = &streams;
  return CallResult(lease, r, sizes, lease.Call(r.code, deadline, options));
}

// Argument checks of the stubs (nothing is sent if one fails), by the
// argument's type: spans have the exact count (at most the maximum, if
// variable), pointers are not null.
class ArgCheck {
 public:
  ArgCheck(const RoutineDesc& r, size_t i) : r_(r), p_(r.params[i]) {}
  template <typename T>
  Status operator()(std::span<T> arg) const {
    return Count(arg.size());
  }
  template <typename T>
  Status operator()(std::vector<T>* arg) const {
    if (arg == nullptr) return Null();
    return p_.is_input() ? Count(arg->size()) : Status::Ok();
  }
  template <typename T>
  Status operator()(T* arg) const {
    return arg == nullptr ? Null() : Status::Ok();
  }

 private:
  Status Null() const { return Fail("must not be null; nothing was sent"); }
  Status Count(size_t n) const {
    if (p_.variable ? n <= p_.count : n == p_.count) return Status::Ok();
    return Fail(std::string(p_.variable ? "takes at most " : "needs exactly ") +
                std::to_string(p_.count) + " elements (" + std::string(p_.type) + "), got " +
                std::to_string(n) + "; nothing was sent");
  }
  Status Fail(const std::string& what) const {
    return InvalidArgumentError(std::string(r_.name) + ": parameter '" + std::string(p_.name) +
                                "' " + what);
  }
  const RoutineDesc r_;
  const ParamDesc& p_;  // in the generated file's table
};

// The first error of a stub's argument checks, or OK.
inline Status FirstError(std::initializer_list<Status> checks) {
  for (const Status& s : checks) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// Copy-in and copy-out of the convenience stubs. CopyIn returns the
// elements copied.
template <typename T>
size_t CopyIn(std::span<T> region, std::type_identity_t<std::span<const T>> arg) {
  if (!arg.empty()) std::memcpy(region.data(), arg.data(), arg.size() * sizeof(T));
  return arg.size();
}
template <typename T>
void CopyOut(std::span<T> arg, std::type_identity_t<std::span<const T>> region) {
  std::memcpy(arg.data(), region.data(), arg.size() * sizeof(T));
}
template <typename T>
void CopyOut(std::vector<T>* arg, std::type_identity_t<std::span<const T>> region) {
  arg->assign(region.begin(), region.end());
}

// A convenience stub's arguments, checked, with the steps that copy them
// into a call object and the results out of it.
template <typename CallT>
struct CallArgs {
  Status check;
  std::function<void(CallT&)> copy_in;
  std::function<void(CallT&)> copy_out;
};

// <R>(args..., deadline): the checks, a call object (`new_call(deadline)`),
// copy-in, `invoke(call, deadline)`, copy-out.
template <typename CallT, typename NewCallF, typename InvokeF>
Status RunSync(const CallArgs<CallT>& args, NewCallF&& new_call, Deadline deadline,
               InvokeF&& invoke) {
  NAARPC_RETURN_IF_ERROR(args.check);
  Result<CallT> call = new_call(deadline);
  if (!call.ok()) return call.status();
  args.copy_in(*call);
  NAARPC_RETURN_IF_ERROR(invoke(*call, deadline));
  args.copy_out(*call);
  return Status::Ok();
}
template <typename CallT, typename NewCallF>
Status RunSync(const CallArgs<CallT>& args, NewCallF&& new_call, Deadline deadline) {
  return RunSync(args, std::forward<NewCallF>(new_call), deadline,
                 [](CallT& call, Deadline d) { return call.Invoke(d); });
}

// <R>Async(args..., done, deadline) on the client's completion engine.
template <typename CallT>
void RunAsync(CallEngine& engine, const std::shared_ptr<SessionPool>& pool, CallArgs<CallT> args,
              Deadline deadline, std::function<void(Status)> done) {
  if (!args.check.ok()) {
    engine.Reject(std::move(args.check), std::move(done));
    return;
  }
  engine.Submit(
      pool, deadline,
      std::make_unique<CallOp<CallT>>(deadline, std::move(args.copy_in), std::move(args.copy_out)),
      std::move(done));
}

// <R>Async(args..., deadline): `start(done)` starts the call with a `done`
// that fulfils the returned future.
template <typename StartF>
std::future<Status> AsFuture(StartF&& start) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  start([promise](Status s) { promise->set_value(std::move(s)); });
  return future;
}

// ----- NAA side

// Why a call's regions are not the routine's, or "" if they are: counts
// and sizes, directions (the reference dialect by its MRSP flags), streams'
// shapes, and the variable-length inputs' counts within their maximum. The
// one check of a routine's layout on the NAA: generated skeletons and
// `naarpc serve` (and Python kernels) answer kNaaStatusBadRegionLayout with
// it, before any kernel runs.
inline std::string RegionMismatch(const NaaCall& call, const RoutineDesc& r) {
  size_t plain = 0, streams = 0;
  for (const ParamDesc& p : r.params) (p.is_stream() ? streams : plain)++;
  if (call.params.size() != plain || call.internal.size() != r.internals.size() ||
      call.streams.size() != streams) {
    return std::to_string(call.params.size()) + " parameter regions, " +
           std::to_string(call.internal.size()) + " internal regions and " +
           std::to_string(call.streams.size()) + " streams, expected " + std::to_string(plain) +
           ", " + std::to_string(r.internals.size()) + " and " + std::to_string(streams);
  }
  auto hex = [](unsigned v) {
    constexpr char kDigits[] = "0123456789abcdef";
    return std::string{'0', 'x', kDigits[(v >> 4) & 0xf], kDigits[v & 0xf]};
  };
  size_t n = 0, s = 0;
  for (const ParamDesc& p : r.params) {
    const auto name = [&p] { return std::string(p.name); };  // failures only
    if (p.is_stream()) {
      const NaaStream& st = *call.streams[s++];
      if (st.is_input() != p.is_input() || st.chunk_size() != p.chunk_bytes ||
          st.window() != p.window) {
        auto shape = [](bool input, uint64_t chunk, uint64_t window) {
          return std::string(input ? "an input" : "an output") + " stream of " +
                 std::to_string(chunk) + "-byte chunks, window " + std::to_string(window);
        };
        return "stream '" + name() + "' is " + shape(st.is_input(), st.chunk_size(), st.window()) +
               "; expected " + shape(p.is_input(), p.chunk_bytes, p.window);
      }
      continue;
    }
    const NaaRegion& region = call.params[n++];
    if (region.data.size() != p.region_bytes()) {
      return "region '" + name() + "' is " + std::to_string(region.data.size()) +
             " bytes, expected " + std::to_string(p.region_bytes());
    }
    if (region.is_output != p.is_output()) {
      return "region '" + name() + "' " +
             (region.is_output ? "is a return region, but the IDL says 'in'"
                               : "is not a return region, but the IDL says '" +
                                     std::string(p.is_input() ? "inout" : "out") + "'");
    }
    if (call.dialect == Dialect::kReference &&
        (region.flags & kReferenceDirectionFlags) != p.reference_flags()) {
      return "region '" + name() + "' has MRSP flags " +
             hex(region.flags & kReferenceDirectionFlags) + ", expected " +
             hex(p.reference_flags());
    }
    if (p.variable && p.is_input() && ReadLengthHeader(region.data) > p.count) {
      return "region '" + name() + "' has a length header of " +
             std::to_string(ReadLengthHeader(region.data)) + ", more than its maximum " +
             std::to_string(p.count);
    }
  }
  for (size_t i = 0; i < r.internals.size(); ++i) {
    if (call.internal[i].size() != r.internals[i].bytes) {
      return "internal region '" + std::string(r.internals[i].name) + "' is " +
             std::to_string(call.internal[i].size()) + " bytes, expected " +
             std::to_string(r.internals[i].bytes);
    }
  }
  return {};
}

// A kernel threw (`what`: empty if not a std::exception): the call fails
// (KERNEL_FAILED) with why in the NAA's log.
inline uint8_t KernelThrew(NaaCall& call, std::string_view routine, std::string_view what) {
  call.failure_detail = std::string(routine) + ": the kernel threw " +
                        (what.empty() ? std::string("an exception not derived from std::exception")
                                      : "'" + std::string(what) + "'");
  return kNaaStatusKernelFailed;
}

// Whether a call's regions are the routine's (RegionMismatch); if not, the
// call's failure_detail says why, for the NAA's log.
inline bool RegionsMatch(NaaCall& call, const RoutineDesc& r) {
  std::string why = RegionMismatch(call, r);
  if (why.empty()) return true;
  call.failure_detail = std::string(r.name) + ": " + why;
  return false;
}

// The kernel's view of the NAA-side parameter at NAA index `n` (the
// routine's parameter `i`); empty if misaligned.
template <typename T>
std::span<T> KernelView(const NaaCall& call, const RoutineDesc& r, size_t i, size_t n) {
  const ParamDesc& p = r.params[i];
  return TypedView<T>(call.params[n].data, p.data_offset(), p.count);
}

// The reply length of a fixed-size output region (the whole region) or of
// a variable-length one (its length header, written here, and `size`
// elements).
inline void SetReply(NaaRegion& region, const ParamDesc& p) {
  region.reply_length = p.region_bytes();
}
inline void SetReply(NaaRegion& region, const ParamDesc& p, size_t size) {
  WriteLengthHeader(region.data, size);
  region.reply_length = kLengthHeaderSize + size * p.element_size;
}

// A kernel asked a VarSpan for more than its maximum and returned success:
// the call fails (KERNEL_FAILED) with the request in the NAA's log.
template <typename T>
bool OverflowFails(NaaCall& call, const RoutineDesc& r, size_t i, const VarSpan<T>& v) {
  if (v.overflow_request() == 0) return false;
  const ParamDesc& p = r.params[i];
  call.failure_detail = std::string(r.name) + ": the kernel asked for " +
                        std::to_string(v.overflow_request()) + " elements of '" +
                        std::string(p.name) + "', more than its maximum " + std::to_string(p.count);
  return true;
}

// A stream's error ends the call whatever the kernel returned: its status.
template <typename S>
bool StreamFails(NaaCall& call, const RoutineDesc& r, std::string_view name, const S& stream,
                 uint8_t* status) {
  if (stream.error().ok()) return false;
  call.failure_detail =
      std::string(r.name) + ": stream '" + std::string(name) + "': " + stream.error().ToString();
  *status = kNaaStatusKernelFailed;
  if constexpr (requires { stream.malformed(); }) {
    if (stream.malformed()) *status = kNaaStatusBadRegionLayout;
  }
  return true;
}

}  // namespace naarpc::codegen

#endif  // NAARPC_IMPL_ROUTINE_H_
