// Streams end to end (docs/protocol.md 15): a ClientSession with stream
// parameters against a NaaServer whose kernels read and write them, on both
// transports and in both dialects. Data is checked byte for byte; the NAA
// refuses any chunk that would overwrite an unconsumed slot (a protocol
// error that fails the call), so every passing case also proves the host
// never overran a window.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "naarpc/stream.h"
#include "tests/naaice/reference_peer.h"
#include "tests/testing/test_transport.h"
#include "tests/testing/withholding_connection.h"

namespace naarpc {
namespace {

constexpr auto kHangGuard = std::chrono::seconds(60);

constexpr uint8_t kChecksum = 1;   // in stream -> out: byte sum, byte count, chunks
constexpr uint8_t kTransform = 2;  // in stream -> out stream, each byte + 1
constexpr uint8_t kGenerate = 3;   // in: n -> out stream of n bytes (i * 7)
constexpr uint8_t kFailAfter = 4;  // reads `n` chunks, then fails with 0x11
constexpr uint8_t kHold = 5;       // reads one chunk, then waits for release
constexpr uint8_t kSlowChecksum = 6;  // kChecksum, 1 ms per chunk before checking it
constexpr uint8_t kTimedChecksum = 7;  // kChecksum with a (generous) time limit
constexpr uint8_t kTimedHold = 8;      // kHold with a 100 ms time limit

uint8_t Pattern(uint64_t i) { return static_cast<uint8_t>(i * 131 + (i >> 8)); }

uint64_t Get64(std::span<const std::byte> b) {
  uint64_t v = 0;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}
void Put64(std::span<std::byte> b, uint64_t v) { std::memcpy(b.data(), &v, sizeof v); }

class StreamKernels final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    switch (call.function_code) {
      case kChecksum:
      case kTimedChecksum:
        return Checksum(call, false);
      case kSlowChecksum: return Checksum(call, true);
      case kTimedHold: return Hold(call);
      case kTransform: return Transform(call);
      case kGenerate: return Generate(call);
      case kFailAfter: return FailAfter(call);
      case kHold: return Hold(call);
      default: return kNaaStatusUnknownFunction;
    }
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitHolding() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kHangGuard, [this] { return holding_; });
  }

  // params: [0] in u64 (unused / n), [1] out 24 bytes; streams: [0] in.
  // Kernels with a time limit run on a worker thread, which then pumps the
  // connection itself.
  std::chrono::milliseconds KernelTimeout(uint8_t code) const override {
    if (code == kTimedChecksum) return kHangGuard;
    if (code == kTimedHold) return std::chrono::milliseconds(100);
    return std::chrono::milliseconds::zero();
  }

 private:
  static uint8_t Checksum(NaaCall& call, bool slow) {
    NaaStream& in = *call.streams[0];
    uint64_t sum = 0, bytes = 0, chunks = 0;
    for (;;) {
      auto chunk = in.Next();
      if (!chunk.ok()) {
        call.failure_detail = chunk.status().ToString();
        return kNaaStatusKernelFailed;
      }
      if (chunk->empty()) break;
      ++chunks;
      // A slow kernel: the host keeps writing meanwhile, and must not touch
      // this slot (its bytes are checked after the pause). The pause shapes
      // the load; nothing waits on it.
      if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      for (std::byte b : *chunk) {
        // Byte for byte against the pattern: a slot overwritten before it
        // was consumed would show here.
        if (static_cast<uint8_t>(b) != Pattern(bytes)) return 0x12;
        sum += static_cast<uint8_t>(b);
        ++bytes;
      }
    }
    if (!in.ended()) return 0x13;
    auto out = call.params[1].data;
    Put64(out.subspan(0, 8), sum);
    Put64(out.subspan(8, 8), bytes);
    Put64(out.subspan(16, 8), chunks);
    return kNaaStatusSuccess;
  }
  // streams: [0] in, [1] out.
  static uint8_t Transform(NaaCall& call) {
    NaaStream& in = *call.streams[0];
    NaaStream& out = *call.streams[1];
    std::vector<std::byte> buf;
    for (;;) {
      auto chunk = in.Next();
      if (!chunk.ok()) return kNaaStatusKernelFailed;
      if (chunk->empty()) break;
      buf.assign(chunk->begin(), chunk->end());
      for (std::byte& b : buf) b = std::byte(static_cast<uint8_t>(b) + 1);
      if (!out.Write(buf).ok()) return kNaaStatusKernelFailed;
    }
    return out.Close().ok() ? kNaaStatusSuccess : kNaaStatusKernelFailed;
  }
  // params: [0] in u64 n; streams: [0] out. Zero-copy slots.
  static uint8_t Generate(NaaCall& call) {
    const uint64_t n = Get64(call.params[0].data);
    NaaStream& out = *call.streams[0];
    uint64_t i = 0;
    while (!out.ended()) {
      auto slot = out.NextSlot();
      if (!slot.ok()) return kNaaStatusKernelFailed;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(slot->size(), n - i));
      for (size_t k = 0; k < len; ++k) (*slot)[k] = std::byte(static_cast<uint8_t>((i + k) * 7));
      i += len;
      // A full chunk at the very end is followed by an empty end chunk.
      if (!out.Commit(len).ok()) return kNaaStatusKernelFailed;
    }
    return kNaaStatusSuccess;
  }
  static uint8_t FailAfter(NaaCall& call) {
    const uint64_t n = Get64(call.params[0].data);
    for (uint64_t k = 0; k < n; ++k) {
      auto chunk = call.streams[0]->Next();
      if (!chunk.ok() || chunk->empty()) break;
    }
    call.failure_detail = "failing on purpose";
    return 0x11;
  }
  uint8_t Hold(NaaCall& call) {
    (void)call.streams[0]->Next();
    std::unique_lock<std::mutex> lock(mu_);
    holding_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, kHangGuard, [this] { return released_; });
    return kNaaStatusSuccess;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false;
  bool released_ = false;
};

// Host side: input from the pattern (up to `total` bytes), output collected.
class Streams final : public StreamHandler {
 public:
  explicit Streams(uint64_t total) : total_(total) {}
  Result<size_t> Produce(size_t stream, std::span<std::byte> slot) override {
    if (stream != 0) return InvalidArgumentError("unexpected input stream");
    const size_t n = static_cast<size_t>(std::min<uint64_t>(slot.size(), total_ - produced_));
    for (size_t k = 0; k < n; ++k) slot[k] = std::byte(Pattern(produced_ + k));
    produced_ += n;
    ++produce_calls_;
    return n;
  }
  Status Consume(size_t stream, std::span<const std::byte> chunk, bool end) override {
    if (ended_) return ProtocolError("chunk after the end");
    out_stream_ = stream;
    output_.insert(output_.end(), chunk.begin(), chunk.end());
    ++chunks_out_;
    ended_ = end;
    return Status::Ok();
  }
  uint64_t total_;
  uint64_t produced_ = 0;
  uint64_t produce_calls_ = 0;
  std::vector<std::byte> output_;
  uint64_t chunks_out_ = 0;
  size_t out_stream_ = 0;
  bool ended_ = false;
};

RegionSpec Plain(std::string name, Direction d, uint64_t size) {
  RegionSpec r;
  r.name = std::move(name);
  r.direction = d;
  r.size = size;
  return r;
}
RegionSpec Stream(std::string name, Direction d, uint32_t chunk, uint32_t window,
                  uint64_t size = 0) {
  RegionSpec r = Plain(std::move(name), d, size);
  r.stream.chunk_size = chunk;
  r.stream.window = window;
  return r;
}

using Param = std::tuple<std::string, Dialect>;

class StreamTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    tt_ = testing::MakeTestTransport(std::get<0>(GetParam()));
    if (!tt_.transport) GTEST_SKIP() << tt_.unavailable;
    auto server = NaaServer::Start(*tt_.transport, tt_.address, 0, kernels_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }
  void TearDown() override {
    kernels_.Release();
    server_.reset();
  }
  Result<std::unique_ptr<ClientSession>> Open(std::vector<RegionSpec> regions) {
    ClientOptions o;
    o.dialect = std::get<1>(GetParam());
    return ClientSession::Open(*tt_.transport, tt_.address, server_->port(), std::move(regions), o,
                               Deadline::After(kHangGuard));
  }
  static std::vector<RegionSpec> ChecksumLayout(uint32_t chunk, uint32_t window) {
    return {Plain("n", Direction::kIn, 8),
            Plain("result", Direction::kOut, 24),
            RegionSpec{.name = "data",
                       .direction = Direction::kIn,
                       .stream = {.chunk_size = chunk, .window = window}}};
  }
  // Streams `total` bytes through the checksum kernel; checks the result.
  void ExpectChecksum(ClientSession& s, uint64_t total, uint32_t chunk,
                      uint8_t code = kChecksum) {
    Streams io(total);
    CallOptions opts;
    opts.streams = &io;
    Status st = s.Call(code, Deadline::After(kHangGuard), opts);
    ASSERT_TRUE(st.ok()) << st.ToString();
    uint64_t sum = 0;
    for (uint64_t i = 0; i < total; ++i) sum += Pattern(i);
    auto out = s.buffer(1);
    EXPECT_EQ(Get64(out.subspan(0, 8)), sum);
    EXPECT_EQ(Get64(out.subspan(8, 8)), total);
    // Chunks with data; a total that is a multiple of the chunk size ends
    // with an extra empty chunk, which the kernel never sees as data.
    EXPECT_EQ(Get64(out.subspan(16, 8)), (total + chunk - 1) / chunk);
    EXPECT_EQ(io.produced_, total);
    EXPECT_EQ(io.produce_calls_, total / chunk + 1);
  }

  testing::TestTransport tt_;
  StreamKernels kernels_;
  std::unique_ptr<NaaServer> server_;
};

TEST_P(StreamTest, EveryWindowFromOneUp) {
  for (uint32_t window : {1u, 2u, 3u, 8u, 62u}) {
    auto s = Open(ChecksumLayout(64, window));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectChecksum(**s, 64 * 20 + 17, 64);
  }
}

TEST_P(StreamTest, ChunkSizesThatDoAndDoNotDivideTheData) {
  auto s = Open(ChecksumLayout(4096, 4));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (uint64_t total : {uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{4097},
                         uint64_t{4096 * 10}, uint64_t{4096 * 10 + 5}, uint64_t{1} << 20}) {
    SCOPED_TRACE("total " + std::to_string(total));
    ExpectChecksum(**s, total, 4096);  // the same session, call after call
  }
  EXPECT_EQ((*s)->calls_completed(), 7u);
}

TEST_P(StreamTest, SlowKernelNeverHasASlotOverwritten) {
  // Window 2, 200 chunks: the host waits on credits almost every time.
  auto s = Open(ChecksumLayout(1024, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectChecksum(**s, 1024 * 200 + 100, 1024, kSlowChecksum);
}

TEST_P(StreamTest, KernelOnAWorkerThreadPumpsTheStreams) {
  // A kernel with a time limit runs on the connection's worker thread.
  auto s = Open(ChecksumLayout(4096, 3));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 0; i < 3; ++i) ExpectChecksum(**s, 4096 * 50 + i, 4096, kTimedChecksum);
}

TEST_P(StreamTest, KernelTimeoutMidStreamEndsTheSession) {
  auto s = Open(ChecksumLayout(256, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Streams io(256 * 100);
  CallOptions opts;
  opts.streams = &io;
  Status st = (*s)->Call(kTimedHold, Deadline::After(kHangGuard), opts);
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), kNaaStatusKernelTimeout);
  EXPECT_EQ((*s)->state(), CommState::kError);
  kernels_.Release();  // the abandoned kernel returns; its stream calls fail
  // The NAA serves new sessions.
  auto again = Open(ChecksumLayout(256, 2));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectChecksum(**again, 256 * 3, 256);
}

// The NAA closes the connection right after its kernel-timeout status
// (docs/protocol.md 7.4). A host that polls late gets the status and the
// flushes of its other receives in one batch: the status decides the call.
TEST_P(StreamTest, KernelTimeoutStatusInOneBatchWithTheFlushesDecidesTheCall) {
  testing::WithholdingConnection* withholding = nullptr;
  testing::WrappingTransport wrapping(*tt_.transport, [&](std::unique_ptr<Connection> c) {
    auto w = std::make_unique<testing::WithholdingConnection>(std::move(c));
    withholding = w.get();
    return std::unique_ptr<Connection>(std::move(w));
  });
  ClientOptions o;
  o.dialect = std::get<1>(GetParam());
  auto s = ClientSession::Open(wrapping, tt_.address, server_->port(), ChecksumLayout(256, 2), o,
                               Deadline::After(kHangGuard));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_NE(withholding, nullptr);
  withholding->Arm();
  Streams io(256 * 100);
  CallOptions opts;
  opts.streams = &io;
  Status st = (*s)->Call(kTimedHold, Deadline::After(kHangGuard), opts);
  EXPECT_TRUE(withholding->handed_answer_with_flush());
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), kNaaStatusKernelTimeout) << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
}

TEST_P(StreamTest, NaaShutdownMidStreamIsReportedToTheHost) {
  auto s = Open(ChecksumLayout(256, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Streams io(256 * 100);
  CallOptions opts;
  opts.streams = &io;
  Status st;
  std::thread caller([&] { st = (*s)->Call(kHold, Deadline::After(kHangGuard), opts); });
  ASSERT_TRUE(kernels_.WaitHolding()) << "the kernel never got a chunk";
  // Shutdown disconnects every connection, then waits for the kernel.
  std::thread shutdown([&] { server_->Shutdown(); });
  caller.join();
  kernels_.Release();
  shutdown.join();
  EXPECT_TRUE(st.code() == StatusCode::kDisconnected || st.code() == StatusCode::kTransportError)
      << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
}

TEST_P(StreamTest, EmptyStream) {
  auto s = Open(ChecksumLayout(128, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectChecksum(**s, 0, 128);
}

TEST_P(StreamTest, StreamsOnlyRoutine) {
  // No ordinary parameter at all: in the reference dialect no entry lacks
  // the internal bit, and the NAA still tells the dialect (docs/protocol.md
  // 15.1).
  auto s = Open({Stream("in", Direction::kIn, 512, 2), Stream("out", Direction::kOut, 512, 2)});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (uint64_t total : {uint64_t{0}, uint64_t{512}, uint64_t{5000}}) {
    SCOPED_TRACE("total " + std::to_string(total));
    Streams io(total);
    CallOptions opts;
    opts.streams = &io;
    Status st = (*s)->Call(kTransform, Deadline::After(kHangGuard), opts);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(io.output_.size(), total);
    for (uint64_t i = 0; i < total; ++i) {
      ASSERT_EQ(static_cast<uint8_t>(io.output_[i]), uint8_t(Pattern(i) + 1)) << "byte " << i;
    }
  }
}

TEST_P(StreamTest, DataMuchLargerThanTheRing) {
  // 64 MiB through a 256 KiB ring (4 x 64 KiB) on each side.
  auto s = Open(ChecksumLayout(64 << 10, 4));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectChecksum(**s, uint64_t{64} << 20, 64 << 10);
}

TEST_P(StreamTest, InputAndOutputStreamsAtOnce) {
  auto s = Open({Plain("unused", Direction::kIn, 8),
                 Stream("in", Direction::kIn, 1000, 3),
                 Stream("out", Direction::kOut, 700, 2)});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (uint64_t total : {uint64_t{0}, uint64_t{700}, uint64_t{123457}}) {
    SCOPED_TRACE("total " + std::to_string(total));
    Streams io(total);
    CallOptions opts;
    opts.streams = &io;
    Status st = (*s)->Call(kTransform, Deadline::After(kHangGuard), opts);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(io.output_.size(), total);
    for (uint64_t i = 0; i < total; ++i) {
      ASSERT_EQ(static_cast<uint8_t>(io.output_[i]), uint8_t(Pattern(i) + 1)) << "byte " << i;
    }
    EXPECT_TRUE(io.ended_);
    EXPECT_EQ(io.out_stream_, 1u);  // stream indexes count input and output streams
    EXPECT_EQ(io.chunks_out_, total / 700 + 1);
  }
}

TEST_P(StreamTest, OutputStreamOnly) {
  auto s = Open({Plain("n", Direction::kIn, 8),
                 Stream("out", Direction::kOut, 512, 5)});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (uint64_t n : {uint64_t{0}, uint64_t{512}, uint64_t{512 * 7 + 3}, uint64_t{1} << 20}) {
    SCOPED_TRACE("n " + std::to_string(n));
    Put64((*s)->buffer(0), n);
    Streams io(0);
    CallOptions opts;
    opts.streams = &io;
    Status st = (*s)->Call(kGenerate, Deadline::After(kHangGuard), opts);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(io.output_.size(), n);
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(static_cast<uint8_t>(io.output_[i]), uint8_t(i * 7)) << "byte " << i;
    }
    EXPECT_EQ(io.chunks_out_, n / 512 + 1);
  }
}

TEST_P(StreamTest, KernelErrorMidStreamStopsTheHostAndKeepsTheSession) {
  auto s = Open(ChecksumLayout(256, 4));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Put64((*s)->buffer(0), 3);  // the kernel reads 3 chunks, then fails
  constexpr uint64_t kTotal = 256 * 1000;
  Streams io(kTotal);
  CallOptions opts;
  opts.streams = &io;
  Status st = (*s)->Call(kFailAfter, Deadline::After(kHangGuard), opts);
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), 0x11);
  // The stop credit ended the input early: far from all 1000 chunks were
  // produced (at most what was on its way: the window, plus one per credit).
  EXPECT_LT(io.produced_, kTotal / 4);
  // The session goes on: the next call streams everything.
  EXPECT_EQ((*s)->state(), CommState::kFinished);
  ExpectChecksum(**s, 256 * 9 + 1, 256);
}

TEST_P(StreamTest, UnknownFunctionDrainsTheStreams) {
  auto s = Open(ChecksumLayout(256, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Streams io(256 * 50);
  CallOptions opts;
  opts.streams = &io;
  Status st = (*s)->Call(99, Deadline::After(kHangGuard), opts);
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), kNaaStatusUnknownFunction);
  ExpectChecksum(**s, 1000, 256);
}

TEST_P(StreamTest, DeadlineMidStreamFailsTheSessionNamingTheStream) {
  auto s = Open(ChecksumLayout(256, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Streams io(256 * 100);
  CallOptions opts;
  opts.streams = &io;
  // The kernel takes one chunk and holds it: the window fills, the host
  // waits for credits until its deadline.
  Result<bool> holding = false;
  Status st;
  {
    std::thread release([&] { holding = kernels_.WaitHolding(); });
    st = (*s)->Call(kHold, Deadline::After(std::chrono::milliseconds(300)), opts);
    release.join();
  }
  ASSERT_TRUE(*holding) << "the kernel never got a chunk";
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("mid-stream"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("stream 'data'"), std::string::npos) << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
  EXPECT_LE(io.produced_, 256u * 3);  // the window (2) and the held chunk
}

TEST_P(StreamTest, BadStreamSpecsAreRefusedByName) {
  auto bad = [&](StreamSpec spec, Direction d, uint64_t size = 0) {
    auto s = Open({Plain("n", Direction::kIn, 8), Plain("r", Direction::kOut, 8),
                   Stream("s", d, spec.chunk_size, spec.window, size)});
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    return s.status().message();
  };
  EXPECT_NE(bad({.chunk_size = 64, .window = 0}, Direction::kIn).find("'s': stream window 0"),
            std::string::npos);
  EXPECT_NE(bad({.chunk_size = 64, .window = 65}, Direction::kIn).find("window 65"),
            std::string::npos);
  EXPECT_NE(bad({.chunk_size = (1u << 23) + 1, .window = 1}, Direction::kIn).find("chunk size"),
            std::string::npos);
  EXPECT_NE(bad({.chunk_size = 64, .window = 2}, Direction::kInOut).find("input or an output"),
            std::string::npos);
  EXPECT_NE(bad({.chunk_size = 64, .window = 2}, Direction::kIn, 100).find("ring"),
            std::string::npos);
  // The windows of a routine add up to at most 62.
  auto s = Open({Plain("r", Direction::kOut, 8),
                 Stream("a", Direction::kIn, 64, 40),
                 Stream("b", Direction::kIn, 64, 23)});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("add up to 63"), std::string::npos) << s.status().ToString();
  // No handler for a session with streams, or one for a session without.
  auto ok = Open(ChecksumLayout(64, 2));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->Call(kChecksum, Deadline::After(kHangGuard)).code(),
            StatusCode::kInvalidArgument);
}

TEST_P(StreamTest, APeerWithoutStreamsIsDetectedAtTheMrsp) {
  // The NAAICE reference NAA reads a stream entry's internal bit and does
  // not advertise it (docs/protocol.md 15.5): the host refuses the session
  // at once, naming the cause; nothing hangs and no call is made.
  // (Its MRSP is the same in both dialects: the spec dialect's metadata
  // region is one more ordinary entry to it.)
  auto ref = naaice::ReferenceNaa::Start(*tt_.transport, tt_.address, 0);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  ClientOptions o;
  o.dialect = std::get<1>(GetParam());
  auto s = ClientSession::Open(*tt_.transport, tt_.address, (*ref)->port(),
                               ChecksumLayout(256, 2), o, Deadline::After(kHangGuard));
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError) << s.status().ToString();
  EXPECT_NE(s.status().message().find("does not support naarpc streams"), std::string::npos)
      << s.status().ToString();
  EXPECT_EQ((*ref)->calls_answered() + (*ref)->calls_ignored(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, StreamTest,
    ::testing::Combine(::testing::Values("emulated", "verbs"),
                       ::testing::Values(Dialect::kSpec, Dialect::kReference)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" +
             (std::get<1>(info.param) == Dialect::kSpec ? "spec" : "reference");
    });

}  // namespace
}  // namespace naarpc
