// Layouts of parameters (docs/idl.md "Layouts", seed 004): every form in the
// IR, and every invalid one rejected at its line and column.
#include <gtest/gtest.h>

#include <string>

#include "idl/load.h"
#include "tests/idl/test_util.h"

namespace naarpc::idl {
namespace {

using testing::Accepted;
using testing::ErrorCount;
using testing::HasError;
using testing::Idl;
using testing::Routine;

constexpr char kOut[] = "{name: out, type: f32, size: 4, direction: out}";
constexpr char kP[] = "services[0].routines[0].params[0]";

// The parameter `p` on line 8 (then an ordinary output on line 9).
std::string One(std::string_view p) {
  return Idl(Routine("R", "1", "          - " + std::string(p) + "\n          - " + kOut + "\n"));
}
// Column (1-based) of what follows `after` in line 8's parameter `p`.
int Col(std::string_view p, std::string_view after) {
  return static_cast<int>(12 + p.find(after) + after.size() + 1);
}

Result<IdlFile> LoadOne(std::string_view p) {
  std::vector<Diagnostic> diags;
  return testing::LoadForCpp(One(p), testing::kPath, &diags);
}

TEST(LoadLayouts, StridedColumnInTheIr) {
  const std::string p =
      "{name: col, type: f64, size: 4096, direction: in, "
      "layout: {strided: {count: 4096, block: 1, stride: 4096, offset: 7}}}";
  Result<IdlFile> f = LoadOne(p);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const Param& col = f->services[0].routines[0].params[0];
  ASSERT_TRUE(col.layout);
  EXPECT_EQ(col.layout->layout, naarpc::Layout::Strided(4096, 1, 4096, 7));
  EXPECT_EQ(col.layout->runs, 4096u);
  EXPECT_EQ(col.layout->reach, (std::vector<uint64_t>{7 + 4095 * 4096 + 1}));
  EXPECT_EQ(col.layout->location, (Location{8, Col(p, "layout: ")}));
  // The NAA sees the plain parameter: region, wire, kernel unchanged.
  EXPECT_EQ(col.region_bytes(), 4096u * 8);
  EXPECT_EQ(col.cpp.kernel_type, "std::span<const double>");
  EXPECT_EQ(col.cpp.client_type, "naarpc::StridedView<const double>");
  EXPECT_EQ(col.cpp.layout_expr, "naarpc::Layout::Strided(4096u, 1u, 4096u, 7u)");
}

TEST(LoadLayouts, EveryFormIsAccepted) {
  Result<IdlFile> f = LoadOne(
      "{name: s, type: f32, size: 6, direction: inout, "
      "layout: {subarray: {shape: [4, 6], extents: [2, 3], offsets: [1, 2]}}}");
  ASSERT_TRUE(f.ok());
  const Param& s = f->services[0].routines[0].params[0];
  EXPECT_EQ(s.cpp.client_type, "naarpc::StridedView<float>");
  EXPECT_EQ(s.layout->runs, 2u);
  EXPECT_EQ(s.cpp.layout_expr, "naarpc::Layout::SubArray({4u, 6u}, {2u, 3u}, {1u, 2u})");
  // 3-D halo face, offsets default to 0.
  f = LoadOne("{name: h, type: f64, size: 64, direction: in, "
              "layout: {subarray: {shape: [8, 8, 8], extents: [8, 8, 1]}}}");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->services[0].routines[0].params[0].layout->runs, 64u);
  f = LoadOne("{name: c, type: u8, size: 5, direction: in, layout: {composite: [[10, 2], [0, 3]]}}");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->services[0].routines[0].params[0].layout->layout,
            naarpc::Layout::Composite({{10, 2}, {0, 3}}));
  f = LoadOne("{name: v, type: f32, size: 9, direction: inout, layout: {interleaved: {repeat: [1, 1, 1]}}}");
  ASSERT_TRUE(f.ok());
  const Param& v = f->services[0].routines[0].params[0];
  EXPECT_EQ(v.layout->reach, (std::vector<uint64_t>{3, 3, 3}));
  EXPECT_EQ(v.cpp.layout_expr, "naarpc::Layout::Interleaved({1u, 1u, 1u}, 9u)");
}

TEST(LoadLayouts, StrideBelowBlock) {
  const std::string p =
      "{name: a, type: f64, size: 12, direction: in, layout: {strided: {count: 4, block: 3, stride: 2}}}";
  EXPECT_TRUE(HasError(One(p), 8, Col(p, "stride: "), std::string(kP) + ".layout.strided.stride",
                       "layout of parameter 'a': stride 2 < block 3: consecutive blocks would overlap"));
}

TEST(LoadLayouts, ExtentsBeyondTheShape) {
  const std::string p =
      "{name: b, type: f32, size: 10, direction: in, "
      "layout: {subarray: {shape: [4, 6], extents: [2, 5], offsets: [1, 2]}}}";
  EXPECT_TRUE(HasError(One(p), 8, Col(p, "extents: [2, "), std::string(kP) + ".layout.subarray.extents[1]",
                       "dimension 1: offset 2 + extent 5 is beyond the array's shape 6"));
  const std::string rank =
      "{name: b, type: f32, size: 4, direction: in, layout: {subarray: {shape: [4, 6], extents: [2, 2, 1]}}}";
  EXPECT_TRUE(HasError(One(rank), 8, Col(rank, "extents: "), std::string(kP) + ".layout.subarray.extents",
                       "extents has 3 dimensions, shape 2"));
  const std::string big =
      "{name: b, type: f32, size: 4, direction: in, "
      "layout: {subarray: {shape: [0x100000, 0x100000, 2], extents: [1, 1, 4]}}}";
  EXPECT_TRUE(HasError(One(big), 8, Col(big, "shape: "), std::string(kP) + ".layout.subarray.shape",
                       "elements; at most 1099511627776 (2^40)"));
}

// Extents over 2^40 are stated exactly (naarpc::CheckLayout's own arithmetic
// saturates at 2^63), and a bad entry by its value, not only its index.
TEST(LoadLayouts, ExtentsOverTheLimitAreStatedExactly) {
  const std::string repeat =
      "{name: a, type: u8, size: 4, direction: in, layout: {interleaved: {repeat: [2, 2199023255552]}}}";
  EXPECT_TRUE(HasError(One(repeat), 8, 92, std::string(kP) + ".layout.interleaved.repeat[1]",
                       "layout of parameter 'a': repeat[1] is 2199023255552; each must be "
                       "1..1099511627776 (2^40)"));
  const std::string shape =
      "{name: a, type: u8, size: 4, direction: in, "
      "layout: {subarray: {shape: [4294967296, 4294967296, 4294967296], extents: [1, 2, 2]}}}";
  EXPECT_TRUE(HasError(One(shape), 8, 84, std::string(kP) + ".layout.subarray.shape",
                       "the array [4294967296, 4294967296, 4294967296] has "
                       "79228162514264337593543950336 elements; at most 1099511627776 (2^40)"));
  const std::string huge =
      "{name: a, type: u8, size: 4, direction: in, layout: {subarray: {shape: "
      "[0x7fffffffffffffff, 0x7fffffffffffffff, 0x7fffffffffffffff], extents: [1, 2, 2]}}}";
  EXPECT_TRUE(HasError(One(huge), 8, 84, std::string(kP) + ".layout.subarray.shape",
                       "has at least 2^128 elements; at most 1099511627776 (2^40)"));
  const std::string strided =
      "{name: a, type: u8, size: 4, direction: in, "
      "layout: {strided: {count: 1099511627776, block: 1, stride: 1099511627776}}}";
  EXPECT_TRUE(HasError(One(strided), 8, 83, std::string(kP) + ".layout.strided.count",
                       "the layout reaches 1208925819613529663078401 elements from its base; "
                       "at most 1099511627776 (2^40)"));
  const std::string piece =
      "{name: a, type: u8, size: 4, direction: in, layout: {composite: [[0, 2], [5, 2199023255552]]}}";
  EXPECT_TRUE(HasError(One(piece), 8, 86, std::string(kP) + ".layout.composite[1]",
                       "piece 1 [5, 2199023255557) reaches beyond 1099511627776 (2^40) elements"));
  // Whole cycles, but more elements than a layout places.
  const std::string cycles =
      "{name: a, type: u8, size: 2199023255552, direction: in, layout: {interleaved: {repeat: [1, 1]}}}";
  EXPECT_TRUE(HasError(One(cycles), 8, 39, std::string(kP) + ".size",
                       "layout of parameter 'a': 2199023255552 elements; an interleaved layout "
                       "places at most 1099511627776 (2^40)"));
}

TEST(LoadLayouts, OverlappingPieces) {
  const std::string p =
      "{name: c, type: u8, size: 6, direction: in, layout: {composite: [[0, 3], [10, 2], [2, 1]]}}";
  EXPECT_TRUE(HasError(One(p), 8, Col(p, "[10, 2], "), std::string(kP) + ".layout.composite[2]",
                       "piece 2 [2, 3) overlaps piece 0 [0, 3)"));
  const std::string shape =
      "{name: c, type: u8, size: 4, direction: in, layout: {composite: [[0, 4, 1]]}}";
  EXPECT_TRUE(HasError(One(shape), 8, Col(shape, "composite: ["), std::string(kP) + ".layout.composite[0]",
                       "a piece is [offset, length] (elements), got a list of 3 entries"));
  const std::string zero = "{name: c, type: u8, size: 4, direction: in, layout: {composite: [[0, 0]]}}";
  EXPECT_TRUE(HasError(One(zero), 8, Col(zero, "[[0, "), std::string(kP) + ".layout.composite[0][1]",
                       "0 is below the minimum 1"));
}

TEST(LoadLayouts, ElementCountMustBeTheSize) {
  const std::string p =
      "{name: e, type: f32, size: 10, direction: in, layout: {strided: {count: 4, block: 1, stride: 2}}}";
  EXPECT_TRUE(HasError(One(p), 8, Col(p, "layout: "), std::string(kP) + ".layout",
                       "the layout strided{count 4, block 1, stride 2} places 4 elements; "
                       "parameter 'e' has size 10"));
  const std::string cyc =
      "{name: d, type: f32, size: 10, direction: in, layout: {interleaved: {repeat: [1, 1, 1]}}}";
  EXPECT_TRUE(HasError(One(cyc), 8, Col(cyc, "size: "), std::string(kP) + ".size",
                       "10 elements are not whole cycles of 3 (the sum of repeat [1, 1, 1])"));
}

TEST(LoadLayouts, WhereALayoutCannotBe) {
  const std::string var =
      "{name: f, type: f32, max: 10, direction: in, layout: {strided: {count: 10, block: 1, stride: 2}}}";
  EXPECT_TRUE(HasError(One(var), 8, Col(var, "layout: "), std::string(kP) + ".layout",
                       "parameter 'f' has 'max'; a layout needs a fixed 'size'"));
  const std::string one =
      "{name: f, type: f32, size: 1, direction: in, layout: {strided: {count: 1, block: 1, stride: 2}}}";
  EXPECT_TRUE(HasError(One(one), 8, Col(one, "layout: "), std::string(kP) + ".layout",
                       "a layout needs at least 2"));
  const std::string stream =
      "{name: f, type: f32, direction: in, stream: {chunk: 4, window: 1}, "
      "layout: {strided: {count: 4, block: 1, stride: 2}}}";
  EXPECT_TRUE(HasError(One(stream), 8, Col(stream, "layout: "), std::string(kP) + ".layout",
                       "stream parameter 'f' cannot have a layout"));
  const std::string two =
      "{name: g, type: f32, size: 4, direction: in, "
      "layout: {strided: {count: 4, block: 1, stride: 2}, composite: [[0, 4]]}}";
  EXPECT_TRUE(HasError(One(two), 8, Col(two, "layout: "), std::string(kP) + ".layout",
                       "give exactly one of strided, subarray, composite and interleaved"));
  const std::string none = "{name: g, type: f32, size: 4, direction: in, layout: {}}";
  EXPECT_TRUE(HasError(One(none), 8, Col(none, "layout: "), std::string(kP) + ".layout",
                       "give exactly one of"));
}

TEST(LoadLayouts, SchemaOfTheLayoutForms) {
  const std::string p =
      "{name: a, type: f64, size: 4, direction: in, layout: {strided: {count: 4, block: 1, strid: 2}}}";
  EXPECT_TRUE(HasError(One(p), 8, Col(p, "block: 1, "), std::string(kP) + ".layout.strided.strid",
                       "did you mean 'stride'?"));
  const std::string q =
      "{name: a, type: f64, size: 4, direction: in, layout: {interleaved: {repeat: [2, x]}}}";
  EXPECT_TRUE(HasError(One(q), 8, Col(q, "[2, "), std::string(kP) + ".layout.interleaved.repeat[1]",
                       "expected an integer"));
  const std::string r =
      "{name: a, type: f64, size: 4, direction: in, layout: {interleaved: {repeat: [4]}}}";
  EXPECT_TRUE(HasError(One(r), 8, Col(r, "repeat: "), std::string(kP) + ".layout.interleaved.repeat",
                       "needs at least 2 entries"));
}

TEST(LoadLayouts, EveryLayoutErrorOfARoutineIsReported) {
  const std::string text = Idl(Routine(
      "R", "1",
      "          - {name: a, type: f64, size: 12, direction: in, layout: {strided: {count: 4, block: 3, stride: 2}}}\n"
      "          - {name: c, type: u8, size: 6, direction: in, layout: {composite: [[0, 3], [2, 3]]}}\n"
      "          - {name: o, type: u8, size: 6, direction: out, layout: {interleaved: {repeat: [1, 4]}}}\n"));
  EXPECT_EQ(ErrorCount(text), 3);
  EXPECT_TRUE(Accepted(One("{name: ok, type: i16, size: 2, direction: in, layout: {composite: [[5, 1], [0, 1]]}}")));
}

}  // namespace
}  // namespace naarpc::idl
