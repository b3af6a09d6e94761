// Generated stubs with parameter layouts (docs/idl.md "Layouts", seed 004)
// against a software NAA, on both transports (the verbs cases run in the
// Soft-RoCE guest) and in both dialects: matrix column and sub-block round
// trips, interleaved arrays, layouts with more runs than a device's max_sge,
// and typed errors for views that do not match their declaration. The NAA
// sees every parameter packed and contiguous.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
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
  lay::LayoutsError CopyColumn(const NaaCall&, std::span<const double> col,
                               std::span<double> out) override {
    ++copy_column_calls;
    std::copy(col.begin(), col.end(), out.begin());
    return lay::LayoutsError::kOk;
  }

 public:
  std::atomic<int> copy_column_calls{0};
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
  // takes at once: zero-copy too, in batches (ZeroCopyChainTest).
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
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 3u);
  EXPECT_EQ(registry_->stats().packed_inputs, 1u);
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

// What a client's connection posts: the gather entries of its writes, and
// every PostSend of RDMA writes (a batch) with its requests.
struct Posted {
  std::mutex mu;
  size_t gather_writes = 0, gather_entries = 0, max_entries = 0;
  std::vector<LocalBuffer> entries;
  bool last_is_write_with_imm = false;
  uint32_t depth = 0;  // the connection's send queue
  struct Request {
    WorkOpcode opcode;
    bool signaled;
  };
  std::vector<std::vector<Request>> batches;
  void Clear() {
    std::lock_guard<std::mutex> lock(mu);
    gather_writes = gather_entries = max_entries = 0;
    entries.clear();
    batches.clear();
  }
};
class CountingConnection final : public testing::ForwardingConnection {
 public:
  CountingConnection(std::unique_ptr<Connection> inner, std::shared_ptr<Posted> posted)
      : ForwardingConnection(std::move(inner)), posted_(std::move(posted)) {
    std::lock_guard<std::mutex> lock(posted_->mu);
    posted_->depth = send_queue_depth();
  }
  Status PostSend(std::span<const SendRequest> requests) override {
    {
      std::lock_guard<std::mutex> lock(posted_->mu);
      if (std::any_of(requests.begin(), requests.end(), [](const SendRequest& r) {
            return r.opcode == WorkOpcode::kRdmaWrite || r.opcode == WorkOpcode::kRdmaWriteWithImm;
          })) {
        auto& batch = posted_->batches.emplace_back();
        for (const SendRequest& r : requests) batch.push_back({r.opcode, r.signaled});
      }
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

// One call's writes went in `at_least` batches or more: each within half
// the send queue, closed by a signaled request, the WRITE_WITH_IMM (the
// function code) only at the very end.
void ExpectBatches(Posted& posted, size_t at_least) {
  std::lock_guard<std::mutex> lock(posted.mu);
  ASSERT_GE(posted.batches.size(), at_least);
  ASSERT_GT(posted.depth, 0u);
  for (size_t i = 0; i < posted.batches.size(); ++i) {
    const auto& batch = posted.batches[i];
    const bool last = i + 1 == posted.batches.size();
    ASSERT_FALSE(batch.empty());
    EXPECT_LE(batch.size(), posted.depth / 2) << "batch " << i;
    for (size_t k = 0; k + 1 < batch.size(); ++k) {
      EXPECT_EQ(batch[k].opcode, WorkOpcode::kRdmaWrite) << "batch " << i << " request " << k;
      EXPECT_FALSE(batch[k].signaled) << "batch " << i << " request " << k;
    }
    EXPECT_TRUE(batch.back().signaled) << "batch " << i;
    EXPECT_EQ(batch.back().opcode, last ? WorkOpcode::kRdmaWriteWithImm : WorkOpcode::kRdmaWrite)
        << "batch " << i;
  }
}

// A 4096 x 16 f64 matrix: column 3 holds r + 0.25, every other element a
// poison value the NAA must never see.
std::vector<double> Column(double base) {
  std::vector<double> m(4096 * 16, -7.0);
  for (size_t r = 0; r < 4096; ++r) m[r * 16 + 3] = base + double(r) + 0.25;
  return m;
}

// Chains longer than the send queue takes at once (docs/protocol.md 16.2):
// the 4096 one-element runs of CopyColumn are 256 gather writes (16 entries
// each), several times half the send queue, sent zero-copy in batches as
// completions free the slots.
class ZeroCopyChainTest : public ZeroCopyTest {
 protected:
  void SetUp() override {
    ZeroCopyTest::SetUp();
    if (IsSkipped()) return;
    client_.reset();
    codegen::StubOptions options;
    options.session.dialect = std::get<1>(GetParam());
    options.session.user_memory = registry_;
    options.session.zero_copy_min_run_bytes = 0;
    counting_ = std::make_unique<testing::WrappingTransport>(
        *tt_.transport, [posted = posted_](std::unique_ptr<Connection> c) {
          return std::unique_ptr<Connection>(
              std::make_unique<CountingConnection>(std::move(c), posted));
        });
    client_ = std::make_unique<lay::LayoutsClient>(*counting_, tt_.address, server_->port(),
                                                   options);
  }
  void TearDown() override {
    client_.reset();
    counting_.reset();
    ZeroCopyTest::TearDown();
  }
  // The batches 256 gather writes take at least: half the connection's
  // send queue each (64 here on both transports; rxe may round it up).
  size_t MinBatches() {
    std::lock_guard<std::mutex> lock(posted_->mu);
    const size_t half = std::max<uint32_t>(posted_->depth / 2, 1);
    return std::max<size_t>(2, (256 + half - 1) / half);
  }
  // The column of `m` arrived exactly: byte for byte, no poison.
  static void ExpectColumn(const std::vector<double>& m, const std::vector<double>& out) {
    for (size_t r = 0; r < 4096; ++r) {
      ASSERT_EQ(std::memcmp(&out[r], &m[r * 16 + 3], sizeof(double)), 0) << "element " << r;
    }
  }

  std::shared_ptr<Posted> posted_ = std::make_shared<Posted>();
  std::unique_ptr<testing::WrappingTransport> counting_;
};

TEST_P(ZeroCopyChainTest, ALongChainGoesZeroCopyInBatchesAndArrivesExactly) {
  std::vector<double> m = Column(0);
  auto reg = registry_->Register(std::span<double>(m));
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const Layout col = Layout::Strided(4096, 1, 16, 3);
  // Three calls on one session: the send queue is accounted across them.
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    for (size_t r = 0; r < 4096; ++r) m[r * 16 + 3] = 1000.0 * call + double(r) + 0.25;
    std::vector<double> out(4096, -1.0);
    posted_->Clear();
    const Status st = client_->CopyColumn(
        StridedView<const double>(std::span<const double>(m), col), std::span<double>(out),
        Guard());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectColumn(m, out);
    ExpectBatches(*posted_, MinBatches());
    std::lock_guard<std::mutex> lock(posted_->mu);
    // Every gather entry names one element of the caller's column, in order.
    ASSERT_EQ(posted_->entries.size(), 4096u);
    for (size_t r = 0; r < 4096; ++r) {
      ASSERT_EQ(posted_->entries[r].addr, reinterpret_cast<uintptr_t>(&m[r * 16 + 3])) << r;
      ASSERT_EQ(posted_->entries[r].length, sizeof(double)) << r;
    }
    EXPECT_LE(posted_->max_entries, 16u);
  }
  const UserMemoryRegistry::Stats stats = registry_->stats();
  EXPECT_EQ(stats.zero_copy_inputs, 3u);
  EXPECT_EQ(stats.zero_copy_bytes, 3u * 4096 * 8);
  EXPECT_EQ(stats.packed_inputs, 0u);
  EXPECT_EQ(kernels_.copy_column_calls.load(), 3);
}

TEST_P(ZeroCopyChainTest, TheAsyncEngineDrivesTheBatches) {
  // The async form runs on the call engine: StartCall, then ContinueCall
  // whenever the session's notify_fd() is readable; the batches are posted
  // from ContinueCall as their completions arrive.
  std::vector<double> m = Column(5);
  auto reg = registry_->Register(std::span<double>(m));
  ASSERT_TRUE(reg.ok());
  const Layout col = Layout::Strided(4096, 1, 16, 3);
  for (int call = 0; call < 2; ++call) {
    std::vector<double> out(4096, -1.0);
    posted_->Clear();
    const Status st =
        client_
            ->CopyColumnAsync(StridedView<const double>(std::span<const double>(m), col),
                              std::span<double>(out), Guard())
            .get();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectColumn(m, out);
    ExpectBatches(*posted_, MinBatches());
  }
  EXPECT_EQ(registry_->stats().zero_copy_inputs, 2u);
  EXPECT_EQ(registry_->stats().packed_inputs, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ZeroCopyChainTest,
    ::testing::Combine(::testing::Values("emulated", "verbs"),
                       ::testing::Values(Dialect::kSpec, Dialect::kReference)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" +
             (std::get<1>(info.param) == Dialect::kSpec ? "spec" : "reference");
    });

// A small send queue and few gather entries per request (EmulatedOptions):
// CopyBlocks' 64 runs are 16 gather writes, in batches of 4.
TEST(ZeroCopyWire, ASmallSendQueueTakesTheChainInBatchesOfHalfItsDepth) {
  EmulatedOptions emulated;
  emulated.send_queue_depth = 8;
  emulated.max_send_sge = 4;
  std::unique_ptr<Transport> transport = NewEmulatedTransport(emulated);
  Kernels kernels;
  auto server = NaaServer::Start(*transport, "127.0.0.1", 0, kernels);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto posted = std::make_shared<Posted>();
  testing::WrappingTransport counting(*transport, [posted](std::unique_ptr<Connection> c) {
    return std::unique_ptr<Connection>(std::make_unique<CountingConnection>(std::move(c), posted));
  });
  auto registry = std::make_shared<UserMemoryRegistry>();
  codegen::StubOptions options;
  options.session.user_memory = registry;
  lay::LayoutsClient client(counting, "127.0.0.1", (*server)->port(), options);
  std::vector<double> m = Blocks(0.5);
  auto reg = registry->Register(std::span<double>(m));
  ASSERT_TRUE(reg.ok());
  std::vector<double> out(65536, -1.0);
  const Status st = client.CopyBlocks(
      StridedView<const double>(std::span<const double>(m), Layout::Strided(64, 1024, 2048)),
      std::span<double>(out), Deadline::After(kHangGuard));
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 0.5 + double(i)) << "element " << i;
  // 16 gather writes (and the spec dialect's metadata): batches of at most 4.
  ExpectBatches(*posted, 4);
  std::lock_guard<std::mutex> lock(posted->mu);
  EXPECT_EQ(posted->depth, 8u);
  EXPECT_EQ(posted->gather_writes, 16u);
  EXPECT_EQ(posted->max_entries, 4u);
  EXPECT_EQ(registry->stats().zero_copy_inputs, 1u);
  EXPECT_EQ(registry->stats().packed_inputs, 0u);
}

// CopyColumn (4096 one-element runs, zero-copy: a chain of 256 gather
// writes in batches) against a software NAA, over an emulated transport
// whose host applies `action` to its `nth` plain RDMA WRITE.
struct FaultedChain {
  Status status;
  int kernel_calls = 0;
  std::vector<double> out;
  uint64_t injected = 0;
};
FaultedChain CopyColumnWithFault(int nth, FaultAction action, Deadline deadline) {
  EmulatedOptions emulated;
  auto faults = std::make_shared<ScriptedFaultInjector>();
  auto writes = std::make_shared<int>(0);
  FaultRule rule;
  rule.match = [writes, nth](const FaultPoint& p) {
    return !p.is_listener_side && p.opcode == WorkOpcode::kRdmaWrite && ++*writes == nth;
  };
  rule.action = action;
  faults->AddRule(rule);
  emulated.faults = faults;
  std::unique_ptr<Transport> transport = NewEmulatedTransport(emulated);
  Kernels kernels;
  auto server = NaaServer::Start(*transport, "127.0.0.1", 0, kernels);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  FaultedChain r;
  if (!server.ok()) {
    r.status = server.status();
    return r;
  }
  auto registry = std::make_shared<UserMemoryRegistry>();
  codegen::StubOptions options;
  options.session.user_memory = registry;
  options.session.zero_copy_min_run_bytes = 0;
  lay::LayoutsClient client(*transport, "127.0.0.1", (*server)->port(), options);
  std::vector<double> m = Column(0);
  auto reg = registry->Register(std::span<double>(m));
  EXPECT_TRUE(reg.ok());
  r.out.assign(4096, -1.0);
  r.status = client.CopyColumn(
      StridedView<const double>(std::span<const double>(m), Layout::Strided(4096, 1, 16, 3)),
      std::span<double>(r.out), deadline);
  r.kernel_calls = kernels.copy_column_calls.load();
  r.injected = faults->injected();
  return r;
}

// The connection breaks in the middle of a chain (emulated fault
// injection): the call fails naming the parameter and how far its writes
// got, the NAA never ran the kernel, nothing was written back.
TEST(ZeroCopyWire, AFaultMidChainEndsTheCallNamingTheParameter) {
  // The host's 100th plain RDMA WRITE (of 256 + metadata).
  const FaultedChain r = CopyColumnWithFault(100, FaultAction::Drop(), Deadline::After(kHangGuard));
  const Status& st = r.status;
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();  // not a hang
  EXPECT_EQ(r.injected, 1u);
  EXPECT_NE(st.message().find("Layouts.CopyColumn"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(" write requests went in batches of at most 32: "),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("parameter 'col' (zero-copy): "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("the request immediate was not sent: the NAA ran nothing"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(r.kernel_calls, 0);
  for (double v : r.out) ASSERT_EQ(v, -1.0);
}

// A batch held back (emulated fault injection: a delay far beyond the
// call's deadline) until the call's deadline passes: the call ends with
// kDeadlineExceeded saying how far the writes got, and nothing hangs.
TEST(ZeroCopyWire, TheDeadlineMidChainEndsTheCallNamingTheParameter) {
  const FaultedChain r = CopyColumnWithFault(
      40, FaultAction::Delay(std::chrono::duration_cast<std::chrono::microseconds>(kHangGuard)),
      // Covers starting the NAA, connecting and the MRSP on a loaded
      // machine, so that it passes during the held-back writes.
      Deadline::After(3s));
  const Status& st = r.status;
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("the deadline passed while the inputs were written: the inputs' "),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("parameter 'col' (zero-copy): "), std::string::npos) << st.message();
  EXPECT_EQ(r.kernel_calls, 0);
  for (double v : r.out) ASSERT_EQ(v, -1.0);
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
