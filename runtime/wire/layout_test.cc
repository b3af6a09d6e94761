// Layout rules, runs, gather/scatter and view checks (naarpc/strided_view.h).
#include <gtest/gtest.h>

#include <numeric>
#include <tuple>
#include <vector>

#include "naarpc/strided_view.h"

namespace naarpc {
namespace {

using Piece3 = std::tuple<size_t, uint64_t, uint64_t>;

std::vector<Piece3> Runs(const Layout& l) {
  std::vector<Piece3> out;
  ForEachRun(l, [&](size_t a, uint64_t o, uint64_t n) { out.emplace_back(a, o, n); });
  return out;
}

TEST(Layout, StridedColumnOfAMatrix) {
  const Layout col = Layout::Strided(4, 1, 5, 2);  // column 2 of a 4 x 5 matrix
  ASSERT_FALSE(CheckLayout(col));
  EXPECT_EQ(LayoutElements(col), 4u);
  EXPECT_EQ(LayoutExtent(col, 0), 2u + 3 * 5 + 1);
  EXPECT_EQ(LayoutRuns(col), 4u);
  EXPECT_EQ(Runs(col), (std::vector<Piece3>{{0, 2, 1}, {0, 7, 1}, {0, 12, 1}, {0, 17, 1}}));
  EXPECT_EQ(LayoutToString(col), "strided{count 4, block 1, stride 5, offset 2}");
}

TEST(Layout, StrideEqualToBlockIsOneRun) {
  const Layout l = Layout::Strided(8, 4, 4);
  EXPECT_EQ(Runs(l), (std::vector<Piece3>{{0, 0, 32}}));
  EXPECT_EQ(LayoutRuns(l), 1u);
}

TEST(Layout, SubArray2DAnd3DNormaliseToRuns) {
  const Layout l2 = Layout::SubArray({4, 6}, {2, 3}, {1, 2});
  ASSERT_FALSE(CheckLayout(l2));
  EXPECT_EQ(LayoutElements(l2), 6u);
  EXPECT_EQ(Runs(l2), (std::vector<Piece3>{{0, 8, 3}, {0, 14, 3}}));
  // Full rows merge: one run.
  EXPECT_EQ(Runs(Layout::SubArray({4, 6}, {2, 6}, {1, 0})), (std::vector<Piece3>{{0, 6, 12}}));
  // 3-D halo face: plane z = 3 of a 4 x 4 x 4 block is one run of 16.
  EXPECT_EQ(Runs(Layout::SubArray({4, 4, 4}, {1, 4, 4}, {3, 0, 0})),
            (std::vector<Piece3>{{0, 48, 16}}));
  // Face x = 0: 16 runs of 1, stride 4.
  const Layout xface = Layout::SubArray({4, 4, 4}, {4, 4, 1}, {0, 0, 0});
  EXPECT_EQ(LayoutRuns(xface), 16u);
  std::vector<Piece3> r = Runs(xface);
  ASSERT_EQ(r.size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(r[i], Piece3(0, i * 4, 1));
  // Face y = 0: 4 runs of 4, 16 apart.
  EXPECT_EQ(Runs(Layout::SubArray({4, 4, 4}, {4, 1, 4}, {0, 0, 0})),
            (std::vector<Piece3>{{0, 0, 4}, {0, 16, 4}, {0, 32, 4}, {0, 48, 4}}));
}

TEST(Layout, CompositeMergesAdjacentPiecesInWireOrder) {
  const Layout l = Layout::Composite({{10, 2}, {12, 3}, {0, 4}});
  ASSERT_FALSE(CheckLayout(l));
  EXPECT_EQ(LayoutElements(l), 9u);
  EXPECT_EQ(LayoutExtent(l, 0), 15u);
  EXPECT_EQ(Runs(l), (std::vector<Piece3>{{0, 10, 5}, {0, 0, 4}}));
  EXPECT_EQ(LayoutRuns(l), 2u);
}

TEST(Layout, InterleavedTakesRepeatFromEachArrayInTurn) {
  const Layout l = Layout::Interleaved({2, 1}, 6);
  ASSERT_FALSE(CheckLayout(l));
  EXPECT_EQ(LayoutArrays(l), 2u);
  EXPECT_EQ(LayoutExtent(l, 0), 4u);
  EXPECT_EQ(LayoutExtent(l, 1), 2u);
  EXPECT_EQ(Runs(l), (std::vector<Piece3>{{0, 0, 2}, {1, 0, 1}, {0, 2, 2}, {1, 1, 1}}));
}

TEST(Layout, InvalidLayoutsNameTheField) {
  auto field = [](const Layout& l) {
    auto p = CheckLayout(l);
    if (!p) return std::string("ok");
    return p->field +
           (p->index == LayoutProblem::kWholeField ? "" : "[" + std::to_string(p->index) + "]") +
           ": " + p->message;
  };
  EXPECT_EQ(field(Layout::Strided(4, 3, 2)),
            "stride: stride 2 < block 3: consecutive blocks would overlap");
  EXPECT_EQ(field(Layout::Strided(1, 3, 2)), "ok");  // one block: no stride
  EXPECT_EQ(field(Layout::Strided(0, 1, 1)), "count: count must be at least 1");
  EXPECT_EQ(field(Layout::Strided(uint64_t{1} << 30, 1, uint64_t{1} << 20)).substr(0, 7),
            "count: ");
  EXPECT_EQ(field(Layout::SubArray({4, 6}, {2, 5}, {0, 2})),
            "extents[1]: dimension 1: offset 2 + extent 5 is beyond the array's shape 6");
  EXPECT_EQ(field(Layout::SubArray({4}, {2}, {0})).substr(0, 6), "shape:");
  EXPECT_EQ(field(Layout::SubArray({4, 4}, {2, 2, 2}, {})).substr(0, 8), "extents:");
  EXPECT_EQ(field(Layout::Composite({{0, 4}, {8, 2}, {3, 2}})),
            "pieces[2]: piece 2 [3, 5) overlaps piece 0 [0, 4)");
  EXPECT_EQ(field(Layout::Composite({{0, 0}})), "pieces[0]: piece 0 has length 0");
  EXPECT_EQ(field(Layout::Composite({})).substr(0, 7), "pieces:");
  EXPECT_EQ(field(Layout::Interleaved({1, 2}, 7)),
            "elements: 7 elements are not whole cycles of 3 (the sum of repeat [1, 2])");
  EXPECT_EQ(field(Layout::Interleaved({1}, 7)).substr(0, 7), "repeat:");
}

// Sizes beyond the limits are stated as they are (no 64-bit saturation),
// and an entry's message gives its value.
TEST(Layout, OversizedLayoutsStateTheirTrueSize) {
  auto message = [](const Layout& l) {
    auto p = CheckLayout(l);
    return p ? p->message : std::string("ok");
  };
  constexpr uint64_t k2to40 = uint64_t{1} << 40;
  EXPECT_EQ(message(Layout::Strided(k2to40, 1, k2to40)),
            "the layout reaches 1208925819613529663078401 elements from its base; at most "
            "1099511627776 (2^40)");  // (2^40 - 1) * 2^40 + 1
  EXPECT_EQ(message(Layout::SubArray({uint64_t{1} << 32, uint64_t{1} << 32, uint64_t{1} << 32},
                                     {1, 2, 2}, {})),
            "the array [4294967296, 4294967296, 4294967296] has 79228162514264337593543950336 "
            "elements; at most 1099511627776 (2^40)");  // 2^96
  const uint64_t huge = ~uint64_t{0};
  EXPECT_EQ(message(Layout::SubArray({huge, huge, huge}, {1, 1, 1}, {})),
            "the array [" + std::to_string(huge) + ", " + std::to_string(huge) + ", " +
                std::to_string(huge) + "] has at least 2^128 elements; at most 1099511627776 (2^40)");
  EXPECT_EQ(message(Layout::Composite({{huge, 2}})),
            "piece 0 [18446744073709551615, 18446744073709551617) reaches beyond 1099511627776 "
            "(2^40) elements");
  EXPECT_EQ(message(Layout::Interleaved({2, 2 * k2to40}, 4)),
            "repeat[1] is 2199023255552; each must be 1..1099511627776 (2^40)");
  EXPECT_EQ(message(Layout::Interleaved({1, 1}, 2 * k2to40)),
            "2199023255552 elements; an interleaved layout places at most 1099511627776 (2^40)");
}

TEST(Layout, GatherThenScatterRoundTrips) {
  std::vector<double> m(4 * 5);
  std::iota(m.begin(), m.end(), 0.0);
  const Layout col = Layout::Strided(4, 1, 5, 2);
  StridedView<const double> in(std::span<const double>(m), col);
  ASSERT_TRUE(in.Check(col, "T.R: parameter 'c'").ok());
  std::vector<double> packed(4);
  in.GatherTo(packed);
  EXPECT_EQ(packed, (std::vector<double>{2, 7, 12, 17}));
  std::vector<double> back(20, -1);
  StridedView<double> out(std::span<double>(back), col);
  out.ScatterFrom(packed);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(back[i], i % 5 == 2 ? double(i) : -1.0) << i;
}

TEST(Layout, InterleavedViewGathersSeveralArrays) {
  std::vector<float> x{1, 2, 3}, y{10, 20, 30}, z{100, 200, 300};
  const Layout xyz = Layout::Interleaved({1, 1, 1}, 9);
  StridedView<float> v({std::span<float>(x), std::span<float>(y), std::span<float>(z)}, xyz);
  ASSERT_TRUE(v.Check(xyz, "T.R: parameter 'v'").ok());
  std::vector<float> packed(9);
  StridedView<const float>(v).GatherTo(packed);
  EXPECT_EQ(packed, (std::vector<float>{1, 10, 100, 2, 20, 200, 3, 30, 300}));
}

TEST(Layout, ViewThatDoesNotMatchItsDeclarationIsATypedError) {
  std::vector<double> m(20);
  const Layout declared = Layout::Strided(4, 1, 5);
  StridedView<double> wrong(std::span<double>(m), Layout::Strided(4, 1, 4));
  Status st = wrong.Check(declared, "M.Col: parameter 'c'");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "M.Col: parameter 'c': the view's layout does not match the declaration: expected "
            "strided{count 4, block 1, stride 5}, got strided{count 4, block 1, stride 4}; "
            "nothing was sent");
  StridedView<double> small(std::span<double>(m).first(15), declared);
  st = small.Check(declared, "M.Col: parameter 'c'");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "M.Col: parameter 'c': the view's memory holds 15 elements; strided{count 4, block 1, "
            "stride 5} reaches 16; nothing was sent");
  std::vector<float> x(3), y(3);
  const Layout xy = Layout::Interleaved({1, 1}, 6);
  StridedView<float> one(std::span<float>(x), xy);
  EXPECT_NE(one.Check(xy, "p").message().find("the view has 1 arrays"), std::string::npos);
}

}  // namespace
}  // namespace naarpc
