// The IDL schema (the same as idl/schema.yaml, which editors and
// //tests/idl:schema_test compare against) and typed reading of YAML nodes
// with its rules: every problem is reported at its line and column with the
// field path, and reading goes on (one run reports everything).
#ifndef NAARPC_IDL_INTERNAL_SCHEMA_H_
#define NAARPC_IDL_INTERNAL_SCHEMA_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idl/internal/sink.h"
#include "idl/internal/yaml_tree.h"

namespace naarpc::idl::internal {

enum class FieldKind {
  kString,       // free text (docs)
  kIdentifier,   // [A-Za-z_][A-Za-z0-9_]*
  kUpperSnake,   // [A-Z][A-Z0-9_]*
  kPackage,      // dotted identifiers
  kInteger,
  kBoolean,
  kElementType,  // u8 ... bytes
  kDirection,    // in, out, inout
  kMemoryWindows,  // required, none
  kList,
  kMapping,      // a nested object (its own ObjectRules)
};

struct FieldRule {
  std::string_view name;
  FieldKind kind;
  bool required = false;
  std::optional<int64_t> minimum = std::nullopt;  // integers
  std::optional<int64_t> maximum = std::nullopt;
  size_t min_items = 0;                           // lists
};

struct ObjectRules {
  std::string_view definition;  // name in schema.yaml ("" = the document)
  std::span<const FieldRule> fields;
  const FieldRule* Find(std::string_view name) const;
};

const ObjectRules& FileRules();
const ObjectRules& ServiceRules();
const ObjectRules& RoutineRules();
const ObjectRules& ParamRules();
const ObjectRules& InternalRules();
const ObjectRules& ErrorRules();
const ObjectRules& StreamRules();
const ObjectRules& LayoutRules();
const ObjectRules& StridedRules();
const ObjectRules& SubArrayRules();
const ObjectRules& InterleavedRules();

// An integer list entry (layouts: shape, pieces, repeat) with the IDL's
// integer rules and `minimum`; nullopt (reported) if it is not one.
std::optional<int64_t> ReadListInteger(const YamlNode& n, const std::string& path,
                                       int64_t minimum, Sink& sink);

// The element type, direction and memory_windows names, in schema order.
std::span<const std::string_view> ElementTypeNames();
std::span<const std::string_view> DirectionNames();
std::span<const std::string_view> MemoryWindowsNames();

// "a mapping", "a list", "null (empty value)", "string 'x'", ...
std::string DescribeNode(const YamlNode& node);

// One mapping of the document, checked against `rules` on construction:
// not a mapping, duplicate keys, unknown fields (merge keys by name) and
// missing required fields are reported. Typed getters report wrong values
// and return nullopt for them (and for absent fields).
class Object {
 public:
  Object(const YamlNode& node, std::string path, const ObjectRules& rules, Sink& sink);

  bool is_mapping() const { return is_mapping_; }
  Location location() const { return node_.location; }
  const std::string& path() const { return path_; }
  std::string Path(std::string_view key) const;

  bool Has(std::string_view key) const { return Get(key) != nullptr; }
  const YamlNode* Get(std::string_view key) const;
  // Where the value of `key` is (an empty value: its key); the mapping if
  // absent.
  Location At(std::string_view key) const;

  std::optional<std::string> String(std::string_view key);
  std::optional<int64_t> Integer(std::string_view key);
  std::optional<bool> Boolean(std::string_view key);
  const std::vector<YamlNode>* List(std::string_view key);

 private:
  const FieldRule& Rule(std::string_view key) const;

  const YamlNode& node_;
  std::string path_;
  const ObjectRules& rules_;
  Sink& sink_;
  bool is_mapping_ = false;
  std::vector<const YamlEntry*> fields_;  // first occurrence of each known key
};

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_INTERNAL_SCHEMA_H_
