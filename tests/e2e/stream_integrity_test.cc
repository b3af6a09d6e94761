// Streams cannot lose a chunk (docs/protocol.md 15.2-15.4): a chunk or a
// credit lost, duplicated or reordered on the wire (the emulated transport's
// fault injection) fails the call with an error that names the stream, the
// expected and the received frame, at whichever side reads the frame: the
// NAA (its log) for what the host writes, the host (the call's status) for
// what the NAA writes. The writer sees the reader close the connection and
// names the stream and how far it got (the host in the call's status, the
// NAA in its log). Both dialects.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "naarpc/naarpc.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/emulated/fault_injection.h"
#include "services/stream/stream_service.h"
#include "tests/testing/forwarding_transport.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/test_transport.h"
#include "runtime/wire/stream_frame.h"

namespace naarpc {
namespace {

namespace ops = services::stream;

constexpr auto kGuard = std::chrono::seconds(60);
constexpr uint64_t kChunk = 65536;   // Checksum's and Generate's chunk (stream.naa.yaml)
constexpr uint64_t kChunks = 20;     // more than both windows (8)
constexpr uint32_t kFaultyFrame = 2;  // chunk 2, or the credit for 3 chunks

enum class Who { kHost, kNaa };       // who writes the faulty frame
enum class What { kChunk, kCredit };

// The frame `who` writes: a chunk numbered kFaultyFrame or a credit for
// kFaultyFrame + 1 chunks, of stream 0.
std::function<bool(const FaultPoint&)> Frame(Who who, What what) {
  return [=](const FaultPoint& p) {
    if (!p.has_imm || p.is_listener_side != (who == Who::kNaa)) return false;
    const std::optional<StreamFrame> f = DecodeStreamFrame(p.imm_data);
    if (!f || f->stream != 0 || f->credit != (what == What::kCredit)) return false;
    return f->value == (what == What::kChunk ? kFaultyFrame : kFaultyFrame + 1);
  };
}

struct Case {
  std::string name;
  Who who;
  What what;
  FaultAction action;
  std::string expected;  // in the reader's error
};

class StreamIntegrityTest : public ::testing::TestWithParam<std::tuple<Case, Dialect>> {
 protected:
  void SetUp() override {
    const Case& c = std::get<0>(GetParam());
    faults_ = std::make_shared<ScriptedFaultInjector>();
    FaultRule rule;
    rule.match = Frame(c.who, c.what);
    rule.action = c.action;
    faults_->AddRule(rule);
    EmulatedOptions options;
    options.faults = faults_;
    transport_ = NewEmulatedTransport(options);
    auto handler = codegen::CompositeHandler::Create({&kernels_});
    ASSERT_TRUE(handler.ok()) << handler.status().ToString();
    handler_ = std::move(*handler);
    ServerOptions server_options;
    server_options.log = log_.Sink();
    auto server = NaaServer::Start(*transport_, "127.0.0.1", 0, *handler_, server_options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    codegen::StubOptions stub;
    stub.session.dialect = std::get<1>(GetParam());
    client_ = std::make_unique<ops::StreamOpsClient>(*transport_, "127.0.0.1", server_->port(),
                                                     stub);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  // The routine whose stream carries the faulty frame: Checksum streams from
  // the host (chunks from it, credits from the NAA), Generate from the NAA.
  static bool Checksum(const Case& c) {
    return (c.who == Who::kHost) == (c.what == What::kChunk);
  }
  Status CallTheRoutine() {
    const Case& c = std::get<0>(GetParam());
      if (Checksum(c)) {
      std::vector<uint8_t> data(kChunks * kChunk + 5, 3);
      uint64_t digest[4] = {};
      return client_->Checksum(data, digest, Deadline::After(kGuard));
    }
    std::vector<uint8_t> data;
    return client_->Generate(kChunks * kChunk + 5, &data, Deadline::After(kGuard));
  }

  std::shared_ptr<ScriptedFaultInjector> faults_;
  std::unique_ptr<Transport> transport_;
  ops::StreamOpsServiceImpl kernels_;
  std::unique_ptr<codegen::CompositeHandler> handler_;
  testing::LogCapture log_;
  std::unique_ptr<NaaServer> server_;
  std::unique_ptr<ops::StreamOpsClient> client_;
};

TEST_P(StreamIntegrityTest, TheReaderNamesTheFrame) {
  const Case& c = std::get<0>(GetParam());
  const Status st = CallTheRoutine();
  EXPECT_EQ(faults_->injected(), 1u);
  ASSERT_FALSE(st.ok()) << "the call succeeded despite a " << c.name;
  // The NAA reads the host's chunks and the credits for its own.
  const bool naa_reads = (c.who == Who::kHost);
  if (naa_reads) {
    EXPECT_TRUE(log_.WaitFor(c.expected)) << "the NAA logged:\n" << log_.All();
    // The host sees the NAA close the connection mid-stream and names the
    // stream and how far it got.
    EXPECT_NE(st.message().find(Checksum(c) ? "Checksum" : "Generate"), std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("mid-stream; stream 'data': "), std::string::npos)
        << st.ToString();
  } else {
    EXPECT_EQ(st.code(), StatusCode::kProtocolError) << st.ToString();
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << st.ToString();
    // The NAA sees the host leave mid-stream and logs the stream and how
    // far it got.
    EXPECT_TRUE(log_.WaitFor("the connection ended mid-stream: "))
        << "the NAA logged:\n" << log_.All();
    EXPECT_NE(log_.All().find("; stream 0: "), std::string::npos) << log_.All();
  }
  // The client goes on: a fresh connection is served (no rule left).
  EXPECT_TRUE(CallTheRoutine().ok());
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (Who who : {Who::kHost, Who::kNaa}) {
    const std::string writer = who == Who::kHost ? "Host" : "Naa";
    // The reader of the host's frames is the NAA, which names streams by
    // index; the host names them by the IDL's name.
    const std::string chunk_stream = who == Who::kHost ? "stream 0: " : "stream 'data': ";
    const std::string credit_stream = chunk_stream;
    cases.push_back({writer + "ChunkLost", who, What::kChunk, FaultAction::LoseMessage(),
                     chunk_stream +
                         "chunk 3 arrived where 2 was expected (chunks lost or reordered)"});
    cases.push_back({writer + "ChunkDuplicated", who, What::kChunk, FaultAction::Duplicate(),
                     chunk_stream +
                         "chunk 2 arrived where 3 was expected (chunks duplicated or reordered)"});
    cases.push_back({writer + "ChunksSwapped", who, What::kChunk, FaultAction::SwapWithNext(),
                     chunk_stream + "chunk 3 arrived where 2 was expected"});
    cases.push_back({writer + "CreditLost", who, What::kCredit, FaultAction::LoseMessage(),
                     credit_stream +
                         "credit 4 arrived where 3 was expected (credits lost or reordered)"});
    cases.push_back({writer + "CreditDuplicated", who, What::kCredit, FaultAction::Duplicate(),
                     credit_stream +
                         "credit 3 arrived where 4 was expected (credits duplicated or reordered)"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    Faults, StreamIntegrityTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(Dialect::kSpec, Dialect::kReference)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" +
             (std::get<1>(info.param) == Dialect::kSpec ? "spec" : "reference");
    });

// The same checks on a real transport (the verbs cases run in the Soft-RoCE
// guest): one side's connection renumbers one of its stream frames as it
// posts it (chunk 2 numbered 3 or 1, the credit for 3 chunks counting 4 or
// 2), as a lost or a duplicated frame would look to the reader. The reader
// names the stream, the expected and the received number; the writer names
// the stream when the reader closes the connection.
struct Renumber {
  std::string name;
  Who who;
  What what;
  int delta;             // added to the frame's number
  std::string expected;  // in the reader's error, after the stream's name
};

// Renumbers the first matching frame this connection (or any other sharing
// `done`) posts.
class RenumberingConnection final : public testing::ForwardingConnection {
 public:
  RenumberingConnection(std::unique_ptr<Connection> inner, const Renumber& r,
                        std::shared_ptr<std::atomic<bool>> done)
      : ForwardingConnection(std::move(inner)), r_(r), done_(std::move(done)) {}
  Status PostSend(std::span<const SendRequest> requests) override {
    std::vector<SendRequest> posted(requests.begin(), requests.end());
    for (SendRequest& s : posted) {
      if (s.opcode != WorkOpcode::kRdmaWriteWithImm) continue;
      const std::optional<StreamFrame> f = DecodeStreamFrame(s.imm_data);
      if (!f || f->stream != 0 || f->credit != (r_.what == What::kCredit)) continue;
      if (f->value != (r_.what == What::kChunk ? kFaultyFrame : kFaultyFrame + 1)) continue;
      if (done_->exchange(true)) continue;
      s.imm_data = (s.imm_data & ~kStreamValueMask) |
                   (static_cast<uint32_t>(static_cast<int>(f->value) + r_.delta) &
                    kStreamValueMask);
    }
    return inner().PostSend(posted);
  }

 private:
  const Renumber r_;
  const std::shared_ptr<std::atomic<bool>> done_;
};

using RenumberParam = std::tuple<std::string, Renumber, Dialect>;

class StreamSequenceTest : public ::testing::TestWithParam<RenumberParam> {
 protected:
  void SetUp() override {
    tt_ = testing::MakeTestTransport(std::get<0>(GetParam()));
    if (!tt_.transport) GTEST_SKIP() << tt_.unavailable;
    const Renumber& r = std::get<1>(GetParam());
    wrapped_ = std::make_unique<testing::WrappingTransport>(
        *tt_.transport, [r, done = done_](std::unique_ptr<Connection> c) {
          return std::unique_ptr<Connection>(
              std::make_unique<RenumberingConnection>(std::move(c), r, done));
        });
    // The side that writes the renumbered frame uses the wrapped transport.
    Transport& naa_transport = r.who == Who::kNaa ? *wrapped_ : *tt_.transport;
    Transport& host_transport = r.who == Who::kHost ? *wrapped_ : *tt_.transport;
    auto handler = codegen::CompositeHandler::Create({&kernels_});
    ASSERT_TRUE(handler.ok()) << handler.status().ToString();
    handler_ = std::move(*handler);
    ServerOptions server_options;
    server_options.log = log_.Sink();
    auto server = NaaServer::Start(naa_transport, tt_.address, 0, *handler_, server_options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    codegen::StubOptions stub;
    stub.session.dialect = std::get<2>(GetParam());
    client_ = std::make_unique<ops::StreamOpsClient>(host_transport, tt_.address,
                                                     server_->port(), stub);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  // Checksum streams from the host (chunks from it, credits from the NAA),
  // Generate from the NAA.
  Status CallTheRoutine(bool* checksum = nullptr) {
    const Renumber& r = std::get<1>(GetParam());
    const bool sum = (r.who == Who::kHost) == (r.what == What::kChunk);
    if (checksum != nullptr) *checksum = sum;
    if (sum) {
      std::vector<uint8_t> data(kChunks * kChunk + 5, 3);
      uint64_t digest[4] = {};
      return client_->Checksum(data, digest, Deadline::After(kGuard));
    }
    std::vector<uint8_t> data;
    return client_->Generate(kChunks * kChunk + 5, &data, Deadline::After(kGuard));
  }

  testing::TestTransport tt_;
  std::shared_ptr<std::atomic<bool>> done_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<Transport> wrapped_;
  ops::StreamOpsServiceImpl kernels_;
  std::unique_ptr<codegen::CompositeHandler> handler_;
  testing::LogCapture log_;
  std::unique_ptr<NaaServer> server_;
  std::unique_ptr<ops::StreamOpsClient> client_;
};

TEST_P(StreamSequenceTest, BothSidesNameTheStream) {
  const Renumber& r = std::get<1>(GetParam());
  bool checksum = false;
  const Status st = CallTheRoutine(&checksum);
  EXPECT_TRUE(done_->load());
  ASSERT_FALSE(st.ok()) << "the call succeeded despite a " << r.name;
  if (r.who == Who::kHost) {  // the NAA reads the frame
    EXPECT_TRUE(log_.WaitFor("stream 0: " + r.expected)) << "the NAA logged:\n" << log_.All();
    EXPECT_NE(st.message().find(checksum ? "Checksum" : "Generate"), std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("mid-stream; stream 'data': "), std::string::npos)
        << st.ToString();
  } else {  // the host reads it
    EXPECT_EQ(st.code(), StatusCode::kProtocolError) << st.ToString();
    EXPECT_NE(st.message().find("stream 'data': " + r.expected), std::string::npos)
        << st.ToString();
    EXPECT_TRUE(log_.WaitFor("the connection ended mid-stream: "))
        << "the NAA logged:\n" << log_.All();
    EXPECT_NE(log_.All().find("; stream 0: "), std::string::npos) << log_.All();
  }
  // The client goes on: a fresh connection is served (renumbered once).
  const Status again = CallTheRoutine();
  EXPECT_TRUE(again.ok()) << again.ToString();
}

std::vector<Renumber> Renumbers() {
  std::vector<Renumber> cases;
  for (Who who : {Who::kHost, Who::kNaa}) {
    const std::string writer = who == Who::kHost ? "Host" : "Naa";
    cases.push_back({writer + "ChunkAhead", who, What::kChunk, +1,
                     "chunk 3 arrived where 2 was expected (chunks lost or reordered)"});
    cases.push_back({writer + "ChunkBehind", who, What::kChunk, -1,
                     "chunk 1 arrived where 2 was expected (chunks duplicated or reordered)"});
    cases.push_back({writer + "CreditAhead", who, What::kCredit, +1,
                     "credit 4 arrived where 3 was expected (credits lost or reordered)"});
    cases.push_back({writer + "CreditBehind", who, What::kCredit, -1,
                     "credit 2 arrived where 3 was expected (credits duplicated or reordered)"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    Transports, StreamSequenceTest,
    ::testing::Combine(::testing::Values("emulated", "verbs"), ::testing::ValuesIn(Renumbers()),
                       ::testing::Values(Dialect::kSpec, Dialect::kReference)),
    [](const auto& info) {
      return std::get<1>(info.param).name + "_" + std::get<0>(info.param) + "_" +
             (std::get<2>(info.param) == Dialect::kSpec ? "spec" : "reference");
    });

}  // namespace
}  // namespace naarpc
