#include "idl/internal/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <exception>
#include <new>
#include <sstream>
#include <utility>

namespace naarpc::idl::internal {
namespace {

constexpr std::string_view kCoreTagPrefix = "tag:yaml.org,2002:";

// Thrown from the event handler to stop yaml-cpp (never leaves this file).
struct StopParsing {};

std::string ShortTag(const std::string& tag) {
  if (tag.compare(0, kCoreTagPrefix.size(), kCoreTagPrefix) == 0) {
    return "!!" + tag.substr(kCoreTagPrefix.size());
  }
  return tag;
}

// yaml-cpp's messages with what usually causes them.
std::string ExplainSyntaxError(const std::string& msg) {
  struct Hint {
    std::string_view yaml_cpp;
    std::string_view hint;
  };
  static constexpr Hint kHints[] = {
      {"end of map not found", "check the indentation"},
      {"end of sequence not found", "check the indentation"},
      {"end of map flow not found", "a '}' is missing"},
      {"end of sequence flow not found", "a ']' is missing"},
      {"illegal map value",
       "a ':' where YAML does not allow one (check the indentation; quote values that "
       "contain ': ')"},
      {"illegal block entry", "a '- ' entry where YAML does not allow one (check the "
                              "indentation)"},
      {"illegal tab when looking for indentation", "YAML indents with spaces, not tabs"},
      {"illegal flow end", "a ']' or '}' without its opening bracket"},
      {"the referenced anchor is not defined",
       "an alias (*name) without its anchor; the IDL supports neither"},
  };
  for (const Hint& h : kHints) {
    if (msg == h.yaml_cpp) return msg + ": " + std::string(h.hint);
  }
  return msg;
}

constexpr char kUnterminatedQuote[] = "YAML syntax error: unterminated quoted string";

// If the scalar whose node starts at `pos` (after any tag or anchor) is
// quoted and its closing quote is missing, the opening quote's offset.
// yaml-cpp 0.7 ends such a scalar at the end of the file without an error
// if a line break follows it, and reports "illegal EOF in scalar" at the
// end of the file otherwise.
std::optional<size_t> UnterminatedQuote(std::string_view text, size_t pos) {
  while (pos < text.size() && (text[pos] == '!' || text[pos] == '&')) {  // properties
    while (pos < text.size() && text[pos] != ' ' && text[pos] != '\t' && text[pos] != '\n' &&
           text[pos] != '\r') {
      ++pos;
    }
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' ||
                                 text[pos] == '\r')) {
      ++pos;
    }
  }
  if (pos >= text.size() || (text[pos] != '"' && text[pos] != '\'')) return std::nullopt;
  const char quote = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // \" and \\ (any escape: what follows is never the closing quote)
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
      } else {
        return std::nullopt;
      }
    }
  }
  return pos;
}

class TreeBuilder final : public YAML::EventHandler {
 public:
  TreeBuilder(std::string_view text, const LineIndex& lines, Sink& sink)
      : text_(text), lines_(lines), sink_(sink) {}

  std::optional<YamlNode>& root() { return root_; }

  // The innermost collection being parsed, for syntax-error context.
  std::string Context() const {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      const YamlNode& n = *it->node;
      const char* what = n.kind == YamlNode::Kind::kMapping ? "mapping" : "list";
      const Location at = n.location;
      return std::string(" (while parsing the ") + (it->flow ? "flow " : "block ") + what +
             " that starts at line " + std::to_string(at.line) + ", column " +
             std::to_string(at.column) + ")";
    }
    return "";
  }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    YamlNode n;
    n.kind = YamlNode::Kind::kNull;
    n.location = At(mark);
    Place(std::move(n));
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    YamlNode n;
    n.kind = YamlNode::Kind::kInvalid;
    n.location = At(mark);
    if (!InMergeKeyValue()) {
      const std::string name =
          anchor >= 1 && anchor <= anchors_.size() ? anchors_[anchor - 1] : "?";
      sink_.Error(n.location, "", "alias '*" + name + "': anchors and aliases are not "
                                  "supported by the IDL; write the content out");
    }
    Place(std::move(n));
  }

  void OnAnchor(const YAML::Mark& mark, const std::string& name) override {
    anchors_.push_back(name);
    sink_.Error(At(mark), "", "anchor '&" + name + "': anchors and aliases are not "
                              "supported by the IDL; write the content out");
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                const std::string& value) override {
    YamlNode n;
    n.kind = YamlNode::Kind::kScalar;
    n.location = At(mark);
    if (tag != "?" && mark.pos >= 0) {  // quoted, block or tagged
      if (std::optional<size_t> open = UnterminatedQuote(text_, static_cast<size_t>(mark.pos))) {
        // It swallowed the rest of the file: later errors would mislead.
        sink_.Error(lines_.At(*open), "", kUnterminatedQuote);
        throw StopParsing{};
      }
    }
    n.value = value;
    if (tag == "?") {
      n.plain = true;
    } else if (tag != "!") {
      n.tag = ShortTag(tag);
      if (n.tag == "!!null") {
        if (!value.empty()) BadTag(n, "a scalar that is not empty");
        else n.kind = YamlNode::Kind::kNull;
      } else if (n.tag != "!!str" && n.tag != "!!int" && n.tag != "!!bool" &&
                 n.tag != "!!float") {
        BadTag(n, "a scalar");
      }
    }
    Place(std::move(n));
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                       YAML::EmitterStyle::value style) override {
    Open(mark, tag, style, YamlNode::Kind::kSequence, "!!seq");
  }
  void OnSequenceEnd() override { Close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                  YAML::EmitterStyle::value style) override {
    Open(mark, tag, style, YamlNode::Kind::kMapping, "!!map");
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    YamlNode* node;
    bool flow;
    bool expect_key;    // mappings: the next node is a key
    bool invalid;       // collection with a bad tag: becomes kInvalid when closed
  };

  Location At(const YAML::Mark& mark) const {
    return lines_.At(mark.pos < 0 ? 0 : static_cast<size_t>(mark.pos));
  }

  void BadTag(YamlNode& n, const char* what) {
    sink_.Error(n.location, "", "tag '" + n.tag + "' on " + what +
                                    " is not supported by the IDL (only !!str, !!int, "
                                    "!!bool, !!null, !!seq and !!map)");
    n.kind = YamlNode::Kind::kInvalid;
  }

  // True while placing the value of a `<<` key (reported as a merge key).
  bool InMergeKeyValue() const {
    if (stack_.empty()) return false;
    const Frame& f = stack_.back();
    if (f.node->kind != YamlNode::Kind::kMapping || f.expect_key) return false;
    const YamlNode& key = f.node->entries.back().key;
    return key.plain && key.value == "<<";
  }

  YamlNode* Place(YamlNode&& n) {
    if (stack_.empty()) {
      if (root_) throw StopParsing{};  // cannot happen: one document per call
      root_ = std::move(n);
      return &*root_;
    }
    Frame& f = stack_.back();
    YamlNode& parent = *f.node;
    if (parent.kind == YamlNode::Kind::kSequence) {
      parent.items.push_back(std::move(n));
      return &parent.items.back();
    }
    if (f.expect_key) {
      f.expect_key = false;
      parent.entries.push_back(YamlEntry{std::move(n), YamlNode{}});
      return &parent.entries.back().key;
    }
    f.expect_key = true;
    YamlNode& v = parent.entries.back().value;
    v = std::move(n);
    return &v;
  }

  void Open(const YAML::Mark& mark, const std::string& tag, YAML::EmitterStyle::value style,
            YamlNode::Kind kind, const char* own_tag) {
    YamlNode n;
    n.kind = kind;
    n.location = At(mark);
    bool invalid = false;
    if (tag != "?" && tag != "!" && !tag.empty()) {
      const std::string t = ShortTag(tag);
      if (t != own_tag) {
        sink_.Error(n.location, "",
                    "tag '" + t + "' on a " +
                        (kind == YamlNode::Kind::kMapping ? "mapping" : "list") +
                        " is not supported by the IDL");
        invalid = true;
      }
    }
    if (static_cast<int>(stack_.size()) + 1 > kMaxYamlDepth) {
      sink_.Error(n.location, "",
                  "YAML nesting deeper than " + std::to_string(kMaxYamlDepth) +
                      " levels (an IDL file needs 7)");
      throw StopParsing{};
    }
    YamlNode* placed = Place(std::move(n));
    stack_.push_back(Frame{placed, style == YAML::EmitterStyle::Flow, true, invalid});
  }

  void Close() {
    if (stack_.empty()) return;
    if (stack_.back().invalid) stack_.back().node->kind = YamlNode::Kind::kInvalid;
    stack_.pop_back();
  }

  std::string_view text_;
  const LineIndex& lines_;
  Sink& sink_;
  std::optional<YamlNode> root_;
  std::vector<Frame> stack_;
  std::vector<std::string> anchors_;
};

// An event handler that ignores every event: the probes below override
// only what they look for.
class IgnoringHandler : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Only notices that a second document starts.
class DocumentProbe final : public IgnoringHandler {
 public:
  explicit DocumentProbe(const LineIndex& lines) : lines_(lines) {}
  std::optional<Location> start;

  void OnDocumentStart(const YAML::Mark& mark) override {
    start = lines_.At(mark.pos < 0 ? 0 : static_cast<size_t>(mark.pos));
    throw StopParsing{};
  }

 private:
  const LineIndex& lines_;
};

// Finds the opening quote behind yaml-cpp's "illegal EOF in scalar": parses
// the text again with a final line break, so that the scalar is read.
class QuoteFinder final : public IgnoringHandler {
 public:
  explicit QuoteFinder(std::string_view text) : text_(text) {}
  std::optional<size_t> open;

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                const std::string&) override {
    if (tag == "?" || mark.pos < 0) return;
    open = UnterminatedQuote(text_, static_cast<size_t>(mark.pos));
    if (open) throw StopParsing{};
  }

 private:
  std::string_view text_;
};

std::optional<size_t> FindUnterminatedQuote(std::string_view text) {
  std::istringstream in{std::string(text) + "\n"};
  QuoteFinder finder(text);
  try {
    YAML::Parser parser(in);
    parser.HandleNextDocument(finder);
  } catch (const StopParsing&) {
  } catch (const std::exception&) {  // another error first: not this case
  }
  return finder.open;
}

}  // namespace

std::optional<YamlNode> ParseYaml(std::string_view text, const LineIndex& lines, Sink& sink) {
  std::istringstream in{std::string(text)};
  TreeBuilder builder(text, lines, sink);
  const int errors_before = sink.error_count();
  try {
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(builder)) {
      sink.Error({1, 1}, "", "empty IDL file (no YAML document)");
      return std::nullopt;
    }
    DocumentProbe probe(lines);
    try {
      parser.HandleNextDocument(probe);
    } catch (const StopParsing&) {
    } catch (const YAML::Exception&) {
      // An error inside the second document: the second document is the error.
    }
    if (probe.start) {
      sink.Error(*probe.start, "",
                 "a second YAML document ('---'); an IDL file holds exactly one");
    }
  } catch (const StopParsing&) {
    return std::nullopt;  // reported by the builder
  } catch (const YAML::Exception& e) {
    if (e.msg == YAML::ErrorMsg::EOF_IN_SCALAR) {
      if (std::optional<size_t> open = FindUnterminatedQuote(text)) {
        sink.Error(lines.At(*open), "", kUnterminatedQuote);
        return std::nullopt;
      }
    }
    const Location at = e.mark.is_null() ? Location{} : lines.At(static_cast<size_t>(
                                                            e.mark.pos < 0 ? 0 : e.mark.pos));
    sink.Error(at, "", "YAML syntax error: " + ExplainSyntaxError(e.msg) + builder.Context());
    return std::nullopt;
  } catch (const std::bad_alloc&) {
    sink.Error({}, "", "out of memory while parsing the YAML");
    return std::nullopt;
  } catch (const std::exception& e) {
    sink.Error({}, "", std::string("YAML parser failed: ") + e.what());
    return std::nullopt;
  }
  if (!builder.root()) {
    sink.Error({1, 1}, "", "empty IDL file (no YAML document)");
    return std::nullopt;
  }
  if (sink.error_count() > errors_before && builder.root()->kind == YamlNode::Kind::kInvalid) {
    return std::nullopt;
  }
  return std::move(builder.root());
}

}  // namespace naarpc::idl::internal
