// The stream rules both roles apply (docs/protocol.md 15.2-15.4): every
// broken rule is an error naming the stream, the expected and the received
// frame.
#include "runtime/engine/stream_rules.h"
#include "runtime/wire/stream_frame.h"

#include <gtest/gtest.h>

#include <string>

namespace naarpc::internal {
namespace {

constexpr uint32_t kChunk = 4096;
constexpr uint32_t kWindow = 4;

StreamFrame Chunk(uint64_t sequence, bool end = false) {
  return *DecodeStreamFrame(EncodeStreamChunk(0, sequence, end));
}
StreamFrame Credit(uint64_t consumed, bool stop = false) {
  return *DecodeStreamFrame(EncodeStreamCredit(0, consumed, stop));
}

void ExpectError(const Status& s, std::initializer_list<const char*> parts) {
  EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s.ToString();
  for (const char* p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.ToString();
  }
}

TEST(StreamInbound, TakesChunksInOrderAndCountsTheTotals) {
  StreamInbound in({"stream 'data'", kChunk, kWindow});
  for (uint64_t k = 0; k < 10; ++k) {
    Result<uint32_t> n = in.OnChunk(Chunk(k), kChunk);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, kChunk);
    // Consumed and credited before the next: credits count 1, 2, 3, ...
    EXPECT_EQ(in.TakeCredit(5, false), EncodeStreamCredit(5, k + 1, false));
  }
  Result<uint32_t> end = in.OnChunk(Chunk(10, true), 7);
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(*end, 7u);
  EXPECT_TRUE(in.ended());
  EXPECT_EQ(in.received(), 11u);
  EXPECT_EQ(in.bytes(), 10u * kChunk + 7);
  EXPECT_EQ(in.Totals(), "11 chunk(s), 40967 bytes received, ended");
  // A full end chunk and an empty one are both ends.
  in.Reset();
  EXPECT_TRUE(in.OnChunk(Chunk(0, true), kChunk).ok());
  EXPECT_TRUE(in.ended());
  in.Reset();
  EXPECT_TRUE(in.OnChunk(Chunk(0, true), 0).ok());
  EXPECT_EQ(in.bytes(), 0u);
}

TEST(StreamInbound, ALostChunkIsNamed) {
  StreamInbound in({"stream 'data'", kChunk, kWindow});
  ASSERT_TRUE(in.OnChunk(Chunk(0), kChunk).ok());
  ExpectError(in.OnChunk(Chunk(2), kChunk).status(),
              {"stream 'data'", "chunk 2 arrived where 1 was expected", "lost or reordered",
               "1 chunk(s), 4096 bytes received"});
  // The end chunk too carries its number: a chunk lost just before it shows.
  in.Reset();
  ASSERT_TRUE(in.OnChunk(Chunk(0), kChunk).ok());
  ExpectError(in.OnChunk(Chunk(2, true), 5).status(), {"chunk 2 arrived where 1"});
}

TEST(StreamInbound, ADuplicatedOrReorderedChunkIsNamed) {
  StreamInbound in({"stream 3", kChunk, kWindow});
  ASSERT_TRUE(in.OnChunk(Chunk(0), kChunk).ok());
  ASSERT_TRUE(in.OnChunk(Chunk(1), kChunk).ok());
  ExpectError(in.OnChunk(Chunk(1), kChunk).status(),
              {"stream 3", "chunk 1 arrived where 2 was expected", "duplicated or reordered"});
  ExpectError(in.OnChunk(Chunk(0), kChunk).status(), {"chunk 0 arrived where 2"});
}

TEST(StreamInbound, SequenceNumbersWrapAt2To24) {
  StreamInbound in({"s", 1, 1});
  const uint64_t wrap = uint64_t{1} << 24;
  for (uint64_t k = 0; k < wrap + 2; ++k) {
    ASSERT_TRUE(in.OnChunk(Chunk(k), 1).ok()) << k;
    in.TakeCredit(0, false);
  }
  EXPECT_EQ(in.received(), wrap + 2);
  ExpectError(in.OnChunk(Chunk(wrap + 3), 1).status(),
              {"chunk 3 arrived where 2 was expected"});
}

TEST(StreamInbound, LengthsEndAndWindow) {
  StreamInbound in({"s", kChunk, kWindow});
  ExpectError(in.OnChunk(Chunk(0), kChunk - 1).status(),
              {"chunk 0 of 4095 bytes without the end bit", "chunk size 4096"});
  ExpectError(in.OnChunk(Chunk(0, true), kChunk + 1).status(),
              {"4097 bytes, larger than the chunk size 4096"});
  for (uint64_t k = 0; k < kWindow; ++k) ASSERT_TRUE(in.OnChunk(Chunk(k), kChunk).ok());
  ExpectError(in.OnChunk(Chunk(kWindow), kChunk).status(),
              {"chunk 4 overwrote an unconsumed slot (window 4, 0 credited)"});
  in.Reset();
  ASSERT_TRUE(in.OnChunk(Chunk(0, true), 1).ok());
  ExpectError(in.OnChunk(Chunk(1), kChunk).status(), {"chunk 1 after the end of the stream"});
}

TEST(StreamOutbound, SendsWithinTheWindowAndTakesOneCreditPerChunk) {
  StreamOutbound out({"stream 'data'", kChunk, kWindow});
  for (uint32_t k = 0; k < kWindow; ++k) {
    ASSERT_TRUE(out.CanSend());
    EXPECT_EQ(out.NextSlotOffset(), uint64_t{k} * kChunk);
    EXPECT_EQ(out.TakeChunk(2, kChunk), EncodeStreamChunk(2, k, false));
  }
  EXPECT_FALSE(out.CanSend());  // the window is full
  ASSERT_TRUE(out.OnCredit(Credit(1), 0).ok());
  ASSERT_TRUE(out.CanSend());
  EXPECT_EQ(out.NextSlotOffset(), 0u);  // slot 0 again
  EXPECT_EQ(out.TakeChunk(2, 10), EncodeStreamChunk(2, 4, true));  // short: the end
  EXPECT_TRUE(out.ended());
  EXPECT_FALSE(out.CanSend());
  for (uint64_t c = 2; c <= 5; ++c) ASSERT_TRUE(out.OnCredit(Credit(c, c == 5), 0).ok());
  EXPECT_TRUE(out.all_consumed());
  EXPECT_TRUE(out.stop());
}

TEST(StreamOutbound, ALostDuplicatedOrExcessCreditIsNamed) {
  StreamOutbound out({"stream 'in'", kChunk, kWindow});
  for (int k = 0; k < 3; ++k) out.TakeChunk(0, kChunk);
  ASSERT_TRUE(out.OnCredit(Credit(1), 0).ok());
  ExpectError(out.OnCredit(Credit(1), 0), {"stream 'in'", "credit 1 arrived where 2 was expected",
                                           "duplicated or reordered"});
  ExpectError(out.OnCredit(Credit(3), 0), {"credit 3 arrived where 2", "lost or reordered"});
  ASSERT_TRUE(out.OnCredit(Credit(2), 0).ok());
  ASSERT_TRUE(out.OnCredit(Credit(3), 0).ok());
  ExpectError(out.OnCredit(Credit(4), 0), {"credit for 4 chunk(s), only 3 were written"});
  ExpectError(out.OnCredit(Credit(4), 8), {"a credit carrying 8 bytes"});
}

}  // namespace
}  // namespace naarpc::internal
