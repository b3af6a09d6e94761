// Generated stubs with parameter layouts (docs/idl.md "Layouts", seed 004)
// against a software NAA, on both transports (the verbs cases run in the
// Soft-RoCE guest) and in both dialects: matrix column and sub-block round
// trips, interleaved arrays, layouts with more runs than a device's max_sge,
// and typed errors for views that do not match their declaration. The NAA
// sees every parameter packed and contiguous.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "naarpc/naa_server.h"
#include "naarpc/strided_view.h"
#include "tests/e2e/layouts.naa.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

namespace lay = ::naarpc::testing::layouts;
using namespace std::chrono_literals;

// Hang guard only (never reached): tests assert behaviour, not timing.
constexpr auto kHangGuard = 60s;

class Kernels final : public lay::LayoutsService {
  lay::LayoutsError ScaleColumn(const NaaCall&, std::span<double> col) override {
    for (double& v : col) v *= 2;
    return lay::LayoutsError::kOk;
  }
  lay::LayoutsError SumColumn(const NaaCall&, std::span<const double> col, double& sum) override {
    sum = std::accumulate(col.begin(), col.end(), 0.0);
    return lay::LayoutsError::kOk;
  }
  lay::LayoutsError BumpHalo(const NaaCall&, std::span<float> face) override {
    for (float& v : face) v += 1;
    return lay::LayoutsError::kOk;
  }
  lay::LayoutsError Mesh(const NaaCall&, std::span<const float> xyz, std::span<float> sums) override {
    // Packed: x0 y0 z0 x1 y1 z1 ...
    for (size_t i = 0; i < sums.size(); ++i) sums[i] = xyz[3 * i] + xyz[3 * i + 1] + xyz[3 * i + 2];
    return lay::LayoutsError::kOk;
  }
};

using Param = std::tuple<std::string, Dialect>;

class LayoutStubTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    tt_ = testing::MakeTestTransport(std::get<0>(GetParam()));
    if (!tt_.transport) GTEST_SKIP() << tt_.unavailable;
    auto server = NaaServer::Start(*tt_.transport, tt_.address, 0, kernels_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    codegen::StubOptions options;
    options.session.dialect = std::get<1>(GetParam());
    client_ = std::make_unique<lay::LayoutsClient>(*tt_.transport, tt_.address, server_->port(),
                                                   options);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  static Deadline Guard() { return Deadline::After(kHangGuard); }

  testing::TestTransport tt_;
  Kernels kernels_;
  std::unique_ptr<NaaServer> server_;
  std::unique_ptr<lay::LayoutsClient> client_;
};

TEST_P(LayoutStubTest, MatrixColumnRoundTripInPlace) {
  std::vector<double> m(64 * 64);
  std::iota(m.begin(), m.end(), 0.0);
  const Layout col = Layout::Strided(64, 1, 64, 5);
  ASSERT_TRUE(client_->ScaleColumn(StridedView<double>(std::span<double>(m), col), Guard()).ok());
  for (size_t i = 0; i < m.size(); ++i) {
    const double want = i % 64 == 5 ? 2.0 * double(i) : double(i);
    ASSERT_EQ(m[i], want) << "element " << i;
  }
}

TEST_P(LayoutStubTest, ColumnWithMoreRunsThanAnyDevicesMaxSge) {
  // 4096 runs of one element: far beyond a device's max_sge (32 on rxe).
  std::vector<double> m(4096 * 16, -1.0);
  double want = 0;
  for (size_t r = 0; r < 4096; ++r) {
    m[r * 16 + 3] = double(r);
    want += double(r);
  }
  double sum = 0;
  const Status st = client_->SumColumn(
      StridedView<const double>(std::span<const double>(m), Layout::Strided(4096, 1, 16, 3)), &sum,
      Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(sum, want);
}

TEST_P(LayoutStubTest, HaloFaceOfA3DBlock) {
  std::vector<float> block(8 * 8 * 8, 0.5f);
  const Layout face = Layout::SubArray({8, 8, 8}, {8, 8, 1}, {0, 0, 7});
  ASSERT_TRUE(client_->BumpHalo(StridedView<float>(std::span<float>(block), face), Guard()).ok());
  for (size_t i = 0; i < block.size(); ++i) ASSERT_EQ(block[i], i % 8 == 7 ? 1.5f : 0.5f) << i;
}

TEST_P(LayoutStubTest, InterleavedArraysInCompositePiecesOut) {
  std::vector<float> x{1, 2, 3, 4}, y{10, 20, 30, 40}, z{100, 200, 300, 400};
  std::vector<float> out(8, -1);
  const Status st = client_->Mesh(
      StridedView<const float>({std::span<const float>(x), std::span<const float>(y),
                                std::span<const float>(z)},
                               Layout::Interleaved({1, 1, 1}, 12)),
      StridedView<float>(std::span<float>(out), Layout::Composite({{6, 2}, {0, 2}})), Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  // Wire order: sums 0, 1 go to out[6..7], sums 2, 3 to out[0..1].
  EXPECT_EQ(out, (std::vector<float>{333, 444, -1, -1, -1, -1, 111, 222}));
}

TEST_P(LayoutStubTest, AsyncFormGathersAndScatters) {
  std::vector<double> m(64 * 64, 1.0);
  std::future<Status> f =
      client_->ScaleColumnAsync(StridedView<double>(std::span<double>(m), Layout::Strided(64, 1, 64, 5)),
                                Guard());
  ASSERT_TRUE(f.get().ok());
  for (size_t i = 0; i < m.size(); ++i) ASSERT_EQ(m[i], i % 64 == 5 ? 2.0 : 1.0) << i;
}

TEST_P(LayoutStubTest, ViewsThatDoNotMatchTheirDeclarationAreTypedErrors) {
  std::vector<double> m(64 * 64, 1.0);
  Status st = client_->ScaleColumn(
      StridedView<double>(std::span<double>(m), Layout::Strided(64, 1, 65, 5)), Guard());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "Layouts.ScaleColumn: parameter 'col': the view's layout does not match the "
            "declaration: expected strided{count 64, block 1, stride 64, offset 5}, got "
            "strided{count 64, block 1, stride 65, offset 5}; nothing was sent");
  // Memory shorter than the layout reaches (64 * 63 + 5 + 1 elements).
  st = client_->ScaleColumn(StridedView<double>(std::span<double>(m).first(4000),
                                                Layout::Strided(64, 1, 64, 5)),
                            Guard());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("parameter 'col': the view's memory holds 4000 elements; "
                              "strided{count 64, block 1, stride 64, offset 5} reaches 4038"),
            std::string::npos)
      << st.message();
  for (double v : m) ASSERT_EQ(v, 1.0);  // nothing was sent, nothing written back
  // Two arrays where the layout interleaves three.
  std::vector<float> x(4), y(4), out(8);
  st = client_->Mesh(StridedView<const float>({std::span<const float>(x), std::span<const float>(y)},
                                              Layout::Interleaved({1, 1, 1}, 12)),
                     StridedView<float>(std::span<float>(out), Layout::Composite({{6, 2}, {0, 2}})),
                     Guard());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Layouts.Mesh: parameter 'xyz': the view has 2 arrays"),
            std::string::npos)
      << st.message();
  // The async form reports the same, through the future.
  st = client_->ScaleColumnAsync(StridedView<double>(std::span<double>(m), Layout::Strided(32, 2, 64, 5)),
                                 Guard())
           .get();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, LayoutStubTest,
    ::testing::Combine(::testing::Values("emulated", "verbs"),
                       ::testing::Values(Dialect::kSpec, Dialect::kReference)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" +
             (std::get<1>(info.param) == Dialect::kSpec ? "spec" : "reference");
    });

}  // namespace
}  // namespace naarpc
