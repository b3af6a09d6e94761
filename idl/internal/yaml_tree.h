// The YAML document of an IDL file as a tree that keeps every node's
// position and how it was written (plain or quoted, tags), built from
// yaml-cpp's parser events. yaml-cpp's exceptions stop here.
#ifndef NAARPC_IDL_INTERNAL_YAML_TREE_H_
#define NAARPC_IDL_INTERNAL_YAML_TREE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idl/diagnostic.h"
#include "idl/internal/sink.h"
#include "idl/internal/text.h"

namespace naarpc::idl::internal {

// Deeper nesting is refused (an IDL file needs 7 levels).
inline constexpr int kMaxYamlDepth = 32;

struct YamlEntry;

struct YamlNode {
  enum class Kind {
    kNull,      // ~, null, or an empty value
    kScalar,
    kSequence,
    kMapping,
    kInvalid,   // already reported (alias, unsupported tag): checks skip it
  };
  Kind kind = Kind::kNull;
  Location location;
  // Scalars: "" (no tag), or a standard tag as "!!str", "!!int", "!!bool",
  // "!!float", "!!null".
  std::string tag;
  bool plain = false;  // scalar written without quotes and without a tag
  std::string value;   // scalar text (escapes decoded)
  std::vector<YamlNode> items;     // sequence
  std::vector<YamlEntry> entries;  // mapping, in file order (duplicates kept)

  bool is_scalar() const { return kind == Kind::kScalar; }
};

struct YamlEntry {
  YamlNode key;
  YamlNode value;
};

// Parses the one document of `text` (already through CheckText). Reports
// syntax errors (with the enclosing collection), YAML features the IDL does
// not support (anchors, aliases, tags other than the standard ones, a second
// document) and excessive nesting; nullopt if the tree is unusable.
std::optional<YamlNode> ParseYaml(std::string_view text, const LineIndex& lines, Sink& sink);

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_INTERNAL_YAML_TREE_H_
