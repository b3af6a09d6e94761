// Layouts of non-contiguous parameters (include/naarpc/strided_view.h): the
// one implementation of their rules, used by the IDL front-end (validation),
// generated stubs (views, gather/scatter), the CLI and the transports'
// scatter-gather lists.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "naarpc/strided_view.h"
#include "runtime/u128_text.h"

namespace naarpc {
namespace {

// Strided and subarray layouts as one form: `block` contiguous elements,
// repeated over `dims` ({count, stride}, outermost first), from `offset`.
// Inner dimensions whose stride is the block's length are merged into it.
struct Normal {
  uint64_t offset = 0;
  uint64_t block = 0;
  std::vector<std::pair<uint64_t, uint64_t>> dims;
};

Normal Normalize(const Layout& l) {
  Normal n;
  if (l.kind == Layout::Kind::kStrided) {
    n.offset = l.offset;
    n.block = l.block;
    if (l.count > 1) n.dims.push_back({l.count, l.stride});
  } else {  // kSubArray
    const size_t r = l.shape.size();
    std::vector<uint64_t> pitch(r, 1);
    for (size_t i = r - 1; i-- > 0;) pitch[i] = pitch[i + 1] * l.shape[i + 1];
    for (size_t i = 0; i < r; ++i) n.offset += (l.offsets.empty() ? 0 : l.offsets[i]) * pitch[i];
    n.block = l.extents[r - 1];
    for (size_t i = 0; i + 1 < r; ++i)
      if (l.extents[i] > 1) n.dims.push_back({l.extents[i], pitch[i]});
  }
  while (!n.dims.empty() && n.dims.back().second == n.block) {
    n.block *= n.dims.back().first;
    n.dims.pop_back();
  }
  return n;
}

uint64_t RepeatSum(const Layout& l) {
  return std::accumulate(l.repeat.begin(), l.repeat.end(), uint64_t{0});
}

// Extent arithmetic is exact: 64-bit fields, 128-bit results (a subarray's
// three dimensions may need more: Product says so).
using U128 = unsigned __int128;
using internal::U128Text;

// The product of `dims`, or nullopt at 2^128 or more.
std::optional<U128> Product(const std::vector<uint64_t>& dims) {
  U128 total = 1;
  for (uint64_t d : dims) {
    if (d != 0 && total > ~U128{0} / d) return std::nullopt;
    total *= d;
  }
  return total;
}

std::string List(const std::vector<uint64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

constexpr size_t W = LayoutProblem::kWholeField;

std::optional<LayoutProblem> Problem(std::string field, size_t index, std::string message) {
  return LayoutProblem{std::move(field), index, std::move(message)};
}

}  // namespace

Layout Layout::Contiguous(uint64_t n) {
  Layout l;
  l.kind = Kind::kContiguous;
  l.elements = n;
  return l;
}
Layout Layout::Strided(uint64_t count, uint64_t block, uint64_t stride, uint64_t offset) {
  Layout l;
  l.kind = Kind::kStrided;
  l.count = count, l.block = block, l.stride = stride, l.offset = offset;
  return l;
}
Layout Layout::SubArray(std::vector<uint64_t> shape, std::vector<uint64_t> extents,
                        std::vector<uint64_t> offsets) {
  Layout l;
  l.kind = Kind::kSubArray;
  if (offsets.empty()) offsets.assign(shape.size(), 0);
  l.shape = std::move(shape), l.extents = std::move(extents), l.offsets = std::move(offsets);
  return l;
}
Layout Layout::Composite(std::vector<LayoutPiece> pieces) {
  Layout l;
  l.kind = Kind::kComposite;
  l.pieces = std::move(pieces);
  return l;
}
Layout Layout::Interleaved(std::vector<uint64_t> repeat, uint64_t elements) {
  Layout l;
  l.kind = Kind::kInterleaved;
  l.repeat = std::move(repeat);
  l.elements = elements;
  return l;
}

std::string_view LayoutKindName(Layout::Kind kind) {
  switch (kind) {
    case Layout::Kind::kContiguous: return "contiguous";
    case Layout::Kind::kStrided: return "strided";
    case Layout::Kind::kSubArray: return "subarray";
    case Layout::Kind::kComposite: return "composite";
    case Layout::Kind::kInterleaved: return "interleaved";
  }
  return "?";
}

std::optional<LayoutProblem> CheckLayout(const Layout& l) {
  const std::string limit = std::to_string(kMaxLayoutExtent) + " (2^40)";
  switch (l.kind) {
    case Layout::Kind::kContiguous:
      if (l.elements < 1 || l.elements > kMaxLayoutExtent)
        return Problem("elements", W, "a contiguous layout needs 1.." + limit + " elements");
      return std::nullopt;
    case Layout::Kind::kStrided: {
      if (l.count < 1) return Problem("count", W, "count must be at least 1");
      if (l.block < 1) return Problem("block", W, "block must be at least 1 element");
      if (l.count > 1 && l.stride < l.block)
        return Problem("stride", W,
                       "stride " + std::to_string(l.stride) + " < block " +
                           std::to_string(l.block) + ": consecutive blocks would overlap");
      const U128 reach = U128{l.offset} + U128{l.count - 1} * l.stride + l.block;
      if (reach > kMaxLayoutExtent)
        return Problem("count", W,
                       "the layout reaches " + U128Text(reach) +
                           " elements from its base; at most " + limit);
      return std::nullopt;
    }
    case Layout::Kind::kSubArray: {
      const size_t r = l.shape.size();
      if (r < 2 || r > 3)
        return Problem("shape", W,
                       "a subarray has 2 or 3 dimensions, got " + std::to_string(r) +
                           " (one dimension: use strided or composite)");
      if (l.extents.size() != r)
        return Problem("extents", W,
                       "extents has " + std::to_string(l.extents.size()) +
                           " dimensions, shape " + std::to_string(r));
      if (!l.offsets.empty() && l.offsets.size() != r)
        return Problem("offsets", W,
                       "offsets has " + std::to_string(l.offsets.size()) +
                           " dimensions, shape " + std::to_string(r));
      for (size_t i = 0; i < r; ++i) {
        if (l.shape[i] < 1) return Problem("shape", i, "dimension " + std::to_string(i) + " is 0");
        if (l.extents[i] < 1)
          return Problem("extents", i, "extent " + std::to_string(i) + " is 0");
      }
      const std::optional<U128> total = Product(l.shape);
      if (!total || *total > kMaxLayoutExtent)
        return Problem("shape", W,
                       "the array " + List(l.shape) + " has " +
                           (total ? U128Text(*total) : std::string("at least 2^128")) +
                           " elements; at most " + limit);
      for (size_t i = 0; i < r; ++i) {
        const uint64_t o = l.offsets.empty() ? 0 : l.offsets[i];
        if (U128{o} + l.extents[i] > l.shape[i])
          return Problem("extents", i,
                         "dimension " + std::to_string(i) + ": offset " + std::to_string(o) +
                             " + extent " + std::to_string(l.extents[i]) +
                             " is beyond the array's shape " + std::to_string(l.shape[i]));
      }
      return std::nullopt;
    }
    case Layout::Kind::kComposite: {
      if (l.pieces.empty() || l.pieces.size() > kMaxLayoutPieces)
        return Problem("pieces", W,
                       "a composite layout has 1.." + std::to_string(kMaxLayoutPieces) +
                           " pieces, got " + std::to_string(l.pieces.size()));
      for (size_t i = 0; i < l.pieces.size(); ++i) {
        if (l.pieces[i].length < 1)
          return Problem("pieces", i, "piece " + std::to_string(i) + " has length 0");
        const U128 end = U128{l.pieces[i].offset} + l.pieces[i].length;
        if (end > kMaxLayoutExtent)
          return Problem("pieces", i,
                         "piece " + std::to_string(i) + " [" +
                             std::to_string(l.pieces[i].offset) + ", " + U128Text(end) +
                             ") reaches beyond " + limit + " elements");
      }
      std::vector<size_t> order(l.pieces.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return l.pieces[a].offset < l.pieces[b].offset ||
               (l.pieces[a].offset == l.pieces[b].offset && a < b);
      });
      // Report the later of the first overlapping pair (in list order).
      std::optional<std::pair<size_t, size_t>> worst;
      for (size_t k = 1; k < order.size(); ++k) {
        const LayoutPiece& a = l.pieces[order[k - 1]];
        const LayoutPiece& b = l.pieces[order[k]];
        if (a.offset + a.length > b.offset) {
          std::pair<size_t, size_t> p{std::max(order[k - 1], order[k]),
                                      std::min(order[k - 1], order[k])};
          if (!worst || p < *worst) worst = p;
        }
      }
      if (worst) {
        const auto& [late, early] = *worst;
        auto range = [&](size_t i) {
          return "[" + std::to_string(l.pieces[i].offset) + ", " +
                 std::to_string(l.pieces[i].offset + l.pieces[i].length) + ")";
        };
        return Problem("pieces", late,
                       "piece " + std::to_string(late) + " " + range(late) + " overlaps piece " +
                           std::to_string(early) + " " + range(early));
      }
      return std::nullopt;
    }
    case Layout::Kind::kInterleaved: {
      if (l.repeat.size() < 2 || l.repeat.size() > kMaxLayoutArrays)
        return Problem("repeat", W,
                       "interleaved takes 2.." + std::to_string(kMaxLayoutArrays) +
                           " arrays, got " + std::to_string(l.repeat.size()));
      for (size_t i = 0; i < l.repeat.size(); ++i) {
        if (l.repeat[i] < 1 || l.repeat[i] > kMaxLayoutExtent)
          return Problem("repeat", i,
                         "repeat[" + std::to_string(i) + "] is " + std::to_string(l.repeat[i]) +
                             "; each must be 1.." + limit);
      }
      const uint64_t cycle = RepeatSum(l);
      if (l.elements % cycle == 0 && l.elements > kMaxLayoutExtent)
        return Problem("elements", W,
                       std::to_string(l.elements) +
                           " elements; an interleaved layout places at most " + limit);
      if (l.elements < 1 || l.elements % cycle != 0)
        return Problem("elements", W,
                       std::to_string(l.elements) + " elements are not whole cycles of " +
                           std::to_string(cycle) + " (the sum of repeat " + List(l.repeat) + ")");
      return std::nullopt;
    }
  }
  return Problem("kind", W, "unknown layout kind");
}

uint64_t LayoutElements(const Layout& l) {
  switch (l.kind) {
    case Layout::Kind::kContiguous:
    case Layout::Kind::kInterleaved:
      return l.elements;
    case Layout::Kind::kStrided:
      return l.count * l.block;
    case Layout::Kind::kSubArray: {
      uint64_t n = 1;
      for (uint64_t e : l.extents) n *= e;
      return n;
    }
    case Layout::Kind::kComposite: {
      uint64_t n = 0;
      for (const LayoutPiece& p : l.pieces) n += p.length;
      return n;
    }
  }
  return 0;
}

size_t LayoutArrays(const Layout& l) {
  return l.kind == Layout::Kind::kInterleaved ? l.repeat.size() : 1;
}

uint64_t LayoutExtent(const Layout& l, size_t array) {
  switch (l.kind) {
    case Layout::Kind::kContiguous:
      return l.elements;
    case Layout::Kind::kStrided:
    case Layout::Kind::kSubArray: {
      const Normal n = Normalize(l);
      uint64_t reach = n.offset + n.block;
      for (const auto& [count, stride] : n.dims) reach += (count - 1) * stride;
      return reach;
    }
    case Layout::Kind::kComposite: {
      uint64_t reach = 0;
      for (const LayoutPiece& p : l.pieces) reach = std::max(reach, p.offset + p.length);
      return reach;
    }
    case Layout::Kind::kInterleaved:
      return array < l.repeat.size() ? l.elements / RepeatSum(l) * l.repeat[array] : 0;
  }
  return 0;
}

uint64_t LayoutRuns(const Layout& l) {
  switch (l.kind) {
    case Layout::Kind::kContiguous:
      return 1;
    case Layout::Kind::kStrided:
    case Layout::Kind::kSubArray: {
      uint64_t runs = 1;
      for (const auto& d : Normalize(l).dims) runs *= d.first;
      return runs;
    }
    case Layout::Kind::kComposite: {
      uint64_t runs = 0;
      ForEachRun(l, [&](size_t, uint64_t, uint64_t) { ++runs; });
      return runs;
    }
    case Layout::Kind::kInterleaved:
      return l.elements / RepeatSum(l) * l.repeat.size();
  }
  return 0;
}

void ForEachRun(const Layout& l,
                const std::function<void(size_t array, uint64_t offset, uint64_t length)>& fn) {
  switch (l.kind) {
    case Layout::Kind::kContiguous:
      fn(0, 0, l.elements);
      return;
    case Layout::Kind::kStrided:
    case Layout::Kind::kSubArray: {
      const Normal n = Normalize(l);
      // Odometer over the outer dimensions (at most 2 after normalising).
      std::vector<uint64_t> at(n.dims.size(), 0);
      for (;;) {
        uint64_t off = n.offset;
        for (size_t i = 0; i < at.size(); ++i) off += at[i] * n.dims[i].second;
        fn(0, off, n.block);
        size_t d = at.size();
        while (d > 0) {
          --d;
          if (++at[d] < n.dims[d].first) break;
          at[d] = 0;
          if (d == 0) return;
        }
        if (at.empty()) return;
      }
    }
    case Layout::Kind::kComposite: {
      uint64_t start = 0, len = 0;
      for (const LayoutPiece& p : l.pieces) {
        if (len != 0 && start + len == p.offset) {
          len += p.length;
          continue;
        }
        if (len != 0) fn(0, start, len);
        start = p.offset, len = p.length;
      }
      if (len != 0) fn(0, start, len);
      return;
    }
    case Layout::Kind::kInterleaved: {
      const uint64_t cycles = l.elements / RepeatSum(l);
      for (uint64_t c = 0; c < cycles; ++c)
        for (size_t i = 0; i < l.repeat.size(); ++i) fn(i, c * l.repeat[i], l.repeat[i]);
      return;
    }
  }
}

std::string LayoutToString(const Layout& l) {
  switch (l.kind) {
    case Layout::Kind::kContiguous:
      return "contiguous{" + std::to_string(l.elements) + "}";
    case Layout::Kind::kStrided: {
      std::string s = "strided{count " + std::to_string(l.count) + ", block " +
                      std::to_string(l.block) + ", stride " + std::to_string(l.stride);
      if (l.offset != 0) s += ", offset " + std::to_string(l.offset);
      return s + "}";
    }
    case Layout::Kind::kSubArray:
      return "subarray{shape " + List(l.shape) + ", extents " + List(l.extents) + ", offsets " +
             List(l.offsets) + "}";
    case Layout::Kind::kComposite: {
      std::string s = "composite{";
      for (size_t i = 0; i < l.pieces.size(); ++i) {
        if (i == 8) {
          s += ", ... " + std::to_string(l.pieces.size()) + " pieces";
          break;
        }
        s += (i ? ", [" : "[") + std::to_string(l.pieces[i].offset) + ", " +
             std::to_string(l.pieces[i].length) + "]";
      }
      return s + "}";
    }
    case Layout::Kind::kInterleaved:
      return "interleaved{repeat " + List(l.repeat) + ", elements " + std::to_string(l.elements) +
             "}";
  }
  return "?";
}

void GatherBytes(const Layout& l, size_t elem, std::span<const std::byte* const> bases,
                 std::byte* out) {
  ForEachRun(l, [&](size_t a, uint64_t off, uint64_t len) {
    std::memcpy(out, bases[a] + off * elem, len * elem);
    out += len * elem;
  });
}

void ScatterBytes(const Layout& l, size_t elem, const std::byte* in,
                  std::span<std::byte* const> bases) {
  ForEachRun(l, [&](size_t a, uint64_t off, uint64_t len) {
    std::memcpy(bases[a] + off * elem, in, len * elem);
    in += len * elem;
  });
}

Status CheckViewLayout(const Layout& declared, const Layout& actual,
                       std::span<const uint64_t> array_sizes, std::string_view what) {
  const std::string w(what);
  if (!(declared == actual)) {
    return InvalidArgumentError(w + ": the view's layout does not match the declaration: expected " +
                                LayoutToString(declared) + ", got " + LayoutToString(actual) +
                                "; nothing was sent");
  }
  const size_t arrays = LayoutArrays(declared);
  if (array_sizes.size() != arrays) {
    return InvalidArgumentError(w + ": the view has " + std::to_string(array_sizes.size()) +
                                " arrays; " + LayoutToString(declared) + " takes " +
                                std::to_string(arrays) + "; nothing was sent");
  }
  for (size_t i = 0; i < arrays; ++i) {
    const uint64_t need = LayoutExtent(declared, i);
    if (array_sizes[i] < need) {
      return InvalidArgumentError(
          w + ": the view's " + (arrays > 1 ? "array " + std::to_string(i) : std::string("memory")) +
          " holds " + std::to_string(array_sizes[i]) + " elements; " + LayoutToString(declared) +
          " reaches " + std::to_string(need) + "; nothing was sent");
    }
  }
  return Status::Ok();
}

}  // namespace naarpc
