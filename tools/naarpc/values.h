// Parameter values of a dynamically called routine: typed elements parsed
// from the command line (JSON arrays, raw files, hex, generated data) and
// printed back (JSON, hex, a summary), checked against the IDL parameter.
#ifndef NAARPC_TOOLS_NAARPC_VALUES_H_
#define NAARPC_TOOLS_NAARPC_VALUES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idl/ir.h"
#include "naarpc/status.h"

namespace naarpc::cli {

// Stream parameters (docs/streams.md): `call` drives them (held in memory),
// `serve` and `bench` do not. These compile whether or not the IDL front-end
// declares streams.
template <typename R = idl::Routine>
bool HasStreams(const R& r) {
  if constexpr (requires { r.has_streams(); }) {
    return r.has_streams();
  } else {
    return false;
  }
}
struct StreamShape {
  uint64_t chunk = 0;   // elements per chunk
  uint32_t window = 0;  // chunks in flight
};
template <typename P = idl::Param>
std::optional<StreamShape> StreamOf(const P& p) {
  if constexpr (requires { p.stream->chunk; }) {
    if (p.stream) return StreamShape{p.stream->chunk, p.stream->window};
  }
  return std::nullopt;
}

// The elements of one parameter, as raw host-order (little-endian) bytes.
struct Value {
  uint64_t count = 0;           // elements
  std::vector<std::byte> data;  // count * element size bytes
};

// Parses an input spec for `param`:
//   [1, 2, 3]      JSON array typed by the IDL (a bare number for size 1);
//                  integers range-checked (beyond 64 bits too), f32/f64 any
//                  JSON number within their range
//   @FILE          raw little-endian elements from FILE
//   hex:0a0b...    raw bytes in hex
//   zeros[:N] | random[:N] | seq[:N]
//                  generated: N elements (default: the fixed size, or the
//                  maximum of a variable-length parameter); seq = 0, 1, 2...
//                  (wrapping at the type's range); random is reproducible
//                  (seeded by the parameter name)
// Errors name the parameter and say what was expected vs given (element
// count, value range, file size not a multiple of the element size).
Result<Value> ParseValue(const idl::Param& param, std::string_view spec);

// How an output is printed.
enum class Format { kAuto, kJson, kHex, kSummary };
Result<Format> ParseFormat(std::string_view name);

// JSON array of the elements (f32/f64 with round-trip precision).
std::string ToJson(const idl::Param& param, const Value& value);
std::string ToHex(const Value& value);
// "4096 x f32: min -1.5, max 7, sum 123.25, first [1, 2, 3, ...]".
std::string Summary(const idl::Param& param, const Value& value);
// kAuto: JSON up to 64 elements, else the summary.
std::string FormatValue(const idl::Param& param, const Value& value, Format format);

// Writes the raw elements to `path` (the format @FILE reads).
Status WriteRaw(const std::string& path, const Value& value);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_VALUES_H_
