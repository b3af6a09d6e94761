#include "idl/internal/layout.h"

#include <string>
#include <vector>

#include "idl/internal/scalar.h"

namespace naarpc::idl::internal {
namespace {

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// An integer list field of a layout form; nullopt if absent or any entry is
// invalid (reported). `items` gets each entry's node for locations.
std::optional<std::vector<uint64_t>> ReadList(Object& o, std::string_view key, int64_t minimum,
                                              std::vector<const YamlNode*>& items, Sink& sink) {
  const std::vector<YamlNode>* list = o.List(key);
  if (list == nullptr) return std::nullopt;
  std::vector<uint64_t> out;
  bool ok = true;
  for (size_t i = 0; i < list->size(); ++i) {
    items.push_back(&(*list)[i]);
    if (std::optional<int64_t> v = ReadListInteger((*list)[i], Index(o.Path(key), i), minimum, sink))
      out.push_back(static_cast<uint64_t>(*v));
    else
      ok = false;
  }
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace

void ReadLayout(Object& p, Param& prm, std::optional<uint64_t> size, Sink& sink) {
  const std::string shown = prm.name.empty() ? "?" : prm.name;
  const Location at = p.At("layout");
  Object lo(*p.Get("layout"), p.Path("layout"), LayoutRules(), sink);
  if (!lo.is_mapping()) return;
  static constexpr std::string_view kForms[] = {"strided", "subarray", "composite", "interleaved"};
  int given = 0;
  std::string_view form;
  for (std::string_view f : kForms) {
    if (lo.Has(f)) ++given, form = f;
  }
  if (given != 1) {
    sink.Error(lo.location(), lo.path(),
               "give exactly one of strided, subarray, composite and interleaved");
    return;
  }
  if (prm.stream) {
    sink.Error(at, p.Path("layout"),
               "stream parameter '" + shown + "' cannot have a layout: its chunks are "
               "contiguous ring slots (docs/protocol.md 15)");
    return;
  }
  if (prm.variable) {
    sink.Error(at, p.Path("layout"),
               "parameter '" + shown + "' has 'max'; a layout needs a fixed 'size' (it places "
               "exactly that many elements)");
    return;
  }
  if (size && *size < 2) {
    sink.Error(at, p.Path("layout"),
               "parameter '" + shown + "' has 1 element; a layout needs at least 2 (a single "
               "value is passed as is)");
    return;
  }

  naarpc::Layout l;
  // Where a naarpc::LayoutProblem's field and index are in the file.
  std::string form_path = lo.Path(std::string(form));
  std::vector<const YamlNode*> items;          // list entries of the field below
  std::string list_field;                      // which field `items` belongs to
  std::vector<std::vector<const YamlNode*>> sub_items;  // subarray: per list
  auto where = [&](Object* o, const naarpc::LayoutProblem& prob) -> std::pair<Location, std::string> {
    if (prob.field == "elements") return {p.At("size"), p.Path("size")};
    if (form == "composite") {
      if (prob.index < items.size()) return {items[prob.index]->location, Index(form_path, prob.index)};
      return {lo.At("composite"), form_path};
    }
    const std::string path = o->Path(prob.field);
    if (form == "subarray") {
      const int k = prob.field == "shape" ? 0 : prob.field == "extents" ? 1 : 2;
      if (prob.index < sub_items[k].size())
        return {sub_items[k][prob.index]->location, Index(path, prob.index)};
    } else if (form == "interleaved" && prob.index < items.size()) {
      return {items[prob.index]->location, Index(path, prob.index)};
    }
    return {o->At(prob.field), path};
  };

  std::optional<Object> fo;
  if (form == "strided") {
    fo.emplace(*lo.Get("strided"), form_path, StridedRules(), sink);
    if (!fo->is_mapping()) return;
    const std::optional<int64_t> count = fo->Integer("count"), block = fo->Integer("block"),
                                 stride = fo->Integer("stride");
    const int64_t offset = fo->Integer("offset").value_or(0);
    if (!count || !block || !stride) return;
    l = naarpc::Layout::Strided(static_cast<uint64_t>(*count), static_cast<uint64_t>(*block),
                                static_cast<uint64_t>(*stride), static_cast<uint64_t>(offset));
  } else if (form == "subarray") {
    fo.emplace(*lo.Get("subarray"), form_path, SubArrayRules(), sink);
    if (!fo->is_mapping()) return;
    sub_items.resize(3);
    auto shape = ReadList(*fo, "shape", 1, sub_items[0], sink);
    auto extents = ReadList(*fo, "extents", 1, sub_items[1], sink);
    std::optional<std::vector<uint64_t>> offsets = std::vector<uint64_t>{};
    if (fo->Has("offsets")) offsets = ReadList(*fo, "offsets", 0, sub_items[2], sink);
    if (!shape || !extents || !offsets) return;
    l = naarpc::Layout::SubArray(*shape, *extents, *offsets);
  } else if (form == "composite") {
    const std::vector<YamlNode>* list = lo.List("composite");
    if (list == nullptr) return;
    std::vector<naarpc::LayoutPiece> pieces;
    bool ok = true;
    for (size_t i = 0; i < list->size(); ++i) {
      const YamlNode& item = (*list)[i];
      items.push_back(&item);
      const std::string path = Index(form_path, i);
      if (item.kind == YamlNode::Kind::kInvalid) {
        ok = false;
        continue;
      }
      if (item.kind != YamlNode::Kind::kSequence || item.items.size() != 2) {
        sink.Error(item.location, path,
                   "a piece is [offset, length] (elements), got " + DescribeNode(item) +
                       (item.kind == YamlNode::Kind::kSequence
                            ? " of " + std::to_string(item.items.size()) + " entries"
                            : ""));
        ok = false;
        continue;
      }
      const std::optional<int64_t> off = ReadListInteger(item.items[0], path + "[0]", 0, sink);
      const std::optional<int64_t> len = ReadListInteger(item.items[1], path + "[1]", 1, sink);
      if (!off || !len) {
        ok = false;
        continue;
      }
      pieces.push_back({static_cast<uint64_t>(*off), static_cast<uint64_t>(*len)});
    }
    if (!ok) return;
    l = naarpc::Layout::Composite(std::move(pieces));
  } else {
    fo.emplace(*lo.Get("interleaved"), form_path, InterleavedRules(), sink);
    if (!fo->is_mapping()) return;
    auto repeat = ReadList(*fo, "repeat", 1, items, sink);
    if (!repeat) return;
    uint64_t cycle = 0;
    for (uint64_t r : *repeat) cycle += r;
    // Without a valid size, check the arrays alone (one cycle).
    l = naarpc::Layout::Interleaved(*repeat, size.value_or(cycle));
  }

  if (std::optional<naarpc::LayoutProblem> prob = naarpc::CheckLayout(l)) {
    auto [loc, path] = where(fo ? &*fo : nullptr, *prob);
    sink.Error(loc, path, "layout of parameter '" + shown + "': " + prob->message);
    return;
  }
  const uint64_t elements = naarpc::LayoutElements(l);
  if (size && elements != *size) {
    sink.Error(at, p.Path("layout"),
               "the layout " + naarpc::LayoutToString(l) + " places " + std::to_string(elements) +
                   " elements; parameter '" + shown + "' has size " + std::to_string(*size) +
                   " (the NAA sees exactly the layout's elements, packed)");
    return;
  }
  if (!size) return;
  LayoutDecl decl;
  decl.layout = std::move(l);
  decl.runs = naarpc::LayoutRuns(decl.layout);
  for (size_t i = 0; i < naarpc::LayoutArrays(decl.layout); ++i)
    decl.reach.push_back(naarpc::LayoutExtent(decl.layout, i));
  decl.location = at;
  prm.layout = std::move(decl);
}

}  // namespace naarpc::idl::internal
