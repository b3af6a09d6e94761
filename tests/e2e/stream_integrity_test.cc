// Streams cannot lose a chunk (docs/protocol.md 15.2-15.4): a chunk or a
// credit lost, duplicated or reordered on the wire (the emulated transport's
// fault injection) fails the call with an error that names the stream, the
// expected and the received frame, at whichever side reads the frame: the
// NAA (its log) for what the host writes, the host (the call's status) for
// what the NAA writes. Both dialects.
#include <gtest/gtest.h>

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
#include "tests/testing/log_capture.h"

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
    // The host sees the NAA close the connection mid-call.
    EXPECT_NE(st.message().find(Checksum(c) ? "Checksum" : "Generate"), std::string::npos)
        << st.ToString();
  } else {
    EXPECT_EQ(st.code(), StatusCode::kProtocolError) << st.ToString();
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << st.ToString();
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

}  // namespace
}  // namespace naarpc
