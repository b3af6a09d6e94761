// The typed IR of a validated IDL file (docs/idl.md): what the generator
// renders and what a program walks to call routines dynamically. Every
// value is normalised (defaults filled in). The IR is language-neutral as
// Load() returns it; the `cpp` members (every C++ name the generated code
// declares for a declaration) and cpp_namespace are filled by the C++
// back-end's pass (idl/cpp/cpp_pass.h), which only the generator runs.
#ifndef NAARPC_IDL_IR_H_
#define NAARPC_IDL_IR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idl/diagnostic.h"
#include "naarpc/strided_view.h"

namespace naarpc::idl {

// Variable-length parameters start with a big-endian u64 element count.
inline constexpr uint64_t kLengthHeaderBytes = 8;

enum class ElementType : uint8_t { kU8, kU16, kU32, kU64, kI8, kI16, kI32, kI64, kF32, kF64, kBytes };

struct ElementTypeInfo {
  std::string_view idl;  // "f32"
  std::string_view cpp;  // "float"
  uint32_t size;         // bytes
};
const ElementTypeInfo& Describe(ElementType type);
std::optional<ElementType> ParseElementType(std::string_view idl_name);

enum class Direction : uint8_t { kIn, kOut, kInOut };
std::string_view DirectionName(Direction d);  // "in", "out", "inout"

struct ErrorCode {
  std::string name;        // UPPER_SNAKE_CASE as in the IDL
  uint8_t code = 0;        // 0x10..0x7f
  std::string doc;
  std::string routine;     // the declaring routine; empty = service-wide
  Location location;
  std::string enumerator;  // kPascalCase, in enum class <Service>Error
};

// A stream parameter (docs/protocol.md 15): its data flows in chunks of
// `chunk` elements through a ring of `window` chunks during the call.
struct StreamDecl {
  uint64_t chunk = 0;      // elements per chunk
  uint32_t window = 0;     // chunks in flight, 1..64
  size_t index = 0;        // stream index (the order of the routine's streams)
  Location location;       // of the `stream` mapping
};

// A parameter's layout in the caller's memory (docs/idl.md "Layouts", seed
// 004). The NAA sees the parameter packed and contiguous: the region, the
// wire bytes and the kernel's argument are those of the plain parameter.
struct LayoutDecl {
  naarpc::Layout layout;        // checked: CheckLayout(layout) is empty
  uint64_t runs = 0;            // contiguous runs (scatter-gather entries) per call
  std::vector<uint64_t> reach;  // per array: elements reached from its base
  Location location;            // of the `layout` mapping
};

struct Param {
  std::string name;
  size_t index = 0;        // region index (parameters come first)
  ElementType type = ElementType::kU8;
  uint64_t count = 0;      // fixed element count, or the maximum if variable
  bool variable = false;   // `max:` (length header) rather than `size:`
  Direction direction = Direction::kIn;
  bool single_send = false;
  std::optional<StreamDecl> stream;  // a stream: `count` is 0, `variable` false
  std::optional<LayoutDecl> layout;  // only with a fixed `size` of at least 2
  // Index among the routine's non-stream parameters (NaaCall::params on the
  // NAA, which holds no streams); for streams, stream->index instead.
  size_t naa_index = 0;
  std::string doc;
  Location location;

  bool is_input() const { return direction != Direction::kOut; }
  bool is_output() const { return direction != Direction::kIn; }
  bool is_stream() const { return stream.has_value(); }
  // size: 1 -> passed by value (in) or pointer/reference (out, inout).
  bool scalar() const { return !variable && !stream && count == 1; }
  uint64_t data_bytes() const { return count * Describe(type).size; }
  // A stream's region is its ring: chunk_bytes() * window.
  uint64_t region_bytes() const {
    return stream ? chunk_bytes() * stream->window : data_bytes() + data_offset();
  }
  uint64_t chunk_bytes() const { return stream ? stream->chunk * Describe(type).size : 0; }
  uint64_t data_offset() const { return variable ? kLengthHeaderBytes : 0; }
  // Reference-dialect MRSP flags of the region (0x04 in, 0x08 out, 0x02
  // single send; streams: 0x15 in, 0x19 out).
  uint8_t expected_flags() const;

  struct Cpp {
    std::string client_type;  // stub argument type ("std::span<const float>")
    std::string kernel_type;  // kernel argument type
    std::string accessor;     // <R>Call::<p>()
    std::string size_getter;  // <R>Call::<p>_size()   (variable only)
    std::string size_setter;  // <R>Call::set_<p>_size (variable inputs only)
    // Streams: the stub's general argument (StreamSource<T>& / StreamSink<T>&);
    // client_type is the convenience form (std::span<const T> /
    // std::vector<T>*) and kernel_type StreamReader<T>& / StreamWriter<T>&.
    std::string stream_client_type;
    // Layouts: the declared layout as a C++ expression of type
    // naarpc::Layout (client_type is then naarpc::StridedView<[const] T>).
    std::string layout_expr;
  } cpp;
};

struct Internal {
  std::string name;
  size_t index = 0;        // index among the routine's internal regions
  ElementType type = ElementType::kU8;
  uint64_t count = 0;
  uint64_t naa_address = 0;  // 0 = the NAA chooses
  std::string doc;
  Location location;

  uint64_t region_bytes() const { return count * Describe(type).size; }

  struct Cpp {
    std::string kernel_type;  // "std::span<float>"
  } cpp;
};

struct Routine {
  std::string name;
  uint8_t code = 0;            // function code 1..127
  std::string doc;
  uint32_t timeout_ms = 0;     // kernel timeout
  uint32_t deadline_ms = 0;    // client default deadline
  // Safe to run twice: a channel over several NAAs retries it on another
  // NAA when one fails (docs/channel.md).
  bool idempotent = false;
  // Its sessions use per-call memory windows (docs/idl.md `memory_windows`,
  // docs/protocol.md 4.5) unless the user sets ClientOptions::memory_windows:
  // the routine's declaration, else its service's; false if neither says
  // `required`.
  bool memory_windows = false;
  std::vector<Param> params;
  std::vector<Internal> internals;
  std::vector<ErrorCode> errors;  // the errors this routine declares
  Location location;

  bool has_variable() const;
  bool has_streams() const { return stream_count() != 0; }
  size_t stream_count() const;
  uint64_t total_bytes() const;  // all parameter and internal regions (rings)
  // Regions of one call (parameters + internal; the spec dialect adds a
  // metadata region on the wire).
  size_t region_count() const { return params.size() + internals.size(); }
  const Param* FindParam(std::string_view name) const;

  struct Cpp {
    std::string method;                     // <R>
    std::string async_method;               // <R>Async
    std::string call_class;                 // <R>Call
    std::string new_call;                   // New<R>Call
    std::string function_code_constant;     // k<R>FunctionCode
    std::string default_deadline_constant;  // k<R>DefaultDeadline
    std::string timeout_constant;           // k<R>Timeout
    std::string handler;                    // Handle<R> (skeleton, private)
    std::string pool_member;                // pool_<snake>_
    // The routine's descriptor and argument helpers (.cc, file scope).
    std::string routine_struct;             // <Service><R>Routine
    // gMock's MOCK_METHOD takes at most kMaxMockArguments arguments; a
    // routine whose async form needs more is mocked with its arguments
    // packed in a std::tuple named mock_args_type.
    bool mock_packs_arguments = false;
    std::string mock_args_type;             // <R>Args (when packed)
    std::string mock_stream_args_type;      // <R>StreamArgs (packed, streams)
  } cpp;
};

// gMock's MOCK_METHOD limit (arguments per mocked method).
inline constexpr size_t kMaxMockArguments = 15;

struct Service {
  std::string name;
  std::string doc;
  uint32_t timeout_ms = 0;  // default kernel timeout of its routines
  bool memory_windows = false;  // declared `memory_windows: required`
  std::vector<Routine> routines;
  // Every application error of the service: service-wide first, then each
  // routine's, in IDL order. Names and codes are unique.
  std::vector<ErrorCode> errors;
  Location location;

  const Routine* FindRoutine(std::string_view name) const;
  const Routine* FindRoutineByCode(uint8_t code) const;

  struct Cpp {
    std::string error_enum;                  // <S>Error
    std::string error_name_function;         // <S>ErrorName
    std::string error_from_status_function;  // <S>ErrorFromStatus
    std::string client_interface;            // <S>ClientInterface
    std::string client;                      // <S>Client
    std::string service;                     // <S>Service
    std::string mock;                        // Mock<S>Client
    std::string channel_client;              // <S>ChannelClient
  } cpp;
};

struct IdlFile {
  std::string path;       // as shown in diagnostics and generated banners
  std::string package;    // "a.b.c"
  Location package_location;
  std::string cpp_namespace;  // "a::b::c" (the C++ back-end's pass)
  std::string doc;
  std::vector<Service> services;

  const Service* FindService(std::string_view name) const;
};

}  // namespace naarpc::idl

#endif  // NAARPC_IDL_IR_H_
