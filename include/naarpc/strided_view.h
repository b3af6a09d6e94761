// Non-contiguous parameters (seed 004, docs/idl.md "Layouts"): a Layout says
// where a parameter's elements lie in the caller's memory, as a stencil
// applied at a base pointer; a StridedView is a base (or, interleaved, several
// bases) plus a Layout. The NAA always sees the parameter packed and
// contiguous, in "wire order": the order the layout lists its elements.
//
// Units are elements of the parameter's type, never bytes.
//  * strided:     `count` blocks of `block` elements, `stride` apart, from
//                 `offset` (a matrix column: count = rows, block = 1,
//                 stride = row length).
//  * subarray:    a 2-D or 3-D sub-block `extents` at `offsets` of an array
//                 of `shape` (outermost first, row-major; pitches follow from
//                 the shape: declare padding as part of it).
//  * composite:   pieces {offset, length}, in wire order, not overlapping.
//  * interleaved: 2..8 arrays, each contiguous; the wire takes `repeat[i]`
//                 elements of array i in turn (x y z x y z ...).
#ifndef NAARPC_STRIDED_VIEW_H_
#define NAARPC_STRIDED_VIEW_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "naarpc/status.h"

namespace naarpc {

inline constexpr size_t kMaxLayoutArrays = 8;    // interleaved arrays
inline constexpr size_t kMaxLayoutPieces = 4096;  // composite pieces
// Elements a layout may reach from its base (2^40: far beyond any region,
// small enough that offsets times element sizes never overflow).
inline constexpr uint64_t kMaxLayoutExtent = uint64_t{1} << 40;

struct LayoutPiece {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const LayoutPiece&) const = default;
};

struct Layout {
  enum class Kind : uint8_t { kContiguous, kStrided, kSubArray, kComposite, kInterleaved };
  Kind kind = Kind::kContiguous;
  uint64_t elements = 0;  // contiguous and interleaved: the wire element count
  // strided
  uint64_t count = 0, block = 0, stride = 0, offset = 0;
  // subarray (rank 2 or 3, outermost first)
  std::vector<uint64_t> shape, extents, offsets;
  // composite
  std::vector<LayoutPiece> pieces;
  // interleaved
  std::vector<uint64_t> repeat;

  static Layout Contiguous(uint64_t n);
  static Layout Strided(uint64_t count, uint64_t block, uint64_t stride, uint64_t offset = 0);
  static Layout SubArray(std::vector<uint64_t> shape, std::vector<uint64_t> extents,
                         std::vector<uint64_t> offsets = {});
  static Layout Composite(std::vector<LayoutPiece> pieces);
  static Layout Interleaved(std::vector<uint64_t> repeat, uint64_t elements);

  bool operator==(const Layout&) const = default;
};

std::string_view LayoutKindName(Layout::Kind kind);  // "strided", ...

// What is wrong with a layout: the field ("stride", "offsets", "pieces", ...)
// and, for a list's entry, its index (kWholeField: the field as a whole).
struct LayoutProblem {
  static constexpr size_t kWholeField = ~size_t{0};
  std::string field;
  size_t index = kWholeField;
  std::string message;
};
// Checks a layout on its own: stride < block, offsets + extents beyond the
// shape, overlapping or empty pieces, an element count that is not whole
// cycles, extents beyond kMaxLayoutExtent, too many pieces or arrays.
std::optional<LayoutProblem> CheckLayout(const Layout& layout);

// REQUIRES (all below): !CheckLayout(layout).
uint64_t LayoutElements(const Layout& layout);  // elements on the wire
size_t LayoutArrays(const Layout& layout);      // base pointers (1 unless interleaved)
// Elements of array `array` the layout reaches from its base (last + 1).
uint64_t LayoutExtent(const Layout& layout, size_t array);
// Maximal contiguous runs in wire order (a scatter-gather entry each).
uint64_t LayoutRuns(const Layout& layout);
// Calls fn(array, offset, length) (elements) for each run, in wire order.
void ForEachRun(const Layout& layout,
                const std::function<void(size_t array, uint64_t offset, uint64_t length)>& fn);
// "strided{count 4096, block 1, stride 4096}", as docs/idl.md writes it.
std::string LayoutToString(const Layout& layout);

// Packs (gathers) the layout's elements from `bases` into `out`, and
// unpacks (scatters) `in` into `bases`. `elem` is the element size in bytes.
// REQUIRES: bases.size() == LayoutArrays(layout), each base valid for
// LayoutExtent elements, out/in valid for LayoutElements elements.
void GatherBytes(const Layout& layout, size_t elem, std::span<const std::byte* const> bases,
                 std::byte* out);
void ScatterBytes(const Layout& layout, size_t elem, const std::byte* in,
                  std::span<std::byte* const> bases);

// The memory of a view: sizes (elements) of its arrays, for CheckView.
// kInvalidArgument "<what>: layout ...: expected <declared>, got <actual>"
// if the layouts differ, or naming the array that is shorter than the
// layout reaches; OK otherwise.
Status CheckViewLayout(const Layout& declared, const Layout& actual,
                       std::span<const uint64_t> array_sizes, std::string_view what);

// A parameter in the caller's memory: base array(s) plus a layout. Cheap to
// copy; it does not own the memory. StridedView<const T> for inputs,
// StridedView<T> for outputs.
template <typename T>
class StridedView {
 public:
  StridedView() = default;
  // One array: `memory` is what the layout may reach (its base is the
  // stencil's base).
  StridedView(std::span<T> memory, Layout layout) : layout_(std::move(layout)), n_(1) {
    arrays_[0] = memory;
  }
  // Interleaved: one span per array (at most kMaxLayoutArrays; more make
  // the view fail CheckView).
  StridedView(std::initializer_list<std::span<T>> arrays, Layout layout)
      : layout_(std::move(layout)) {
    for (std::span<T> a : arrays) {
      if (n_ < kMaxLayoutArrays) arrays_[n_] = a;
      ++n_;
    }
  }
  // StridedView<T> -> StridedView<const T>.
  template <typename U>
    requires(std::is_convertible_v<U (*)[], T (*)[]> && !std::is_same_v<U, T>)
  StridedView(const StridedView<U>& other) : layout_(other.layout()), n_(other.arrays()) {
    for (size_t i = 0; i < n_ && i < kMaxLayoutArrays; ++i) arrays_[i] = other.array(i);
  }

  const Layout& layout() const { return layout_; }
  size_t arrays() const { return n_; }
  std::span<T> array(size_t i) const { return i < kMaxLayoutArrays ? arrays_[i] : std::span<T>(); }

  // OK if the view matches `declared` and its memory holds what the layout
  // reaches; else kInvalidArgument naming `what` (routine and parameter).
  Status Check(const Layout& declared, std::string_view what) const {
    std::array<uint64_t, kMaxLayoutArrays + 1> sizes{};
    const size_t n = n_ <= kMaxLayoutArrays ? n_ : kMaxLayoutArrays + 1;
    for (size_t i = 0; i < n && i < kMaxLayoutArrays; ++i) sizes[i] = arrays_[i].size();
    return CheckViewLayout(declared, layout_, std::span<const uint64_t>(sizes.data(), n), what);
  }

  // REQUIRES: Check() was OK; out.size() == LayoutElements(layout()).
  void GatherTo(std::span<std::remove_const_t<T>> out) const {
    std::array<const std::byte*, kMaxLayoutArrays> b{};
    for (size_t i = 0; i < n_ && i < kMaxLayoutArrays; ++i)
      b[i] = reinterpret_cast<const std::byte*>(arrays_[i].data());
    GatherBytes(layout_, sizeof(T), std::span<const std::byte* const>(b.data(), n_),
                reinterpret_cast<std::byte*>(out.data()));
  }
  // REQUIRES: Check() was OK; in.size() == LayoutElements(layout()).
  void ScatterFrom(std::span<const std::remove_const_t<T>> in) const
    requires(!std::is_const_v<T>)
  {
    std::array<std::byte*, kMaxLayoutArrays> b{};
    for (size_t i = 0; i < n_ && i < kMaxLayoutArrays; ++i)
      b[i] = reinterpret_cast<std::byte*>(arrays_[i].data());
    ScatterBytes(layout_, sizeof(T), reinterpret_cast<const std::byte*>(in.data()),
                 std::span<std::byte* const>(b.data(), n_));
  }

 private:
  Layout layout_;
  std::array<std::span<T>, kMaxLayoutArrays> arrays_{};
  size_t n_ = 0;
};

}  // namespace naarpc

#endif  // NAARPC_STRIDED_VIEW_H_
