#include "idl/ir_json.h"

#include <cstdio>
#include <string_view>

#include "idl/internal/text.h"

namespace naarpc::idl {
namespace {

// A small JSON writer: one member per line, two-space indentation.
class JsonWriter {
 public:
  std::string Take() { return std::move(out_) + "\n"; }

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }

  void Key(std::string_view k) {
    Separate();
    String(k);
    out_ += ": ";
    after_key_ = true;
  }
  void Value(std::string_view s) { Separate(), String(s); }
  void Value(const char* s) { Value(std::string_view(s)); }
  void Value(const std::string& s) { Value(std::string_view(s)); }
  void Value(bool b) { Separate(), out_ += b ? "true" : "false"; }
  void Value(uint64_t v) { Separate(), out_ += std::to_string(v); }
  void Value(int v) { Separate(), out_ += std::to_string(v); }
  void Null() { Separate(), out_ += "null"; }

  template <typename T>
  void Field(std::string_view k, const T& v) {
    Key(k);
    Value(v);
  }

 private:
  void Open(char c) {
    Separate();
    out_ += c;
    first_ = true;
    ++depth_;
  }
  void Close(char c) {
    --depth_;
    if (!first_) Newline();
    out_ += c;
    first_ = false;
  }
  void Newline() {
    out_ += '\n';
    out_.append(static_cast<size_t>(depth_) * 2, ' ');
  }
  // Before a value: a comma and newline unless it follows its key.
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (depth_ > 0) {
      if (!first_) out_ += ',';
      Newline();
    }
    first_ = false;
  }
  void String(std::string_view s) {
    out_ += '"';
    for (size_t i = 0; i < s.size();) {
      const size_t start = i;
      char32_t cp;
      if (!internal::DecodeUtf8(s, i, cp)) {
        out_ += "\\ufffd";
        ++i;
        continue;
      }
      switch (cp) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (cp < 0x20 || cp == 0x7f || cp == 0x2028 || cp == 0x2029) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
            out_ += buf;
          } else {
            out_.append(s.substr(start, i - start));
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  int depth_ = 0;
  bool first_ = true;
  bool after_key_ = false;
};

void Where(JsonWriter& w, const Location& at) {
  w.Field("line", at.line);
  w.Field("column", at.column);
}

void WriteType(JsonWriter& w, ElementType t) {
  const ElementTypeInfo& info = Describe(t);
  w.Key("type");
  w.BeginObject();
  w.Field("idl", info.idl);
  w.Field("cpp", info.cpp);
  w.Field("size", uint64_t{info.size});
  w.EndObject();
}

void WriteError(JsonWriter& w, const ErrorCode& e) {
  w.BeginObject();
  w.Field("name", e.name);
  w.Field("enumerator", e.enumerator);
  w.Field("code", uint64_t{e.code});
  w.Field("doc", e.doc);
  w.Key("routine");
  if (e.routine.empty()) w.Null();
  else w.Value(e.routine);
  Where(w, e.location);
  w.EndObject();
}

void WriteParam(JsonWriter& w, const Param& p) {
  static constexpr const char* kRuntimeDirection[] = {"kIn", "kOut", "kInOut"};
  w.BeginObject();
  w.Field("name", p.name);
  w.Field("index", uint64_t{p.index});
  WriteType(w, p.type);
  w.Field("count", p.count);
  w.Field("variable", p.variable);
  w.Field("direction", DirectionName(p.direction));
  w.Field("single_send", p.single_send);
  w.Field("is_stream", p.is_stream());
  w.Key("stream");
  if (p.stream) {
    w.BeginObject();
    w.Field("chunk", p.stream->chunk);
    w.Field("window", uint64_t{p.stream->window});
    w.Field("index", uint64_t{p.stream->index});
    w.Field("chunk_bytes", p.chunk_bytes());
    w.EndObject();
  } else {
    w.Null();
  }
  w.Key("layout");
  if (p.layout) {
    const naarpc::Layout& l = p.layout->layout;
    auto list = [&](std::string_view key, const std::vector<uint64_t>& v) {
      w.Key(key);
      w.BeginArray();
      for (uint64_t x : v) w.Value(x);
      w.EndArray();
    };
    w.BeginObject();
    w.Field("kind", naarpc::LayoutKindName(l.kind));
    w.Field("text", naarpc::LayoutToString(l));
    w.Field("elements", naarpc::LayoutElements(l));
    w.Field("runs", p.layout->runs);
    w.Field("arrays", uint64_t{naarpc::LayoutArrays(l)});
    list("reach", p.layout->reach);
    switch (l.kind) {
      case naarpc::Layout::Kind::kStrided:
        w.Field("count", l.count);
        w.Field("block", l.block);
        w.Field("stride", l.stride);
        w.Field("offset", l.offset);
        break;
      case naarpc::Layout::Kind::kSubArray:
        list("shape", l.shape);
        list("extents", l.extents);
        list("offsets", l.offsets);
        break;
      case naarpc::Layout::Kind::kComposite:
        w.Key("pieces");
        w.BeginArray();
        for (const naarpc::LayoutPiece& piece : l.pieces) {
          w.BeginArray();
          w.Value(piece.offset);
          w.Value(piece.length);
          w.EndArray();
        }
        w.EndArray();
        break;
      case naarpc::Layout::Kind::kInterleaved:
        list("repeat", l.repeat);
        break;
      case naarpc::Layout::Kind::kContiguous:
        break;
    }
    Where(w, p.layout->location);
    w.EndObject();
  } else {
    w.Null();
  }
  w.Field("naa_index", uint64_t{p.naa_index});
  w.Field("doc", p.doc);
  w.Field("is_input", p.is_input());
  w.Field("is_output", p.is_output());
  w.Field("scalar", p.scalar());
  w.Field("data_bytes", p.data_bytes());
  w.Field("region_bytes", p.region_bytes());
  w.Field("data_offset", p.data_offset());
  w.Field("runtime_direction", kRuntimeDirection[static_cast<int>(p.direction)]);
  w.Field("expected_flags", uint64_t{p.expected_flags()});
  Where(w, p.location);
  w.Key("cpp");
  w.BeginObject();
  w.Field("client_type", p.cpp.client_type);
  w.Field("kernel_type", p.cpp.kernel_type);
  w.Field("accessor", p.cpp.accessor);
  w.Field("size_getter", p.cpp.size_getter);
  w.Field("size_setter", p.cpp.size_setter);
  w.Field("size_member", p.cpp.size_member);
  w.Field("stream_client_type", p.cpp.stream_client_type);
  w.Field("layout_expr", p.cpp.layout_expr);
  w.EndObject();
  w.EndObject();
}

void WriteInternal(JsonWriter& w, const Internal& i) {
  w.BeginObject();
  w.Field("name", i.name);
  w.Field("index", uint64_t{i.index});
  WriteType(w, i.type);
  w.Field("count", i.count);
  w.Field("naa_address", i.naa_address);
  w.Field("doc", i.doc);
  w.Field("region_bytes", i.region_bytes());
  Where(w, i.location);
  w.Key("cpp");
  w.BeginObject();
  w.Field("kernel_type", i.cpp.kernel_type);
  w.EndObject();
  w.EndObject();
}

void WriteRoutine(JsonWriter& w, const Routine& r) {
  w.BeginObject();
  w.Field("name", r.name);
  w.Field("code", uint64_t{r.code});
  w.Field("doc", r.doc);
  w.Field("timeout_ms", uint64_t{r.timeout_ms});
  w.Field("deadline_ms", uint64_t{r.deadline_ms});
  w.Field("idempotent", r.idempotent);
  w.Field("has_variable", r.has_variable());
  w.Field("has_streams", r.has_streams());
  w.Field("stream_count", uint64_t{r.stream_count()});
  w.Field("total_bytes", r.total_bytes());
  w.Field("region_count", uint64_t{r.region_count()});
  Where(w, r.location);
  w.Key("cpp");
  w.BeginObject();
  w.Field("method", r.cpp.method);
  w.Field("async_method", r.cpp.async_method);
  w.Field("call_class", r.cpp.call_class);
  w.Field("new_call", r.cpp.new_call);
  w.Field("function_code_constant", r.cpp.function_code_constant);
  w.Field("default_deadline_constant", r.cpp.default_deadline_constant);
  w.Field("timeout_constant", r.cpp.timeout_constant);
  w.Field("handler", r.cpp.handler);
  w.Field("pool_member", r.cpp.pool_member);
  w.Field("regions_helper", r.cpp.regions_helper);
  w.Field("mock_packs_arguments", r.cpp.mock_packs_arguments);
  w.Field("mock_args_type", r.cpp.mock_args_type);
  w.Field("mock_stream_args_type", r.cpp.mock_stream_args_type);
  w.EndObject();
  w.Key("params");
  w.BeginArray();
  for (const Param& p : r.params) WriteParam(w, p);
  w.EndArray();
  w.Key("internals");
  w.BeginArray();
  for (const Internal& i : r.internals) WriteInternal(w, i);
  w.EndArray();
  w.Key("errors");
  w.BeginArray();
  for (const ErrorCode& e : r.errors) WriteError(w, e);
  w.EndArray();
  w.EndObject();
}

void WriteService(JsonWriter& w, const Service& s) {
  w.BeginObject();
  w.Field("name", s.name);
  w.Field("doc", s.doc);
  w.Field("timeout_ms", uint64_t{s.timeout_ms});
  Where(w, s.location);
  w.Key("cpp");
  w.BeginObject();
  w.Field("error_enum", s.cpp.error_enum);
  w.Field("error_name_function", s.cpp.error_name_function);
  w.Field("error_from_status_function", s.cpp.error_from_status_function);
  w.Field("client_interface", s.cpp.client_interface);
  w.Field("client", s.cpp.client);
  w.Field("service", s.cpp.service);
  w.Field("mock", s.cpp.mock);
  w.Field("channel_client", s.cpp.channel_client);
  w.EndObject();
  w.Key("errors");
  w.BeginArray();
  for (const ErrorCode& e : s.errors) WriteError(w, e);
  w.EndArray();
  w.Key("routines");
  w.BeginArray();
  for (const Routine& r : s.routines) WriteRoutine(w, r);
  w.EndArray();
  w.EndObject();
}

}  // namespace

std::string IrToJson(const IdlFile& idl, const GeneratedFiles* files) {
  JsonWriter w;
  w.BeginObject();
  w.Field("format", kIrJsonFormat);
  w.Field("path", idl.path);
  w.Field("package", idl.package);
  w.Field("namespace", idl.cpp_namespace);
  w.Field("doc", idl.doc);
  w.Field("max_mock_arguments", uint64_t{kMaxMockArguments});
  if (files) {
    w.Key("files");
    w.BeginObject();
    w.Field("stem", files->stem);
    w.Field("header", files->header);
    w.Field("source", files->source);
    w.Field("mock", files->mock);
    w.Field("header_guard", files->header_guard);
    w.Field("mock_guard", files->mock_guard);
    w.EndObject();
  }
  w.Key("services");
  w.BeginArray();
  for (const Service& s : idl.services) WriteService(w, s);
  w.EndArray();
  w.EndObject();
  return w.Take();
}

}  // namespace naarpc::idl
