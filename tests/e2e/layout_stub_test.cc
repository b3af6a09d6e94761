// Generated stubs with parameter layouts (docs/idl.md "Layouts", seed 004)
// against a software NAA, on both transports (the verbs cases run in the
// Soft-RoCE guest) and in both dialects: matrix column and sub-block round
// trips, interleaved arrays, layouts with more runs than a device's max_sge,
// and typed errors for views that do not match their declaration. The NAA
// sees every parameter packed and contiguous.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "naarpc/naa_server.h"
#include "naarpc/strided_view.h"
#include "naarpc/user_memory.h"
#include "tests/e2e/layouts.naa.h"
#include "tests/testing/forwarding_transport.h"
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
  lay::LayoutsError CopyBlocks(const NaaCall&, std::span<const double> blocks,
                               std::span<double> out) override {
    std::copy(blocks.begin(), blocks.end(), out.begin());
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

// Zero-copy sends (docs/protocol.md 16.2): inputs in memory registered with
// ClientOptions::user_memory go by gather lists from that memory when the
// runs are long enough; the registry's counters say which path ran.
class ZeroCopyTest : public LayoutStubTest {
 protected:
  // A client whose sessions send from `registry_`'s memory, runs of at
  // least `min_run_bytes`.
  void Reopen(uint64_t min_run_bytes) {
    client_.reset();
    codegen::StubOptions options;
    options.session.dialect = std::get<1>(GetParam());
    options.session.user_memory = registry_;
    options.session.zero_copy_min_run_bytes = min_run_bytes;
    client_ = std::make_unique<lay::LayoutsClient>(*tt_.transport, tt_.address, server_->port(),
                                                   options);
  }
  void SetUp() override {
    LayoutStubTest::SetUp();
    if (IsSkipped()) return;
    Reopen(ClientOptions::kDefaultZeroCopyMinRunBytes);
  }
  std::shared_ptr<UserMemoryRegistry> registry_ = std::make_shared<UserMemoryRegistry>();
};

// 64 blocks of 1024 f64 at a stride of 2048; the others hold a poison value.
std::vector<double> Blocks(double base) {
  std::vector<double> m(64 * 2048, -7.0);
  for (size_t b = 0; b < 64; ++b) {
    for (size_t i = 0; i < 1024; ++i) m[b * 2048 + i] = base + double(b * 1024 + i);
  }
  return m;
}

TEST_P(ZeroCopyTest, LargeBlocksGoFromRegisteredMemoryAndTheNaaSeesExactlyTheLayout) {
  std::vector<double> m = Blocks(0);
  auto reg = registry_->Register(std::span<double>(m));
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const Layout blocks = Layout::Strided(64, 1024, 2048);
  std::vector<double> out(65536);
  // 64 runs: more than max_send_sge (16), so chained work requests.
  ASSERT_TRUE(client_->CopyBlocks(StridedView<const double>(std::span<const double>(m), blocks),
                                  std::span<double>(out), Guard())
                  .ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], double(i)) << "element " << i;
  UserMemoryRegistry::Stats st = registry_->stats();
  EXPECT_EQ(st.zero_copy_inputs, 1u);
  EXPECT_EQ(st.zero_copy_bytes, 65536u * 8);
  EXPECT_EQ(st.packed_inputs, 0u);
  // The next call reads the memory as it is then (nothing cached).
  for (size_t b = 0; b < 64; ++b) m[b * 2048 + 5] = -1.5 * double(b);
  ASSERT_TRUE(client_->CopyBlocks(StridedView<const double>(std::span<const double>(m), blocks),
                                  std::span<double>(out), Guard())
                  .ok());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], i % 1024 == 5 ? -1.5 * double(i / 1024) : double(i)) << "element " << i;
  }
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 2u);
  // The async form takes the same path.
  std::fill(out.begin(), out.end(), 0.0);
  ASSERT_TRUE(client_
                  ->CopyBlocksAsync(StridedView<const double>(std::span<const double>(m), blocks),
                                    std::span<double>(out), Guard())
                  .get()
                  .ok());
  EXPECT_EQ(out[5], 0.0);
  EXPECT_EQ(out[1024 + 6], 1024.0 + 6);
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 3u);
  EXPECT_EQ(registry_->stats().packed_inputs, 0u);
}

TEST_P(ZeroCopyTest, UnregisteredOrDeregisteredMemoryIsPacked) {
  std::vector<double> m = Blocks(10);
  const Layout blocks = Layout::Strided(64, 1024, 2048);
  std::vector<double> out(65536);
  ASSERT_TRUE(client_->CopyBlocks(StridedView<const double>(std::span<const double>(m), blocks),
                                  std::span<double>(out), Guard())
                  .ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 10 + double(i)) << i;
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 0u);
  EXPECT_EQ(registry_->stats().packed_inputs, 1u);
  EXPECT_EQ(registry_->stats().packed_bytes, 65536u * 8);
  {
    // Registered, then deregistered (RAII) before the next call.
    auto reg = registry_->Register(std::span<double>(m));
    ASSERT_TRUE(reg.ok());
    ASSERT_TRUE(client_->CopyBlocks(StridedView<const double>(std::span<const double>(m), blocks),
                                    std::span<double>(out), Guard())
                    .ok());
    EXPECT_EQ(registry_->stats().zero_copy_inputs, 1u);
  }
  m[0] = 99;
  ASSERT_TRUE(client_->CopyBlocks(StridedView<const double>(std::span<const double>(m), blocks),
                                  std::span<double>(out), Guard())
                  .ok());
  EXPECT_EQ(out[0], 99.0);
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 1u);
  EXPECT_EQ(registry_->stats().packed_inputs, 2u);
  // Memory registered only in part (the layout reaches beyond it): packed.
  auto part = registry_->Register(std::span<double>(m).first(4096));
  ASSERT_TRUE(part.ok());
  ASSERT_TRUE(client_->CopyBlocks(StridedView<const double>(std::span<const double>(m), blocks),
                                  std::span<double>(out), Guard())
                  .ok());
  EXPECT_EQ(out[1024], 10 + 1024.0);
  EXPECT_EQ(registry_->stats().packed_inputs, 3u);
  // Overlapping registrations are refused.
  EXPECT_EQ(registry_->Register(std::span<double>(m).subspan(100, 10)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(ZeroCopyTest, ShortRunsArePackedUnlessTheThresholdAllows) {
  std::vector<double> m(64 * 64);
  std::iota(m.begin(), m.end(), 0.0);
  auto reg = registry_->Register(std::span<double>(m));
  ASSERT_TRUE(reg.ok());
  const Layout col = Layout::Strided(64, 1, 64, 5);
  // Runs of 8 bytes: below the default threshold, packed.
  ASSERT_TRUE(client_->ScaleColumn(StridedView<double>(std::span<double>(m), col), Guard()).ok());
  EXPECT_EQ(registry_->stats().packed_inputs, 1u);
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 0u);
  // Threshold 0: the column and a halo face go zero-copy (64 one-element
  // runs: 4 chained work requests), the results scattered back.
  Reopen(0);
  ASSERT_TRUE(client_->ScaleColumn(StridedView<double>(std::span<double>(m), col), Guard()).ok());
  for (size_t i = 0; i < m.size(); ++i) {
    ASSERT_EQ(m[i], i % 64 == 5 ? 4.0 * double(i) : double(i)) << "element " << i;
  }
  std::vector<float> block(8 * 8 * 8, 0.5f);
  auto block_reg = registry_->Register(std::span<float>(block));
  ASSERT_TRUE(block_reg.ok());
  const Layout face = Layout::SubArray({8, 8, 8}, {8, 8, 1}, {0, 0, 7});
  ASSERT_TRUE(client_->BumpHalo(StridedView<float>(std::span<float>(block), face), Guard()).ok());
  for (size_t i = 0; i < block.size(); ++i) ASSERT_EQ(block[i], i % 8 == 7 ? 1.5f : 0.5f) << i;
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 2u);
  EXPECT_EQ(registry_->stats().packed_inputs, 1u);
  // 4096 one-element runs: 256 work requests, more than the send queue
  // takes in one call: packed, still correct.
  std::vector<double> tall(4096 * 16, -1.0);
  double want = 0;
  for (size_t r = 0; r < 4096; ++r) want += (tall[r * 16 + 3] = double(r));
  auto tall_reg = registry_->Register(std::span<double>(tall));
  ASSERT_TRUE(tall_reg.ok());
  double sum = 0;
  ASSERT_TRUE(client_
                  ->SumColumn(StridedView<const double>(std::span<const double>(tall),
                                                        Layout::Strided(4096, 1, 16, 3)),
                              &sum, Guard())
                  .ok());
  EXPECT_EQ(sum, want);
  EXPECT_EQ(registry_->stats().packed_inputs, 2u);
}

TEST_P(ZeroCopyTest, AViewThatDoesNotMatchItsDeclarationIsATypedError) {
  std::vector<double> m = Blocks(0);
  auto reg = registry_->Register(std::span<double>(m));
  ASSERT_TRUE(reg.ok());
  std::vector<double> out(65536, 3.0);
  const Status st = client_->CopyBlocks(
      StridedView<const double>(std::span<const double>(m), Layout::Strided(64, 1024, 2049)),
      std::span<double>(out), Guard());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Layouts.CopyBlocks: parameter 'blocks': the view's layout does not "
                              "match the declaration"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(registry_->stats().zero_copy_inputs + registry_->stats().packed_inputs, 0u);
  for (double v : out) ASSERT_EQ(v, 3.0);
}

// What a client's connection posts: the gather entries of its writes.
struct Posted {
  std::mutex mu;
  size_t gather_writes = 0, gather_entries = 0, max_entries = 0;
  std::vector<LocalBuffer> entries;
  bool last_is_write_with_imm = false;
};
class CountingConnection final : public testing::ForwardingConnection {
 public:
  CountingConnection(std::unique_ptr<Connection> inner, std::shared_ptr<Posted> posted)
      : ForwardingConnection(std::move(inner)), posted_(std::move(posted)) {}
  Status PostSend(std::span<const SendRequest> requests) override {
    {
      std::lock_guard<std::mutex> lock(posted_->mu);
      for (const SendRequest& r : requests) {
        if (r.sg_list.empty()) continue;
        ++posted_->gather_writes;
        posted_->gather_entries += r.sg_list.size();
        posted_->max_entries = std::max(posted_->max_entries, r.sg_list.size());
        posted_->entries.insert(posted_->entries.end(), r.sg_list.begin(), r.sg_list.end());
      }
      if (!requests.empty()) {
        posted_->last_is_write_with_imm = requests.back().opcode == WorkOpcode::kRdmaWriteWithImm;
      }
    }
    return ForwardingConnection::PostSend(requests);
  }

 private:
  std::shared_ptr<Posted> posted_;
};

TEST(ZeroCopyWire, TheWritesGatherFromTheCallersMemoryInChainsOfMaxSendSge) {
  testing::TestTransport tt = testing::MakeTestTransport("emulated");
  ASSERT_TRUE(tt.transport);
  Kernels kernels;
  auto server = NaaServer::Start(*tt.transport, tt.address, 0, kernels);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto posted = std::make_shared<Posted>();
  testing::WrappingTransport counting(*tt.transport, [posted](std::unique_ptr<Connection> c) {
    return std::unique_ptr<Connection>(std::make_unique<CountingConnection>(std::move(c), posted));
  });
  auto registry = std::make_shared<UserMemoryRegistry>();
  codegen::StubOptions options;
  options.session.user_memory = registry;
  lay::LayoutsClient client(counting, tt.address, (*server)->port(), options);

  std::vector<double> m = Blocks(0);
  auto reg = registry->Register(std::span<double>(m));
  ASSERT_TRUE(reg.ok());
  std::vector<double> out(65536);
  ASSERT_TRUE(client
                  .CopyBlocks(StridedView<const double>(std::span<const double>(m),
                                                        Layout::Strided(64, 1024, 2048)),
                              std::span<double>(out), Deadline::After(kHangGuard))
                  .ok());
  std::lock_guard<std::mutex> lock(posted->mu);
  // 64 runs of 8 KiB, 16 (max_send_sge) per write: 4 chained writes, the
  // last the WRITE_WITH_IMM with the function code.
  EXPECT_EQ(posted->gather_writes, 4u);
  EXPECT_EQ(posted->gather_entries, 64u);
  EXPECT_EQ(posted->max_entries, 16u);
  EXPECT_TRUE(posted->last_is_write_with_imm);
  ASSERT_EQ(posted->entries.size(), 64u);
  for (size_t b = 0; b < 64; ++b) {
    EXPECT_EQ(posted->entries[b].addr, reinterpret_cast<uintptr_t>(m.data() + b * 2048)) << b;
    EXPECT_EQ(posted->entries[b].length, 1024u * 8) << b;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ZeroCopyTest,
    ::testing::Combine(::testing::Values("emulated", "verbs"),
                       ::testing::Values(Dialect::kSpec, Dialect::kReference)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" +
             (std::get<1>(info.param) == Dialect::kSpec ? "spec" : "reference");
    });

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
