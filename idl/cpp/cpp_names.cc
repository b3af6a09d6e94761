#include "idl/cpp/cpp_names.h"

#include <algorithm>
#include <cctype>
#include <iterator>

namespace naarpc::idl::internal {
namespace {

// Sorted (checked by std::is_sorted in the test).
constexpr std::string_view kReservedWords[] = {
    "NULL", "alignas", "alignof", "and", "and_eq", "asm", "assert", "atomic_cancel",
    "atomic_commit", "atomic_noexcept", "auto", "bitand", "bitor", "bool", "break", "case",
    "catch", "char", "char16_t", "char32_t", "char8_t", "class", "co_await", "co_return",
    "co_yield", "compl", "concept", "const", "const_cast", "consteval", "constexpr",
    "constinit", "continue", "decltype", "default", "delete", "do", "double", "dynamic_cast",
    "else", "enum", "errno", "explicit", "export", "extern", "false", "final", "float", "for",
    "friend", "goto", "if", "import", "inline", "int", "int16_t", "int32_t", "int64_t",
    "int8_t", "long", "module", "mutable", "naarpc", "namespace", "new", "noexcept", "not",
    "not_eq", "nullptr", "offsetof", "operator", "or", "or_eq", "override", "private",
    "protected", "public", "reflexpr", "register", "reinterpret_cast", "requires", "return",
    "short", "signed", "size_t", "sizeof", "static", "static_assert", "static_cast", "std",
    "struct", "switch", "synchronized", "template", "this", "thread_local", "throw", "true",
    "try", "typedef", "typeid", "typename", "uint16_t", "uint32_t", "uint64_t", "uint8_t",
    "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor",
    "xor_eq",
};

constexpr std::string_view kHeaderMacros[] = {
#include "idl/cpp/cpp_macros.inc"
};

std::string ClientType(const Param& p) {
  const std::string t(Describe(p.type).cpp);
  if (p.is_stream()) {  // the convenience form: a whole span in, a vector out
    return p.direction == Direction::kIn ? "std::span<const " + t + ">"
                                         : "std::vector<" + t + ">*";
  }
  if (p.layout) {
    return p.direction == Direction::kIn ? "naarpc::StridedView<const " + t + ">"
                                         : "naarpc::StridedView<" + t + ">";
  }
  if (p.scalar()) return p.direction == Direction::kIn ? t : t + "*";
  if (p.direction == Direction::kIn) return "std::span<const " + t + ">";
  if (p.variable) return "std::vector<" + t + ">*";
  return "std::span<" + t + ">";
}

std::string List(const std::vector<uint64_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]) + "u";
  return s + "}";
}

// The declared layout as a naarpc::Layout expression (generated stubs).
std::string LayoutExpr(const Param& p) {
  if (!p.layout) return "";
  const naarpc::Layout& l = p.layout->layout;
  switch (l.kind) {
    case naarpc::Layout::Kind::kStrided:
      return "naarpc::Layout::Strided(" + std::to_string(l.count) + "u, " +
             std::to_string(l.block) + "u, " + std::to_string(l.stride) + "u, " +
             std::to_string(l.offset) + "u)";
    case naarpc::Layout::Kind::kSubArray:
      return "naarpc::Layout::SubArray(" + List(l.shape) + ", " + List(l.extents) + ", " +
             List(l.offsets) + ")";
    case naarpc::Layout::Kind::kComposite: {
      std::string s = "naarpc::Layout::Composite({";
      for (size_t i = 0; i < l.pieces.size(); ++i)
        s += (i ? ", {" : "{") + std::to_string(l.pieces[i].offset) + "u, " +
             std::to_string(l.pieces[i].length) + "u}";
      return s + "})";
    }
    case naarpc::Layout::Kind::kInterleaved:
      return "naarpc::Layout::Interleaved(" + List(l.repeat) + ", " + std::to_string(l.elements) +
             "u)";
    case naarpc::Layout::Kind::kContiguous:
      return "naarpc::Layout::Contiguous(" + std::to_string(l.elements) + "u)";
  }
  return "";
}

std::string StreamClientType(const Param& p) {
  if (!p.is_stream()) return "";
  const std::string t(Describe(p.type).cpp);
  return p.direction == Direction::kIn ? "naarpc::codegen::StreamSource<" + t + ">&"
                                       : "naarpc::codegen::StreamSink<" + t + ">&";
}

std::string KernelType(const Param& p) {
  const std::string t(Describe(p.type).cpp);
  if (p.is_stream()) {
    return p.direction == Direction::kIn ? "naarpc::codegen::StreamReader<" + t + ">&"
                                         : "naarpc::codegen::StreamWriter<" + t + ">&";
  }
  if (p.scalar()) return p.direction == Direction::kIn ? t : t + "&";
  if (p.direction == Direction::kIn) return "std::span<const " + t + ">";
  if (p.variable) return "naarpc::codegen::VarSpan<" + t + ">&";
  return "std::span<" + t + ">";
}

}  // namespace

bool IsReservedWord(std::string_view name) {
  return std::binary_search(std::begin(kReservedWords), std::end(kReservedWords), name);
}

bool IsHeaderMacro(std::string_view name) {
  return std::binary_search(std::begin(kHeaderMacros), std::end(kHeaderMacros), name);
}

std::string BadIdentifier(std::string_view name) {
  const std::string q = "'" + std::string(name) + "'";
  if (IsReservedWord(name)) return q + " is a C++ keyword or reserved name";
  if (name.find("__") != std::string_view::npos ||
      (name.size() >= 2 && name[0] == '_' && (std::isupper(static_cast<unsigned char>(name[1])) ||
                                              name[1] == '_'))) {
    return q + " is reserved in C++ (double underscore or _Uppercase)";
  }
  std::string lower;
  for (char c : name.substr(0, 7)) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "naarpc_") return q + " uses the prefix 'naarpc_' reserved for generated code";
  return "";
}

std::string PascalFromUpperSnake(std::string_view name) {
  std::string out;
  bool start = true;
  for (char c : name) {
    if (c == '_') {
      start = true;
      continue;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    out += static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    start = false;
  }
  return out;
}

std::string SnakeFromCamel(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char u = static_cast<unsigned char>(name[i]);
    if (i > 0 && std::isupper(u)) out += '_';
    out += static_cast<char>(std::tolower(u));
  }
  return out;
}

void AssignCppNames(IdlFile& idl) {
  for (Service& s : idl.services) {
    const std::string& S = s.name;
    s.cpp = {S + "Error", S + "ErrorName", S + "ErrorFromStatus", S + "ClientInterface",
             S + "Client", S + "Service", "Mock" + S + "Client",
             S + "ChannelClient"};
    for (ErrorCode& e : s.errors) e.enumerator = "k" + PascalFromUpperSnake(e.name);
    for (Routine& r : s.routines) {
      const std::string& R = r.name;
      for (ErrorCode& e : r.errors) e.enumerator = "k" + PascalFromUpperSnake(e.name);
      r.cpp.method = R;
      r.cpp.async_method = R + "Async";
      r.cpp.call_class = R + "Call";
      r.cpp.new_call = "New" + R + "Call";
      r.cpp.function_code_constant = "k" + R + "FunctionCode";
      r.cpp.default_deadline_constant = "k" + R + "DefaultDeadline";
      r.cpp.timeout_constant = "k" + R + "Timeout";
      r.cpp.handler = "Handle" + R;
      r.cpp.pool_member = "pool_" + SnakeFromCamel(R) + "_";
      r.cpp.routine_struct = S + R + "Routine";
      // The callback form of <R>Async has the most arguments: params,
      // done, deadline.
      r.cpp.mock_packs_arguments = r.params.size() + 2 > kMaxMockArguments;
      r.cpp.mock_args_type = r.cpp.mock_packs_arguments ? R + "Args" : "";
      r.cpp.mock_stream_args_type =
          r.cpp.mock_packs_arguments && r.has_streams() ? R + "StreamArgs" : "";
      for (Param& p : r.params) {
        p.cpp.client_type = ClientType(p);
        p.cpp.kernel_type = KernelType(p);
        p.cpp.stream_client_type = StreamClientType(p);
        p.cpp.layout_expr = LayoutExpr(p);
        // A stream has no buffer in the zero-copy call: it is an argument
        // of Invoke.
        p.cpp.accessor = p.is_stream() ? "" : p.name;
        p.cpp.size_getter = p.variable ? p.name + "_size" : "";
        p.cpp.size_setter = p.variable && p.is_input() ? "set_" + p.name + "_size" : "";
      }
      for (Internal& i : r.internals) {
        i.cpp.kernel_type = "std::span<" + std::string(Describe(i.type).cpp) + ">";
      }
    }
  }
}

}  // namespace naarpc::idl::internal
