// VarSpan, the kernel's view of a variable-length out/inout parameter, used
// as kernels use it: operator[], iteration and size(), before and after
// resize(), for the element types the generator passes (VarSpan<T>&) and
// for const views.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "naarpc/impl/codegen_support.h"

namespace {

using naarpc::codegen::VarSpan;

static_assert(std::ranges::contiguous_range<VarSpan<float>>);
static_assert(std::ranges::sized_range<VarSpan<float>>);
static_assert(std::ranges::contiguous_range<VarSpan<const float>>);
// Shallow, as std::span: a const VarSpan still writes its elements.
static_assert(std::is_same_v<decltype(std::declval<const VarSpan<float>&>()[0]), float&>);
static_assert(std::is_same_v<decltype(std::declval<VarSpan<const float>&>()[0]), const float&>);

// A kernel on an inout parameter, written the natural way.
void Axpy(float alpha, std::span<const float> x, VarSpan<float>& y) {
  for (size_t i = 0; i < y.size(); ++i) y[i] = alpha * x[i] + y[i];
}

TEST(VarSpan, InoutKernelIndexesTheValidElements) {
  std::vector<float> region = {1, 2, 3, 99, 99};  // capacity 5, 3 valid
  VarSpan<float> y(region, 3);
  const std::vector<float> x = {10, 20, 30, 40, 50};
  Axpy(2, x, y);
  EXPECT_EQ(region, (std::vector<float>{21, 42, 63, 99, 99}));  // beyond size() untouched
  for (float& v : y) v = -v;
  EXPECT_EQ(region, (std::vector<float>{-21, -42, -63, 99, 99}));
}

TEST(VarSpan, IterationCoversExactlyTheValidElements) {
  std::vector<int> region = {1, 2, 3, 4, 5, 6};
  VarSpan<int> v(region, 4);
  EXPECT_FALSE(v.empty());
  EXPECT_EQ(std::distance(v.begin(), v.end()), 4);
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0), 10);
  EXPECT_TRUE(std::ranges::equal(v, v.data()));
  EXPECT_EQ(&v[0], v.data().data());
  EXPECT_EQ(&v[3], &region[3]);
}

TEST(VarSpan, OutKernelAfterResize) {
  std::vector<uint32_t> region(8, 0xdead);
  VarSpan<uint32_t> out(region, 0);  // an out parameter starts empty
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(out.begin(), out.end());
  ASSERT_TRUE(out.resize(5));
  EXPECT_FALSE(out.empty());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint32_t>(i * 10);
  EXPECT_EQ(std::vector<uint32_t>(out.begin(), out.end()),
            (std::vector<uint32_t>{0, 10, 20, 30, 40}));
  EXPECT_EQ(region[5], 0xdeadu);

  ASSERT_TRUE(out.resize(2));  // shrinking: iteration stops at the new size
  std::vector<uint32_t> seen;
  for (uint32_t v : out) seen.push_back(v);
  EXPECT_EQ(seen, (std::vector<uint32_t>{0, 10}));

  EXPECT_FALSE(out.resize(9));  // beyond the capacity: unchanged
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(std::distance(out.begin(), out.end()), 2);
  EXPECT_EQ(out[1], 10u);
  EXPECT_EQ(out.overflow_request(), 9u);

  ASSERT_TRUE(out.resize(out.max_size()));  // growing exposes what the region holds
  EXPECT_EQ(out[7], 0xdeadu);
  EXPECT_EQ(std::distance(out.begin(), out.end()), 8);
}

TEST(VarSpan, ConstElementsAndConstViews) {
  const std::vector<double> region = {1.5, 2.5, 3.5};
  VarSpan<const double> v(region, 2);
  double sum = 0;
  for (const double& d : v) sum += d;
  EXPECT_EQ(sum, 4.0);
  EXPECT_EQ(v[1], 2.5);

  // A read-only helper taking const VarSpan<T>& (a kernel's parameter).
  auto largest = [](const VarSpan<int64_t>& s) {
    return s.empty() ? int64_t{0} : *std::max_element(s.begin(), s.end());
  };
  std::vector<int64_t> sums = {1, 9, 6, 100};
  VarSpan<int64_t> s(sums, 3);
  EXPECT_EQ(largest(s), 9);
  EXPECT_EQ(static_cast<const VarSpan<int64_t>&>(s)[2], 6);
  ASSERT_TRUE(s.resize(0));
  EXPECT_EQ(largest(s), 0);
}

}  // namespace
