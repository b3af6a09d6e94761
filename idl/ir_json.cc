#include "idl/ir_json.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace naarpc::idl {
namespace {

// Members in the order they are set (the IR's documented order).
using Json = nlohmann::ordered_json;

void Where(Json& j, const Location& at) {
  j["line"] = at.line;
  j["column"] = at.column;
}

Json TypeJson(ElementType t) {
  const ElementTypeInfo& info = Describe(t);
  return Json{{"idl", info.idl}, {"cpp", info.cpp}, {"size", uint64_t{info.size}}};
}

Json ErrorJson(const ErrorCode& e) {
  Json j;
  j["name"] = e.name;
  j["enumerator"] = e.enumerator;
  j["code"] = uint64_t{e.code};
  j["doc"] = e.doc;
  j["routine"] = e.routine.empty() ? Json(nullptr) : Json(e.routine);
  Where(j, e.location);
  return j;
}

Json LayoutJson(const LayoutDecl& pl) {
  const naarpc::Layout& l = pl.layout;
  Json j;
  j["kind"] = naarpc::LayoutKindName(l.kind);
  j["text"] = naarpc::LayoutToString(l);
  j["elements"] = naarpc::LayoutElements(l);
  j["runs"] = pl.runs;
  j["arrays"] = uint64_t{naarpc::LayoutArrays(l)};
  j["reach"] = pl.reach;
  switch (l.kind) {
    case naarpc::Layout::Kind::kStrided:
      j["count"] = l.count;
      j["block"] = l.block;
      j["stride"] = l.stride;
      j["offset"] = l.offset;
      break;
    case naarpc::Layout::Kind::kSubArray:
      j["shape"] = l.shape;
      j["extents"] = l.extents;
      j["offsets"] = l.offsets;
      break;
    case naarpc::Layout::Kind::kComposite:
      j["pieces"] = Json::array();
      for (const naarpc::LayoutPiece& piece : l.pieces) {
        j["pieces"].push_back(Json::array({piece.offset, piece.length}));
      }
      break;
    case naarpc::Layout::Kind::kInterleaved:
      j["repeat"] = l.repeat;
      break;
    case naarpc::Layout::Kind::kContiguous:
      break;
  }
  Where(j, pl.location);
  return j;
}

Json ParamJson(const Param& p) {
  static constexpr const char* kRuntimeDirection[] = {"kIn", "kOut", "kInOut"};
  Json j;
  j["name"] = p.name;
  j["index"] = uint64_t{p.index};
  j["type"] = TypeJson(p.type);
  j["count"] = p.count;
  j["variable"] = p.variable;
  j["direction"] = DirectionName(p.direction);
  j["single_send"] = p.single_send;
  j["is_stream"] = p.is_stream();
  j["stream"] = nullptr;
  if (p.stream) {
    j["stream"] = Json{{"chunk", p.stream->chunk},
                       {"window", uint64_t{p.stream->window}},
                       {"index", uint64_t{p.stream->index}},
                       {"chunk_bytes", p.chunk_bytes()}};
  }
  j["layout"] = p.layout ? LayoutJson(*p.layout) : Json(nullptr);
  j["naa_index"] = uint64_t{p.naa_index};
  j["doc"] = p.doc;
  j["is_input"] = p.is_input();
  j["is_output"] = p.is_output();
  j["scalar"] = p.scalar();
  j["data_bytes"] = p.data_bytes();
  j["region_bytes"] = p.region_bytes();
  j["data_offset"] = p.data_offset();
  j["runtime_direction"] = kRuntimeDirection[static_cast<int>(p.direction)];
  j["expected_flags"] = uint64_t{p.expected_flags()};
  Where(j, p.location);
  j["cpp"] = Json{{"client_type", p.cpp.client_type},
                  {"kernel_type", p.cpp.kernel_type},
                  {"accessor", p.cpp.accessor},
                  {"size_getter", p.cpp.size_getter},
                  {"size_setter", p.cpp.size_setter},
                  {"stream_client_type", p.cpp.stream_client_type},
                  {"layout_expr", p.cpp.layout_expr}};
  return j;
}

Json InternalJson(const Internal& i) {
  Json j;
  j["name"] = i.name;
  j["index"] = uint64_t{i.index};
  j["type"] = TypeJson(i.type);
  j["count"] = i.count;
  j["naa_address"] = i.naa_address;
  j["doc"] = i.doc;
  j["region_bytes"] = i.region_bytes();
  Where(j, i.location);
  j["cpp"] = Json{{"kernel_type", i.cpp.kernel_type}};
  return j;
}

Json RoutineJson(const Routine& r) {
  Json j;
  j["name"] = r.name;
  j["code"] = uint64_t{r.code};
  j["doc"] = r.doc;
  j["timeout_ms"] = uint64_t{r.timeout_ms};
  j["deadline_ms"] = uint64_t{r.deadline_ms};
  j["idempotent"] = r.idempotent;
  j["memory_windows"] = r.memory_windows;
  j["has_variable"] = r.has_variable();
  j["has_streams"] = r.has_streams();
  j["stream_count"] = uint64_t{r.stream_count()};
  j["total_bytes"] = r.total_bytes();
  j["region_count"] = uint64_t{r.region_count()};
  Where(j, r.location);
  j["cpp"] = Json{{"method", r.cpp.method},
                  {"async_method", r.cpp.async_method},
                  {"call_class", r.cpp.call_class},
                  {"new_call", r.cpp.new_call},
                  {"function_code_constant", r.cpp.function_code_constant},
                  {"default_deadline_constant", r.cpp.default_deadline_constant},
                  {"timeout_constant", r.cpp.timeout_constant},
                  {"handler", r.cpp.handler},
                  {"pool_member", r.cpp.pool_member},
                  {"routine_struct", r.cpp.routine_struct},
                  {"mock_packs_arguments", r.cpp.mock_packs_arguments},
                  {"mock_args_type", r.cpp.mock_args_type},
                  {"mock_stream_args_type", r.cpp.mock_stream_args_type}};
  j["params"] = Json::array();
  for (const Param& p : r.params) j["params"].push_back(ParamJson(p));
  j["internals"] = Json::array();
  for (const Internal& i : r.internals) j["internals"].push_back(InternalJson(i));
  j["errors"] = Json::array();
  for (const ErrorCode& e : r.errors) j["errors"].push_back(ErrorJson(e));
  return j;
}

Json ServiceJson(const Service& s) {
  Json j;
  j["name"] = s.name;
  j["doc"] = s.doc;
  j["timeout_ms"] = uint64_t{s.timeout_ms};
  j["memory_windows"] = s.memory_windows;
  Where(j, s.location);
  j["cpp"] = Json{{"error_enum", s.cpp.error_enum},
                  {"error_name_function", s.cpp.error_name_function},
                  {"error_from_status_function", s.cpp.error_from_status_function},
                  {"client_interface", s.cpp.client_interface},
                  {"client", s.cpp.client},
                  {"service", s.cpp.service},
                  {"mock", s.cpp.mock},
                  {"channel_client", s.cpp.channel_client}};
  j["errors"] = Json::array();
  for (const ErrorCode& e : s.errors) j["errors"].push_back(ErrorJson(e));
  j["routines"] = Json::array();
  for (const Routine& r : s.routines) j["routines"].push_back(RoutineJson(r));
  return j;
}

}  // namespace

std::string IrToJson(const IdlFile& idl, const GeneratedFiles* files) {
  Json j;
  j["format"] = kIrJsonFormat;
  j["path"] = idl.path;
  j["package"] = idl.package;
  j["namespace"] = idl.cpp_namespace;
  j["doc"] = idl.doc;
  j["max_mock_arguments"] = uint64_t{kMaxMockArguments};
  if (files) {
    j["files"] = Json{{"stem", files->stem},
                      {"header", files->header},
                      {"source", files->source},
                      {"mock", files->mock},
                      {"header_guard", files->header_guard},
                      {"mock_guard", files->mock_guard}};
  }
  j["services"] = Json::array();
  for (const Service& s : idl.services) j["services"].push_back(ServiceJson(s));
  // Invalid UTF-8 (the front-end rejects it) would become U+FFFD.
  std::string out = j.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  // U+2028 and U+2029 escaped, as JavaScript and line-splitting readers
  // need (nlohmann-json leaves them raw). Their UTF-8 bytes occur only
  // inside strings.
  for (const auto& [raw, escaped] : {std::pair{"\xE2\x80\xA8", "\\u2028"},
                                     std::pair{"\xE2\x80\xA9", "\\u2029"}}) {
    for (size_t at = out.find(raw); at != std::string::npos; at = out.find(raw, at)) {
      out.replace(at, 3, escaped);
      at += 6;
    }
  }
  return out + "\n";
}

}  // namespace naarpc::idl
