// Streams through the generated API (docs/streams.md, docs/idl.md
// "Streams"): generated clients (the span/vector form, sources and sinks,
// the zero-copy call, async) against generated skeletons whose kernels read
// and write the streams, on both transports and in both dialects. Every
// element is checked.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "naarpc/naarpc.h"
#include "services/stream/stream_service.h"
#include "tests/e2e/stream_stubs.naa.h"
#include "tests/testing/peer_process.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

namespace ops = services::stream;
namespace sweep = testing::streams;

constexpr auto kHangGuard = std::chrono::seconds(60);

uint32_t Value(uint64_t i) { return static_cast<uint32_t>(i * 2654435761u + 17); }

std::vector<uint32_t> Values(size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Value(i);
  return v;
}

// Kernels of stream_stubs.naa.yaml.
class SweepKernels final : public sweep::SweepService {
 public:
  sweep::SweepError SumW1(const NaaCall&, codegen::StreamReader<uint32_t>& data,
                          std::span<uint64_t> result) override {
    return Sum(data, result);
  }
  sweep::SweepError SumW2(const NaaCall&, codegen::StreamReader<uint32_t>& data,
                          std::span<uint64_t> result) override {
    return Sum(data, result);
  }
  sweep::SweepError SumW62(const NaaCall&, codegen::StreamReader<uint32_t>& data,
                           std::span<uint64_t> result) override {
    return Sum(data, result);
  }
  sweep::SweepError Echo(const NaaCall&, codegen::StreamReader<uint16_t>& data,
                         codegen::StreamWriter<uint16_t>& out) override {
    for (;;) {
      auto chunk = data.Next();
      if (!chunk.ok()) return {};  // the skeleton reports the stream's error
      if (chunk->empty()) break;
      if (!out.Write(*chunk).ok()) return {};
    }
    return out.Close().ok() ? sweep::SweepError::kOk : sweep::SweepError{};
  }
  sweep::SweepError Hold(const NaaCall&, codegen::StreamReader<uint8_t>& data,
                         uint8_t& r) override {
    (void)data.Next();
    std::unique_lock<std::mutex> lock(mu_);
    holding_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, kHangGuard, [this] { return released_; });
    r = 1;
    return sweep::SweepError::kOk;
  }

  bool WaitHolding() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kHangGuard, [this] { return holding_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  static sweep::SweepError Sum(codegen::StreamReader<uint32_t>& data,
                               std::span<uint64_t> result) {
    uint64_t sum = 0, count = 0, chunks = 0;
    for (;;) {
      auto chunk = data.Next();  // in place, whole elements
      if (!chunk.ok()) return {};
      if (chunk->empty()) break;
      for (uint32_t v : *chunk) {
        if (v != Value(count)) return sweep::SweepError{0x20};  // out of order or overwritten
        sum += v;
        ++count;
      }
      ++chunks;
    }
    result[0] = sum;
    result[1] = count;
    result[2] = chunks;
    return sweep::SweepError::kOk;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false;
  bool released_ = false;
};

using Param = std::tuple<std::string, Dialect>;

class StreamStubTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    tt_ = testing::MakeTestTransport(std::get<0>(GetParam()));
    if (!tt_.transport) GTEST_SKIP() << tt_.unavailable;
    auto handler = codegen::CompositeHandler::Create({&ops_kernels_, &sweep_kernels_});
    ASSERT_TRUE(handler.ok()) << handler.status().ToString();
    handler_ = std::move(*handler);
    ServerOptions server_options;
    server_options.stats = naa_stats_;
    auto server = NaaServer::Start(*tt_.transport, tt_.address, 0, *handler_, server_options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    codegen::StubOptions options;
    options.stats = host_stats_;
    options.session.dialect = std::get<1>(GetParam());
    ops_ = std::make_unique<ops::StreamOpsClient>(*tt_.transport, tt_.address, server_->port(),
                                                  options);
    sweep_ = std::make_unique<sweep::SweepClient>(*tt_.transport, tt_.address, server_->port(),
                                                  options);
  }
  void TearDown() override {
    sweep_kernels_.Release();
    ops_.reset();
    sweep_.reset();
    server_.reset();
  }
  static Deadline Guard() { return Deadline::After(kHangGuard); }

  // The side's snapshot of `routine` (one peer each here).
  static RoutineStats::Snapshot StatsOf(StatsRegistry& registry, const std::string& routine) {
    for (auto& s : registry.Take()) {
      if (s.routine == routine) return s;
    }
    return {};
  }

  testing::TestTransport tt_;
  std::shared_ptr<StatsRegistry> host_stats_ = std::make_shared<StatsRegistry>();
  std::shared_ptr<StatsRegistry> naa_stats_ = std::make_shared<StatsRegistry>();
  ops::StreamOpsServiceImpl ops_kernels_;
  SweepKernels sweep_kernels_;
  std::unique_ptr<codegen::CompositeHandler> handler_;
  std::unique_ptr<NaaServer> server_;
  std::unique_ptr<ops::StreamOpsClient> ops_;
  std::unique_ptr<sweep::SweepClient> sweep_;
};

TEST_P(StreamStubTest, EveryWindowAndChunkSizesThatDoAndDoNotDivideTheData) {
  using Sum = Status (sweep::SweepClient::*)(std::span<const uint32_t>, std::span<uint64_t>,
                                             Deadline);
  struct Routine {
    const char* name;
    Sum sum;
    size_t chunk;  // elements
  };
  for (const Routine& r : {Routine{"SumW1", &sweep::SweepClient::SumW1, 3},
                           Routine{"SumW2", &sweep::SweepClient::SumW2, 5},
                           Routine{"SumW62", &sweep::SweepClient::SumW62, 64}}) {
    // Empty, shorter than a chunk, around one chunk, many chunks.
    for (size_t n : {size_t{0}, size_t{1}, r.chunk - 1, r.chunk, r.chunk + 1, r.chunk * 10,
                     r.chunk * 10 + 2, r.chunk * 200 + 1}) {
      SCOPED_TRACE(std::string(r.name) + ", " + std::to_string(n) + " elements");
      const std::vector<uint32_t> data = Values(n);
      uint64_t result[3] = {9, 9, 9};
      Status st = (sweep_.get()->*r.sum)(data, std::span<uint64_t>(result), Guard());
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(result[0], std::accumulate(data.begin(), data.end(), uint64_t{0}));
      EXPECT_EQ(result[1], n);
      EXPECT_EQ(result[2], (n + r.chunk - 1) / r.chunk);  // chunks with data
    }
  }
}

TEST_P(StreamStubTest, TransformStreamsItsOutputBack) {
  constexpr size_t kChunk = 16384;
  for (size_t n : {size_t{0}, size_t{1}, kChunk, kChunk * 3 + 5}) {
    SCOPED_TRACE(std::to_string(n) + " elements");
    const std::vector<uint32_t> data = Values(n);
    std::vector<uint32_t> out = {1, 2, 3};  // cleared by the stub
    Status st = ops_->Transform(3, data, &out, Guard());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(out.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], data[i] * 3 + 1) << i;
  }
}

// A stream's bytes count as what its chunks carried (its ring does not),
// on both sides (docs/operating.md).
TEST_P(StreamStubTest, StatisticsCountTheStreamedBytes) {
  constexpr size_t kElements = 16384 * 3 + 5;
  const std::vector<uint32_t> data = Values(kElements);
  std::vector<uint32_t> out;
  Status st = ops_->Transform(3, data, &out, Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  const uint64_t streamed = kElements * sizeof(uint32_t);
  const RoutineStats::Snapshot host = StatsOf(*host_stats_, "StreamOps.Transform");
  EXPECT_EQ(host.completed, 1u);
  EXPECT_EQ(host.bytes_sent, sizeof(uint32_t) + streamed);  // factor, then the data stream
  EXPECT_EQ(host.bytes_received, streamed);                 // the out stream
  const RoutineStats::Snapshot naa = StatsOf(*naa_stats_, "StreamOps.Transform");
  EXPECT_EQ(naa.completed, 1u);
  EXPECT_EQ(naa.bytes_received, sizeof(uint32_t) + streamed);
  EXPECT_EQ(naa.bytes_sent, streamed);
}

TEST_P(StreamStubTest, GeneratorSourceAndCallbackSink) {
  // 10 chunks and a bit, produced on demand; output chunks arrive in order,
  // `end` on the last.
  constexpr uint64_t kTotal = 16384 * 10 + 77;
  uint64_t produced = 0;
  codegen::GeneratorSource<uint32_t> source([&](std::span<uint32_t> chunk) -> Result<size_t> {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), kTotal - produced));
    for (size_t i = 0; i < n; ++i) chunk[i] = Value(produced + i);
    produced += n;
    return n;
  });
  uint64_t received = 0, chunks = 0, ends = 0;
  bool in_order = true;
  codegen::CallbackSink<uint32_t> sink([&](std::span<const uint32_t> chunk, bool end) {
    for (uint32_t v : chunk) in_order &= v == Value(received++) * 5 + 1;
    ++chunks;
    ends += end;
    return Status::Ok();
  });
  Status st = ops_->Transform(5, source, sink, Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(produced, kTotal);
  EXPECT_EQ(received, kTotal);
  EXPECT_TRUE(in_order);
  EXPECT_EQ(chunks, 11u);
  EXPECT_EQ(ends, 1u);
}

TEST_P(StreamStubTest, RechunkedOutputWithWindowOne) {
  // Echo: 7 elements a chunk in (window 1), 4 out (window 3).
  for (size_t n : {size_t{0}, size_t{3}, size_t{4}, size_t{7}, size_t{28}, size_t{1001}}) {
    SCOPED_TRACE(std::to_string(n) + " elements");
    std::vector<uint16_t> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint16_t>(i * 31 + 1);
    std::vector<uint16_t> out;
    Status st = sweep_->Echo(data, &out, Guard());
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(out, data);
  }
}

TEST_P(StreamStubTest, ChecksumOfAFile) {
  char path[] = "/tmp/naarpc_stream_stub_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> bytes((1 << 20) + 3);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  auto source = codegen::FileSource<uint8_t>::Open(path);
  ::unlink(path);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  uint64_t digest[4] = {};
  Status st = ops_->Checksum(*source, digest, Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(digest[0], std::accumulate(bytes.begin(), bytes.end(), uint64_t{0}));
  EXPECT_EQ(digest[1], bytes.size());
  EXPECT_EQ(digest[2], bytes.size() / 65536 + 1);
  EXPECT_EQ(digest[3], ops::Fnv1a(ops::kFnvOffset, bytes));
}

TEST(StreamSources, AFileThatEndsInsideAnElementIsAnError) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "abcdef", 6), 6);  // one u32 and a half
  ::close(fds[1]);
  codegen::FileSource<uint32_t> source(fds[0]);
  uint32_t chunk[4];
  Result<size_t> n = source.Read(chunk);
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument) << n.status().ToString();
  EXPECT_NE(n.status().message().find("ends inside an element"), std::string::npos);
  ::close(fds[0]);
}

TEST_P(StreamStubTest, OutputOnlyStreamAndTheZeroCopyCall) {
  for (uint64_t count : {uint64_t{0}, uint64_t{65536}, uint64_t{65536 * 2 + 7}}) {
    SCOPED_TRACE(std::to_string(count) + " bytes");
    std::vector<uint8_t> data;
    Status st = ops_->Generate(count, &data, Guard());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(data.size(), count);
    for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(data[i], ops::GeneratedByte(i)) << i;
  }
  // One connection, several calls: inputs in place, streams to Invoke().
  auto call = ops_->NewGenerateCall(Guard());
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  for (uint64_t count : {uint64_t{10}, uint64_t{200000}}) {
    call->count()[0] = count;
    uint64_t seen = 0;
    bool ok = true;
    codegen::CallbackSink<uint8_t> sink([&](std::span<const uint8_t> chunk, bool) {
      for (uint8_t b : chunk) ok &= b == ops::GeneratedByte(seen++);
      return Status::Ok();
    });
    Status st = call->Invoke(sink, Guard());
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(seen, count);
    EXPECT_TRUE(ok);
  }
}

TEST_P(StreamStubTest, KernelErrorMidStream) {
  // The kernel fails after 1 MiB of 8 MiB: the host stops producing, gets
  // the kernel's status by name, and the client goes on.
  std::vector<uint8_t> data(8 << 20, 7);
  uint64_t counts[256] = {};
  Status st = ops_->Histogram(1 << 20, data, counts, Guard());
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), 0x10);
  EXPECT_NE(st.message().find("StreamOps.Histogram: NAA status 0x10 LIMIT_EXCEEDED"),
            std::string::npos)
      << st.ToString();
  EXPECT_EQ(ops::StreamOpsErrorFromStatus(st), ops::StreamOpsError::kLimitExceeded);
  // The same routine again, within the limit.
  std::vector<uint8_t> small(3000);
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<uint8_t>(i);
  st = ops_->Histogram(0, small, counts, Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int b = 0; b < 256; ++b) EXPECT_EQ(counts[b], b < 184 ? 12u : 11u) << b;
}

TEST_P(StreamStubTest, SourceErrorFailsTheCall) {
  int calls = 0;
  codegen::GeneratorSource<uint8_t> source([&](std::span<uint8_t> chunk) -> Result<size_t> {
    if (++calls == 3) return UnavailableError("the disk went away");
    return chunk.size();
  });
  uint64_t digest[4] = {};
  Status st = ops_->Checksum(source, digest, Guard());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("the disk went away"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("StreamOps.Checksum"), std::string::npos) << st.ToString();
  // A new connection serves the next call.
  const std::vector<uint8_t> data(100, 1);
  st = ops_->Checksum(data, digest, Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(digest[1], 100u);
}

TEST_P(StreamStubTest, DeadlineMidStream) {
  // The kernel holds its first chunk: the window fills and the host waits
  // for credits until the deadline.
  // The session is opened first, so the call's deadline covers the stream
  // alone, not connecting (slow on Soft-RoCE under TCG) and the MRSP.
  {
    auto warm = sweep_->NewHoldCall(Guard());
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  }
  std::vector<uint8_t> data(256 * 100, 1);
  uint8_t r = 0;
  bool holding = false;
  Status st;
  {
    std::thread watch([&] { holding = sweep_kernels_.WaitHolding(); });
    st = sweep_->Hold(data, &r, Deadline::After(std::chrono::milliseconds(1000)));
    watch.join();
  }
  ASSERT_TRUE(holding) << "the kernel never got a chunk";
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("Sweep.Hold"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("stream 'data'"), std::string::npos) << st.ToString();
  sweep_kernels_.Release();
  // Another routine of the same client goes on.
  uint64_t result[3] = {};
  const std::vector<uint32_t> values = Values(10);
  st = sweep_->SumW2(values, result, Guard());
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(result[1], 10u);
}

TEST_P(StreamStubTest, NaaProcessKilledMidStream) {
  // The example server (StreamOps in another process) is killed with
  // SIGKILL while the host streams into it: the call fails as a lost
  // connection, within its deadline, never hangs.
  auto naa = testing::PeerProcess::Start(
      "../../examples/naa_server",
      {"--transport=" + std::get<0>(GetParam()), "--address=" + tt_.address, "--port=0"});
  ASSERT_TRUE(naa);
  std::string line;
  ASSERT_TRUE(naa->ExpectPrefix("naa_server: serving", line));
  const size_t colon = line.find(tt_.address + ":");
  ASSERT_NE(colon, std::string::npos) << line;
  const uint16_t port =
      static_cast<uint16_t>(std::stoul(line.substr(colon + tt_.address.size() + 1)));
  codegen::StubOptions options;
  options.session.dialect = std::get<1>(GetParam());
  ops::StreamOpsClient client(*tt_.transport, tt_.address, port, options);
  // Checksum's window is 8 chunks: by the 18th the NAA has consumed and
  // credited chunks, so the stream is in full flow when the kill lands.
  int produced = 0;
  codegen::GeneratorSource<uint8_t> endless([&](std::span<uint8_t> chunk) -> Result<size_t> {
    if (++produced == 18) naa->Kill(SIGKILL);
    std::memset(chunk.data(), produced & 0xff, chunk.size());
    return chunk.size();
  });
  uint64_t digest[4] = {};
  const Status st = client.Checksum(endless, digest, Guard());
  EXPECT_EQ(naa->Wait(), 128 + SIGKILL);
  EXPECT_GE(produced, 18);
  EXPECT_TRUE(st.code() == StatusCode::kDisconnected ||
              st.code() == StatusCode::kTransportError)
      << st.ToString();
  EXPECT_NE(st.message().find("StreamOps.Checksum"), std::string::npos) << st.ToString();
}

TEST_P(StreamStubTest, AsyncForms) {
  const std::vector<uint8_t> a(100000, 2), b(70000, 3);
  uint64_t da[4] = {}, db[4] = {};
  std::future<Status> fa = ops_->ChecksumAsync(a, da, Guard());
  std::future<Status> fb = ops_->ChecksumAsync(b, db, Guard());
  // The source/sink form with a callback.
  const std::vector<uint32_t> in = Values(40000);
  codegen::SpanSource<uint32_t> in_source(in);
  std::vector<uint32_t> out;
  codegen::VectorSink<uint32_t> sink(&out);
  std::promise<Status> done;
  ops_->TransformAsync(2, in_source, sink, [&](Status s) { done.set_value(std::move(s)); },
                       Guard());
  ASSERT_TRUE(fa.get().ok());
  ASSERT_TRUE(fb.get().ok());
  Status st = done.get_future().get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(da[0], 200000u);
  EXPECT_EQ(db[0], 210000u);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] * 2 + 1) << i;
}

// Push and pull from other threads: a PipeSource written and a PipeSink
// read by threads of the caller's while an Async call runs.
// Transform through two pipes: this thread writes pieces of odd sizes into
// the input, a reader thread takes the output. `late_reader`: the reader
// starts only once the first output chunk waits for it (a Next() that comes
// after the chunk must still return it). Every element is checked.
void PipesFromOtherThreads(ops::StreamOpsClient& client, Deadline deadline, bool late_reader) {
  codegen::PipeSource<uint32_t> in(deadline);
  codegen::PipeSink<uint32_t> out(deadline);
  std::future<Status> call = client.TransformAsync(7, in, out, deadline);
  constexpr uint64_t kTotal = 16384 * 5 + 9;
  uint64_t received = 0;
  uint64_t first_wrong = UINT64_MAX;
  Status read_status;
  auto read = [&] {
    for (;;) {
      auto chunk = out.Next();  // in place in the host's ring
      if (!chunk.ok()) {
        read_status = chunk.status();
        return;
      }
      if (chunk->empty()) return;
      for (uint32_t v : *chunk) {
        if (v != Value(received) * 7 + 1 && first_wrong == UINT64_MAX) first_wrong = received;
        ++received;
      }
    }
  };
  bool waited = true;
  std::thread reader([&] {
    // A late reader asks for the first chunk only once it waits in the pipe.
    if (late_reader) waited = out.WaitForChunk();
    read();
  });
  // Pieces of odd sizes, each reused once Write returns.
  std::vector<uint32_t> piece;
  for (uint64_t sent = 0; sent < kTotal;) {
    piece.resize(std::min<uint64_t>(1000 + sent % 3777, kTotal - sent));
    for (size_t i = 0; i < piece.size(); ++i) piece[i] = Value(sent + i);
    Status st = in.Write(piece);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) break;
    sent += piece.size();
  }
  in.Close();
  reader.join();
  Status st = call.get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(waited);
  EXPECT_TRUE(read_status.ok()) << read_status.ToString();
  EXPECT_EQ(received, kTotal);
  EXPECT_EQ(first_wrong, UINT64_MAX) << "element " << first_wrong << " is wrong";
}

TEST_P(StreamStubTest, PipesFromOtherThreads) {
  PipesFromOtherThreads(*ops_, Guard(), /*late_reader=*/false);
  PipesFromOtherThreads(*ops_, Guard(), /*late_reader=*/true);
}

// The pipe hand-over many times over (it once lost a chunk with an OK
// status in one run of dozens on a loaded machine): early and late readers.
TEST_P(StreamStubTest, PipesManyTimes) {
  // The Soft-RoCE guest runs on an emulated CPU: fewer rounds there.
  const int rounds = std::get<0>(GetParam()) == "verbs" ? 20 : 300;
  for (int i = 0; i < rounds; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    PipesFromOtherThreads(*ops_, Guard(), /*late_reader=*/i % 2 == 1);
    if (HasFatalFailure() || HasFailure()) return;
  }
}

TEST_P(StreamStubTest, APipeNeverWaitsForACallThatEnded) {
  // The kernel fails after 1 MiB: the writer's next Write fails instead of
  // waiting for a call that no longer reads.
  codegen::PipeSource<uint8_t> in(Guard());
  uint64_t counts[256] = {};
  std::future<Status> call = ops_->HistogramAsync(1 << 20, in, counts, Guard());
  const std::vector<uint8_t> piece(64 << 10, 5);
  Status write;
  for (int i = 0; i < 128 && write.ok(); ++i) write = in.Write(piece);
  EXPECT_EQ(write.code(), StatusCode::kFailedPrecondition) << write.ToString();
  EXPECT_EQ(ops::StreamOpsErrorFromStatus(call.get()), ops::StreamOpsError::kLimitExceeded);
  // Nor for a call that never started (nothing listens on the port).
  ops::StreamOpsClient nowhere(*tt_.transport, tt_.address, 1);
  codegen::PipeSource<uint8_t> in2;
  std::future<Status> never = nowhere.ChecksumAsync(in2, counts, Guard());
  EXPECT_FALSE(in2.Write(piece).ok());
  EXPECT_FALSE(never.get().ok());
  // A reader that stops fails the call.
  codegen::PipeSink<uint8_t> out(Guard());
  std::future<Status> gen = ops_->GenerateAsync(1 << 20, out, Guard());
  auto first = out.Next();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)[1], ops::GeneratedByte(1));
  out.Stop();
  Status st = gen.get();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("the reader stopped"), std::string::npos) << st.ToString();
}

// A host that does not use the generated stub: the skeleton checks its
// streams against the IDL before the kernel runs, and the elements of every
// chunk.
TEST_P(StreamStubTest, TheSkeletonChecksTheStreams) {
  class Bytes final : public StreamHandler {
   public:
    // The bytes of Values(), cut after `n` bytes.
    explicit Bytes(size_t n) : values_(Values(n / 4 + 1)), n_(n) {}
    Result<size_t> Produce(size_t, std::span<std::byte> slot) override {
      const size_t n = std::min(slot.size(), n_ - done_);
      std::memcpy(slot.data(), reinterpret_cast<const std::byte*>(values_.data()) + done_, n);
      done_ += n;
      return n;
    }
    Status Consume(size_t, std::span<const std::byte>, bool) override { return Status::Ok(); }

   private:
    std::vector<uint32_t> values_;
    size_t n_, done_ = 0;
  };
  const auto open = [&](uint32_t chunk, uint32_t window) {
    ClientOptions o;
    o.dialect = std::get<1>(GetParam());
    std::vector<RegionSpec> regions(2);
    regions[0] = {.name = "data", .direction = Direction::kIn,
                  .stream = {.chunk_size = chunk, .window = window}};
    regions[1] = {.name = "result", .direction = Direction::kOut, .size = 24};
    return ClientSession::Open(*tt_.transport, tt_.address, server_->port(), regions, o, Guard());
  };
  const auto call = [&](ClientSession& s, size_t bytes) {
    Bytes io(bytes);
    CallOptions opts;
    opts.streams = &io;
    return s.Call(sweep::SweepClient::kSumW2FunctionCode, Guard(), opts);
  };
  // SumW2 is 5 u32 a chunk (20 bytes), window 2.
  for (auto [chunk, window] : {std::pair{16u, 2u}, std::pair{20u, 3u}}) {
    auto s = open(chunk, window);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Status st = call(**s, 100);
    EXPECT_EQ(st.wire_code(), kNaaStatusBadRegionLayout) << st.ToString();
  }
  // The right layout, but a chunk that is not whole u32 elements.
  auto s = open(20, 2);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(call(**s, 40).ok());
  Status st = call(**s, 43);
  EXPECT_EQ(st.wire_code(), kNaaStatusBadRegionLayout) << st.ToString();
  st = call(**s, 4);  // the connection goes on
  EXPECT_TRUE(st.ok()) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Transports, StreamStubTest,
    ::testing::Combine(::testing::Values("emulated", "verbs"),
                       ::testing::Values(Dialect::kSpec, Dialect::kReference)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" +
             (std::get<1>(info.param) == Dialect::kSpec ? "spec" : "reference");
    });

}  // namespace
}  // namespace naarpc
