#include "idl/internal/schema.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "idl/internal/scalar.h"
#include "idl/internal/text.h"

namespace naarpc::idl::internal {
namespace {

constexpr int64_t kMaxTimeoutMs = 86400000;

constexpr FieldRule kFileFields[] = {
    {"package", FieldKind::kPackage, true},
    {"doc", FieldKind::kString},
    {"services", FieldKind::kList, true, std::nullopt, std::nullopt, 1},
};
constexpr FieldRule kServiceFields[] = {
    {"name", FieldKind::kIdentifier, true},
    {"doc", FieldKind::kString},
    {"timeout_ms", FieldKind::kInteger, false, 1, kMaxTimeoutMs},
    {"memory_windows", FieldKind::kMemoryWindows},
    {"errors", FieldKind::kList},
    {"routines", FieldKind::kList, true, std::nullopt, std::nullopt, 1},
};
constexpr FieldRule kRoutineFields[] = {
    {"name", FieldKind::kIdentifier, true},
    {"code", FieldKind::kInteger, true},
    {"doc", FieldKind::kString},
    {"timeout_ms", FieldKind::kInteger, false, 1, kMaxTimeoutMs},
    {"deadline_ms", FieldKind::kInteger, false, 1, kMaxTimeoutMs},
    {"idempotent", FieldKind::kBoolean},
    {"memory_windows", FieldKind::kMemoryWindows},
    {"params", FieldKind::kList, true},
    {"internal", FieldKind::kList},
    {"errors", FieldKind::kList},
};
constexpr FieldRule kParamFields[] = {
    {"name", FieldKind::kIdentifier, true},
    {"type", FieldKind::kElementType, true},
    {"size", FieldKind::kInteger},
    {"max", FieldKind::kInteger},
    {"direction", FieldKind::kDirection, true},
    {"single_send", FieldKind::kBoolean},
    {"stream", FieldKind::kMapping},
    {"layout", FieldKind::kMapping},
    {"doc", FieldKind::kString},
};
// docs/protocol.md 15: window 1..64 (the chunk's byte limit depends on the
// element type; validate.cc checks it).
constexpr FieldRule kStreamFields[] = {
    {"chunk", FieldKind::kInteger, true, 1},
    {"window", FieldKind::kInteger, true, 1, 64},
};
// docs/idl.md "Layouts" (seed 004): exactly one form per layout; the
// arithmetic rules are naarpc::CheckLayout's (runtime/wire/layout.cc).
constexpr FieldRule kLayoutFields[] = {
    {"strided", FieldKind::kMapping},
    {"subarray", FieldKind::kMapping},
    {"composite", FieldKind::kList, false, std::nullopt, std::nullopt, 1},
    {"interleaved", FieldKind::kMapping},
};
constexpr FieldRule kStridedFields[] = {
    {"count", FieldKind::kInteger, true, 1},
    {"block", FieldKind::kInteger, true, 1},
    {"stride", FieldKind::kInteger, true, 1},
    {"offset", FieldKind::kInteger, false, 0},
};
constexpr FieldRule kSubArrayFields[] = {
    {"shape", FieldKind::kList, true, std::nullopt, std::nullopt, 2},
    {"extents", FieldKind::kList, true, std::nullopt, std::nullopt, 2},
    {"offsets", FieldKind::kList},
};
constexpr FieldRule kInterleavedFields[] = {
    {"repeat", FieldKind::kList, true, std::nullopt, std::nullopt, 2},
};
constexpr FieldRule kInternalFields[] = {
    {"name", FieldKind::kIdentifier, true},
    {"type", FieldKind::kElementType},
    {"size", FieldKind::kInteger, true},
    {"naa_address", FieldKind::kInteger, false, 0},
    {"doc", FieldKind::kString},
};
constexpr FieldRule kErrorFields[] = {
    {"name", FieldKind::kUpperSnake, true},
    {"code", FieldKind::kInteger, true, 16, 127},
    {"doc", FieldKind::kString},
};

constexpr std::string_view kElementTypes[] = {"u8",  "u16", "u32", "u64", "i8",   "i16",
                                              "i32", "i64", "f32", "f64", "bytes"};
constexpr std::string_view kDirections[] = {"in", "out", "inout"};
// Not `off`: YAML 1.1 tools read it as false (docs/idl.md "The YAML the IDL
// accepts").
constexpr std::string_view kMemoryWindows[] = {"required", "none"};

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_';
  });
}

bool IsUpperSnake(std::string_view s) {
  if (s.empty() || !(s[0] >= 'A' && s[0] <= 'Z')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool IsPackage(std::string_view s) {
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    if (!IsIdentifier(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string Join(std::span<const std::string_view> words) {
  std::string out;
  for (std::string_view w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}

std::string Quote(std::string_view s) {
  // Messages show values as written; long ones are cut.
  std::string v(s.substr(0, 60));
  if (s.size() > 60) v += "...";
  return "'" + v + "'";
}

std::string HexSuffix(int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, " (0x%llx)", static_cast<unsigned long long>(v));
  return buf;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const char x = static_cast<char>(std::tolower(static_cast<unsigned char>(a[i - 1])));
      const char y = static_cast<char>(std::tolower(static_cast<unsigned char>(b[j - 1])));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x == y ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), s.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) ==
                  std::tolower(static_cast<unsigned char>(b));
         });
}

// The known field an unknown key probably means: the only one it begins
// (`dir`, `timeout`) or that begins it, else the nearest within 2 edits.
std::optional<std::string_view> Suggest(std::string_view key, const ObjectRules& rules) {
  if (key.size() < 2) return std::nullopt;
  std::optional<std::string_view> prefix;
  int prefixes = 0;
  for (const FieldRule& f : rules.fields) {
    if (StartsWith(f.name, key) || StartsWith(key, f.name)) ++prefixes, prefix = f.name;
  }
  if (prefixes == 1) return prefix;
  std::optional<std::string_view> best;
  size_t best_distance = 3;
  for (const FieldRule& f : rules.fields) {
    if (const size_t d = EditDistance(key, f.name); d < best_distance) {
      best_distance = d;
      best = f.name;
    }
  }
  return best;
}

// A quoted or !!str scalar, a plain one that YAML reads as a string both in
// 1.1 and 1.2, or nullopt after reporting.
std::optional<std::string> ReadString(const YamlNode& n, const std::string& path,
                                      FieldKind kind, Sink& sink) {
  const bool is_enum = kind == FieldKind::kElementType || kind == FieldKind::kDirection ||
                       kind == FieldKind::kMemoryWindows;
  const std::span<const std::string_view> values =
      kind == FieldKind::kElementType   ? std::span<const std::string_view>(kElementTypes)
      : kind == FieldKind::kDirection   ? std::span<const std::string_view>(kDirections)
                                        : std::span<const std::string_view>(kMemoryWindows);
  const std::string expected = is_enum ? "one of: " + Join(values) : "a string";
  switch (n.kind) {
    case YamlNode::Kind::kInvalid:
      return std::nullopt;
    case YamlNode::Kind::kScalar:
      break;
    default:
      sink.Error(n.location, path, "expected " + expected + ", got " + DescribeNode(n));
      return std::nullopt;
  }
  if (!n.tag.empty() && n.tag != "!!str") {
    sink.Error(n.location, path, "expected " + expected + ", got " + Quote(n.value) +
                                     " tagged " + n.tag);
    return std::nullopt;
  }
  if (n.plain && !(is_enum && std::find(values.begin(), values.end(), n.value) != values.end())) {
    if (PlainType12(n.value) != ScalarType::kString ||
        PlainType11(n.value) != ScalarType::kString) {
      if (is_enum) {
        sink.Error(n.location, path, DescribePlain(n.value) + " is not " + expected);
      } else {
        sink.Error(n.location, path,
                   "expected a string, got " + DescribePlain(n.value) + "; quote it (\"" +
                       n.value + "\") if you mean the text");
      }
      return std::nullopt;
    }
  }
  if (std::string bad = CheckDecodedString(n.value); !bad.empty()) {
    sink.Error(n.location, path, bad);
    return std::nullopt;
  }
  const std::string& v = n.value;
  switch (kind) {
    case FieldKind::kIdentifier:
      if (!IsIdentifier(v)) {
        sink.Error(n.location, path,
                   Quote(v) + " is not an identifier (letters, digits and _, not starting "
                              "with a digit)");
        return std::nullopt;
      }
      break;
    case FieldKind::kUpperSnake:
      if (!IsUpperSnake(v)) {
        sink.Error(n.location, path,
                   Quote(v) + " is not UPPER_SNAKE_CASE (capital letters, digits and _, "
                              "starting with a letter)");
        return std::nullopt;
      }
      break;
    case FieldKind::kPackage:
      if (!IsPackage(v)) {
        sink.Error(n.location, path,
                   Quote(v) + " is not a dotted name of identifiers (e.g. my.project.math)");
        return std::nullopt;
      }
      break;
    case FieldKind::kElementType:
    case FieldKind::kDirection:
    case FieldKind::kMemoryWindows:
      if (std::find(values.begin(), values.end(), v) == values.end()) {
        sink.Error(n.location, path, "string " + Quote(v) + " is not " + expected);
        return std::nullopt;
      }
      break;
    default:
      break;
  }
  return v;
}

std::optional<int64_t> ReadInteger(const YamlNode& n, const std::string& path,
                                   const FieldRule& rule, Sink& sink) {
  if (n.kind == YamlNode::Kind::kInvalid) return std::nullopt;
  if (n.kind != YamlNode::Kind::kScalar) {
    sink.Error(n.location, path, "expected an integer, got " + DescribeNode(n));
    return std::nullopt;
  }
  int64_t v = 0;
  const IntStatus st = ParseIdlInteger(n.value, &v);
  if (n.tag == "!!int" || (n.plain && n.tag.empty())) {
    if (st == IntStatus::kOutOfRange) {
      sink.Error(n.location, path, "integer " + Quote(n.value) + " is out of range");
      return std::nullopt;
    }
    if (st == IntStatus::kNotInteger) {
      const std::string hint = IntegerHint(n.value);
      if (n.tag == "!!int") {
        sink.Error(n.location, path,
                   Quote(n.value) + " is tagged !!int but is not an integer (decimal or 0x "
                                    "hex)" + (hint.empty() ? "" : ": " + hint));
      } else if (!hint.empty()) {
        sink.Error(n.location, path, "expected an integer, got " + Quote(n.value) + ": " + hint);
      } else {
        sink.Error(n.location, path, "expected an integer, got " + DescribePlain(n.value));
      }
      return std::nullopt;
    }
  } else {
    if (!n.tag.empty() && n.tag != "!!str") {
      sink.Error(n.location, path, "expected an integer, got " + Quote(n.value) + " tagged " +
                                       n.tag);
    } else if (st == IntStatus::kOk) {
      sink.Error(n.location, path, "expected an integer, got the quoted string " +
                                       Quote(n.value) + "; remove the quotes");
    } else {
      sink.Error(n.location, path, "expected an integer, got string " + Quote(n.value));
    }
    return std::nullopt;
  }
  if (rule.minimum && v < *rule.minimum) {
    sink.Error(n.location, path, std::to_string(v) + " is below the minimum " +
                                     std::to_string(*rule.minimum) + HexSuffix(*rule.minimum));
    return std::nullopt;
  }
  if (rule.maximum && v > *rule.maximum) {
    sink.Error(n.location, path, std::to_string(v) + " is above the maximum " +
                                     std::to_string(*rule.maximum) + HexSuffix(*rule.maximum));
    return std::nullopt;
  }
  return v;
}

std::optional<bool> ReadBoolean(const YamlNode& n, const std::string& path, Sink& sink) {
  if (n.kind == YamlNode::Kind::kInvalid) return std::nullopt;
  if (n.kind != YamlNode::Kind::kScalar) {
    sink.Error(n.location, path, "expected true or false, got " + DescribeNode(n));
    return std::nullopt;
  }
  if (n.tag == "!!bool" || (n.plain && n.tag.empty())) {
    if (std::optional<bool> b = ParseBool12(n.value)) return b;
    if (PlainType11(n.value) == ScalarType::kBool) {
      sink.Error(n.location, path, Quote(n.value) + " is a boolean only in YAML 1.1; write "
                                                    "true or false");
    } else {
      sink.Error(n.location, path, "expected true or false, got " + DescribePlain(n.value));
    }
    return std::nullopt;
  }
  if (!n.tag.empty() && n.tag != "!!str") {
    sink.Error(n.location, path, "expected true or false, got " + Quote(n.value) + " tagged " +
                                     n.tag);
  } else if (ParseBool12(n.value)) {
    sink.Error(n.location, path, "expected true or false, got the quoted string " +
                                     Quote(n.value) + "; remove the quotes");
  } else {
    sink.Error(n.location, path, "expected true or false, got string " + Quote(n.value));
  }
  return std::nullopt;
}

}  // namespace

const FieldRule* ObjectRules::Find(std::string_view name) const {
  for (const FieldRule& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const ObjectRules& FileRules() {
  static const ObjectRules r{"", kFileFields};
  return r;
}
const ObjectRules& ServiceRules() {
  static const ObjectRules r{"service", kServiceFields};
  return r;
}
const ObjectRules& RoutineRules() {
  static const ObjectRules r{"routine", kRoutineFields};
  return r;
}
const ObjectRules& ParamRules() {
  static const ObjectRules r{"param", kParamFields};
  return r;
}
const ObjectRules& InternalRules() {
  static const ObjectRules r{"internal", kInternalFields};
  return r;
}
const ObjectRules& ErrorRules() {
  static const ObjectRules r{"error", kErrorFields};
  return r;
}
const ObjectRules& LayoutRules() {
  static const ObjectRules r{"layout", kLayoutFields};
  return r;
}
const ObjectRules& StridedRules() {
  static const ObjectRules r{"strided", kStridedFields};
  return r;
}
const ObjectRules& SubArrayRules() {
  static const ObjectRules r{"subarray", kSubArrayFields};
  return r;
}
const ObjectRules& InterleavedRules() {
  static const ObjectRules r{"interleaved", kInterleavedFields};
  return r;
}
std::optional<int64_t> ReadListInteger(const YamlNode& n, const std::string& path,
                                       int64_t minimum, Sink& sink) {
  if (n.kind == YamlNode::Kind::kNull) {
    sink.Error(n.location, path, "expected an integer, got null (empty value)");
    return std::nullopt;
  }
  const FieldRule rule{"", FieldKind::kInteger, false, minimum};
  return ReadInteger(n, path, rule, sink);
}
const ObjectRules& StreamRules() {
  static const ObjectRules r{"stream", kStreamFields};
  return r;
}

std::span<const std::string_view> ElementTypeNames() { return kElementTypes; }
std::span<const std::string_view> DirectionNames() { return kDirections; }
std::span<const std::string_view> MemoryWindowsNames() { return kMemoryWindows; }

std::string DescribeNode(const YamlNode& n) {
  switch (n.kind) {
    case YamlNode::Kind::kNull:
      return "null (empty value)";
    case YamlNode::Kind::kSequence:
      return "a list";
    case YamlNode::Kind::kMapping:
      return "a mapping";
    case YamlNode::Kind::kInvalid:
      return "an unsupported YAML node";
    case YamlNode::Kind::kScalar:
      break;
  }
  if (n.plain) return DescribePlain(n.value);
  if (!n.tag.empty() && n.tag != "!!str") return Quote(n.value) + " tagged " + n.tag;
  return "string " + Quote(n.value);
}

Object::Object(const YamlNode& node, std::string path, const ObjectRules& rules, Sink& sink)
    : node_(node), path_(std::move(path)), rules_(rules), sink_(sink) {
  fields_.assign(rules.fields.size(), nullptr);
  if (node.kind == YamlNode::Kind::kInvalid) return;
  if (node.kind != YamlNode::Kind::kMapping) {
    const std::string what = rules.definition.empty()
                                 ? "the document to be a mapping (package, services, ...)"
                                 : "a mapping (the fields of a " +
                                       std::string(rules.definition) + ")";
    sink.Error(node.location, path_.empty() ? "<document>" : path_,
               "expected " + what + ", got " + DescribeNode(node));
    return;
  }
  is_mapping_ = true;
  std::string allowed;
  for (const FieldRule& f : rules.fields) {
    if (!allowed.empty()) allowed += ", ";
    allowed += f.name;
  }
  for (const YamlEntry& e : node.entries) {
    const YamlNode& key = e.key;
    if (key.kind == YamlNode::Kind::kInvalid) continue;
    if (key.kind != YamlNode::Kind::kScalar) {
      sink.Error(key.location, path_, "a mapping key must be a field name, got " +
                                          DescribeNode(key));
      continue;
    }
    if (key.plain && key.value == "<<") {
      sink.Error(key.location, Path("<<"),
                 "merge keys (<<) are not supported by the IDL; write the fields out");
      continue;
    }
    size_t index = rules.fields.size();
    for (size_t i = 0; i < rules.fields.size(); ++i) {
      if (rules.fields[i].name == key.value) index = i;
    }
    if (index == rules.fields.size()) {
      std::string msg = "unknown field (allowed: " + allowed + ")";
      if (std::optional<std::string_view> guess = Suggest(key.value, rules)) {
        msg += "; did you mean '" + std::string(*guess) + "'?";
      }
      sink.Error(key.location, Path(key.value), msg);
      continue;
    }
    if (fields_[index] != nullptr) {
      sink.Error(key.location, Path(key.value),
                 "duplicate key '" + key.value + "' (first at line " +
                     std::to_string(fields_[index]->key.location.line) + ")");
      continue;
    }
    fields_[index] = &e;
  }
  for (size_t i = 0; i < rules.fields.size(); ++i) {
    if (rules.fields[i].required && fields_[i] == nullptr) {
      sink.Error(node.location, Path(rules.fields[i].name), "required field is missing");
    }
  }
}

std::string Object::Path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const FieldRule& Object::Rule(std::string_view key) const {
  const FieldRule* r = rules_.Find(key);
  static constexpr FieldRule kNone{"", FieldKind::kString};
  return r ? *r : kNone;
}

const YamlNode* Object::Get(std::string_view key) const {
  for (size_t i = 0; i < rules_.fields.size(); ++i) {
    if (rules_.fields[i].name == key) return fields_[i] ? &fields_[i]->value : nullptr;
  }
  return nullptr;
}

Location Object::At(std::string_view key) const {
  for (size_t i = 0; i < rules_.fields.size(); ++i) {
    if (rules_.fields[i].name != key || fields_[i] == nullptr) continue;
    const YamlEntry& e = *fields_[i];
    // An empty value sits where the next token is: point at its key.
    if (e.value.kind == YamlNode::Kind::kNull && e.value.location.line != e.key.location.line) {
      return e.key.location;
    }
    return e.value.location;
  }
  return node_.location;
}

std::optional<std::string> Object::String(std::string_view key) {
  const YamlNode* n = Get(key);
  if (n == nullptr) return std::nullopt;
  if (n->kind == YamlNode::Kind::kNull) {
    sink_.Error(At(key), Path(key),
                std::string("expected ") +
                    (Rule(key).kind == FieldKind::kElementType ? "an element type" :
                     Rule(key).kind == FieldKind::kDirection   ? "in, out or inout"
                     : Rule(key).kind == FieldKind::kMemoryWindows ? "required or none"
                                                                   : "a string") +
                    ", got null (empty value)");
    return std::nullopt;
  }
  return ReadString(*n, Path(key), Rule(key).kind, sink_);
}

std::optional<int64_t> Object::Integer(std::string_view key) {
  const YamlNode* n = Get(key);
  if (n == nullptr) return std::nullopt;
  if (n->kind == YamlNode::Kind::kNull) {
    sink_.Error(At(key), Path(key), "expected an integer, got null (empty value)");
    return std::nullopt;
  }
  return ReadInteger(*n, Path(key), Rule(key), sink_);
}

std::optional<bool> Object::Boolean(std::string_view key) {
  const YamlNode* n = Get(key);
  if (n == nullptr) return std::nullopt;
  if (n->kind == YamlNode::Kind::kNull) {
    sink_.Error(At(key), Path(key), "expected true or false, got null (empty value)");
    return std::nullopt;
  }
  return ReadBoolean(*n, Path(key), sink_);
}

const std::vector<YamlNode>* Object::List(std::string_view key) {
  const YamlNode* n = Get(key);
  if (n == nullptr || n->kind == YamlNode::Kind::kInvalid) return nullptr;
  if (n->kind != YamlNode::Kind::kSequence) {
    sink_.Error(At(key), Path(key), "expected a list, got " + DescribeNode(*n));
    return nullptr;
  }
  const size_t min_items = Rule(key).min_items;
  if (n->items.size() < min_items) {
    sink_.Error(n->location, Path(key),
                "needs at least " + std::to_string(min_items) +
                    (min_items == 1 ? " entry" : " entries"));
  }
  return &n->items;
}

}  // namespace naarpc::idl::internal
