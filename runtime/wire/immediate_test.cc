// Request and status immediates (runtime/wire/protocol.cc), both dialects.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "naarpc/protocol.h"
#include "runtime/wire/golden.h"
#include "runtime/wire/byte_order.h"
#include "runtime/wire/stream_frame.h"

namespace naarpc {
namespace {

// The immediate as the transport puts it on the wire (network byte order).
std::vector<uint8_t> Wire(uint32_t imm) {
  std::vector<uint8_t> b(4);
  PutBe32(b.data(), imm);
  return b;
}

TEST(RequestImmediate, GoldenSpec) {
  const uint32_t imm = EncodeRequestImmediate(Dialect::kSpec, 5);
  EXPECT_EQ(imm, 0x00000005u);
  EXPECT_EQ(Wire(imm), golden::kImmRequestSpec);
  std::optional<RequestImmediate> r =
      DecodeRequestImmediate(GetBe32(golden::kImmRequestSpec.data()));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->function_code, 5);
  EXPECT_FALSE(r->host_to_naa_bit);
  EXPECT_EQ(r->user_bits, 0u);
}

TEST(RequestImmediate, GoldenReference) {
  const uint32_t imm = EncodeRequestImmediate(Dialect::kReference, 0x2A, 0x0A0B0C);
  EXPECT_EQ(imm, 0x0A0B0CAAu);
  EXPECT_EQ(Wire(imm), golden::kImmRequestReference);
  std::optional<RequestImmediate> r =
      DecodeRequestImmediate(GetBe32(golden::kImmRequestReference.data()));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->function_code, 0x2A);
  EXPECT_TRUE(r->host_to_naa_bit);
  EXPECT_EQ(r->user_bits, 0x0A0B0Cu);
}

TEST(RequestImmediate, AllFunctionCodesRoundTripInBothDialects) {
  for (int code = kMinFunctionCode; code <= kMaxFunctionCode; ++code) {
    const uint32_t spec = EncodeRequestImmediate(Dialect::kSpec, uint8_t(code));
    EXPECT_EQ(spec, uint32_t(code));
    std::optional<RequestImmediate> rs = DecodeRequestImmediate(spec);
    ASSERT_TRUE(rs.has_value()) << code;
    EXPECT_EQ(rs->function_code, code);
    EXPECT_FALSE(rs->host_to_naa_bit);

    const uint32_t user = uint32_t(code) * 0x010203u & 0xFFFFFFu;
    const uint32_t ref = EncodeRequestImmediate(Dialect::kReference, uint8_t(code), user);
    EXPECT_EQ(ref, uint32_t(code) | 0x80u | user << 8);
    std::optional<RequestImmediate> rr = DecodeRequestImmediate(ref);
    ASSERT_TRUE(rr.has_value()) << code;
    EXPECT_EQ(rr->function_code, code);
    EXPECT_TRUE(rr->host_to_naa_bit);
    EXPECT_EQ(rr->user_bits, user);
  }
}

TEST(RequestImmediate, UserBitsExtremes) {
  const uint32_t imm = EncodeRequestImmediate(Dialect::kReference, 1, 0xFFFFFF);
  EXPECT_EQ(imm, 0xFFFFFF81u);
  ASSERT_TRUE(DecodeRequestImmediate(imm).has_value());
  EXPECT_EQ(DecodeRequestImmediate(imm)->user_bits, 0xFFFFFFu);
  // The spec dialect never sets bits above the function code.
  EXPECT_EQ(EncodeRequestImmediate(Dialect::kSpec, 1, 0xFFFFFF), 1u);
}

TEST(RequestImmediate, FunctionCodeZeroRejected) {
  EXPECT_FALSE(DecodeRequestImmediate(0x00000000).has_value());  // spec
  EXPECT_FALSE(DecodeRequestImmediate(0x00000080).has_value());  // reference
  EXPECT_FALSE(DecodeRequestImmediate(0x12345680).has_value());  // reference + user bits
}

TEST(RequestImmediate, SpecDialectCarriesNothingAboveBit7) {
  // Bit 7 clear means spec dialect: any bit 8..31 set is rejected.
  for (int bit = 8; bit < 32; ++bit) {
    EXPECT_FALSE(DecodeRequestImmediate(5u | (1u << bit)).has_value()) << bit;
  }
}

TEST(RequestImmediate, CodesAbove127AreNotRepresentable) {
  // A function code > 127 would set bit 7, which marks the reference dialect:
  // decoding never yields a code outside 1..127, and 0x80 (code 128 read as a
  // spec value) is rejected as reference-dialect code 0.
  EXPECT_FALSE(DecodeRequestImmediate(128).has_value());
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t imm = rng();
    std::optional<RequestImmediate> r = DecodeRequestImmediate(imm);
    if (!r) continue;
    EXPECT_GE(r->function_code, kMinFunctionCode);
    EXPECT_LE(r->function_code, kMaxFunctionCode);
    EXPECT_LT(r->user_bits, 1u << 24);
    // A decodable immediate re-encodes to itself.
    EXPECT_EQ(EncodeRequestImmediate(r->host_to_naa_bit ? Dialect::kReference
                                                        : Dialect::kSpec,
                                     r->function_code, r->user_bits),
              imm);
  }
}

TEST(StatusImmediate, GoldenAndEncoding) {
  EXPECT_EQ(EncodeStatusImmediate(Dialect::kSpec, kNaaStatusSuccess), 0u);
  EXPECT_EQ(EncodeStatusImmediate(Dialect::kReference, kNaaStatusSuccess), 0u);
  EXPECT_EQ(Wire(EncodeStatusImmediate(Dialect::kSpec, 0x11)), golden::kImmStatusNaarpc);
  EXPECT_EQ(Wire(EncodeStatusImmediate(Dialect::kReference, 0x11)), golden::kImmStatusReference);
  EXPECT_EQ(DecodeStatusImmediate(GetBe32(golden::kImmStatusNaarpc.data())), 0x11);
  EXPECT_EQ(DecodeStatusImmediate(GetBe32(golden::kImmStatusBits8To15.data())), 0x11);
  EXPECT_EQ(DecodeStatusImmediate(GetBe32(golden::kImmStatusReference.data())), 0x11);
}

// The two readers of the NAAICE reference library, written as they read.
uint8_t ReferenceHostReads(uint32_t imm) {  // ntohl(imm) >> 8, into a uint8_t
  return static_cast<uint8_t>(imm >> 8);
}
uint8_t ReferenceNaaConventionReads(uint32_t imm) {  // the immediate's value
  return static_cast<uint8_t>(imm);
}

TEST(StatusImmediate, EveryStatusDecodesAlikeForEveryReader) {
  for (int s = 0; s <= 0xFF; ++s) {
    const auto status = static_cast<uint8_t>(s);
    const uint32_t spec = EncodeStatusImmediate(Dialect::kSpec, status);
    const uint32_t ref = EncodeStatusImmediate(Dialect::kReference, status);
    EXPECT_EQ(spec, uint32_t(s));
    EXPECT_EQ(ref, uint32_t(s) * 0x0101u);
    EXPECT_EQ(DecodeStatusImmediate(spec), s);
    EXPECT_EQ(DecodeStatusImmediate(ref), s);
    EXPECT_EQ(ReferenceHostReads(ref), s) << "status " << s;
    EXPECT_EQ(ReferenceNaaConventionReads(ref), s) << "status " << s;
    EXPECT_EQ(DecodeStatusImmediate(uint32_t(s) << 8), s);  // bits 8..15
    EXPECT_EQ(ref >> 16, 0u);  // bits 16..31 stay clear
  }
}

TEST(StatusImmediate, LowByteWinsAndHighBitsIgnored) {
  EXPECT_EQ(DecodeStatusImmediate(0x00000000), kNaaStatusSuccess);
  EXPECT_EQ(DecodeStatusImmediate(0x00001105), 0x05);  // low byte non-zero wins
  EXPECT_EQ(DecodeStatusImmediate(0xFFFF0000), kNaaStatusSuccess);
  EXPECT_EQ(DecodeStatusImmediate(0xFFFF0200), kNaaStatusKernelTimeout);
}

// Stream frames (docs/protocol.md 15.2), byte for byte.
TEST(StreamFrame, GoldenBits) {
  // Chunk 4096 of stream 3: 1 0 0 00011 | 0x001000.
  EXPECT_EQ(EncodeStreamChunk(3, 4096, false), 0x83001000u);
  // The end chunk (its number is the stream's chunk count - 1): bit 29.
  EXPECT_EQ(EncodeStreamChunk(3, 5, true), 0xA3000005u);
  // Credit: 5 consumed on stream 31; with stop.
  EXPECT_EQ(EncodeStreamCredit(31, 5, false), 0xDF000005u);
  EXPECT_EQ(EncodeStreamCredit(0, 7, true), 0xE0000007u);
  // Both counts wrap at 2^24.
  EXPECT_EQ(EncodeStreamCredit(1, (uint64_t{1} << 24) + 2, false), 0xC1000002u);
  EXPECT_EQ(EncodeStreamChunk(2, (uint64_t{1} << 24) + 9, false), 0x82000009u);
  EXPECT_EQ(EncodeStreamChunk(0, 0, false), 0x80000000u);
}

TEST(StreamFrame, GoldenVectorsOfTheDocument) {
  EXPECT_EQ(Wire(EncodeStreamChunk(3, 7, false)), golden::kImmStreamChunk);
  EXPECT_EQ(Wire(EncodeStreamChunk(3, 8, true)), golden::kImmStreamEndChunk);
  EXPECT_EQ(Wire(EncodeStreamCredit(3, 9, false)), golden::kImmStreamCredit);
  EXPECT_EQ(Wire(EncodeStreamCredit(3, 2, true)), golden::kImmStreamStopCredit);
  const auto end = DecodeStreamFrame(GetBe32(golden::kImmStreamEndChunk.data()));
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(end->end);
  EXPECT_FALSE(end->credit);
  EXPECT_EQ(end->stream, 3);
  EXPECT_EQ(end->value, 8u);
  const auto stop = DecodeStreamFrame(GetBe32(golden::kImmStreamStopCredit.data()));
  ASSERT_TRUE(stop.has_value());
  EXPECT_TRUE(stop->credit);
  EXPECT_TRUE(stop->stop);
  EXPECT_EQ(stop->value, 2u);
}

TEST(StreamFrame, RoundTripsAndNeverLooksLikeAStatusOrRequest) {
  for (uint8_t stream = 0; stream < kMaxStreams; ++stream) {
    for (uint32_t v : {0u, 1u, 4096u, uint32_t(kMaxStreamChunkSize), kStreamValueMask}) {
      for (bool bit29 : {false, true}) {
        const auto chunk = DecodeStreamFrame(EncodeStreamChunk(stream, v, bit29));
        ASSERT_TRUE(chunk.has_value());
        EXPECT_FALSE(chunk->credit);
        EXPECT_EQ(chunk->end, bit29);
        EXPECT_FALSE(chunk->stop);
        EXPECT_EQ(chunk->stream, stream);
        EXPECT_EQ(chunk->value, v);
        const auto credit = DecodeStreamFrame(EncodeStreamCredit(stream, v, bit29));
        ASSERT_TRUE(credit.has_value());
        EXPECT_TRUE(credit->credit);
        EXPECT_EQ(credit->stop, bit29);
        EXPECT_FALSE(credit->end);
        EXPECT_EQ(credit->stream, stream);
        EXPECT_EQ(credit->value, v);
      }
    }
  }
  // No status immediate (bits 16..31 clear) and no spec-dialect request
  // immediate is a stream frame.
  for (unsigned s = 0; s < 256; ++s) {
    EXPECT_FALSE(IsStreamFrame(EncodeStatusImmediate(Dialect::kSpec, uint8_t(s))));
    EXPECT_FALSE(IsStreamFrame(EncodeStatusImmediate(Dialect::kReference, uint8_t(s))));
  }
  for (uint8_t code = kMinFunctionCode; code <= kMaxFunctionCode; ++code) {
    EXPECT_FALSE(IsStreamFrame(EncodeRequestImmediate(Dialect::kSpec, code)));
  }
  // Not a frame: bit 31 clear.
  EXPECT_FALSE(DecodeStreamFrame(0x7FFFFFFFu).has_value());
}

TEST(StatusNames, KnownCodes) {
  EXPECT_EQ(NaaStatusName(0x00), "success");
  EXPECT_EQ(NaaStatusName(0x03), "unknown function code");
  EXPECT_EQ(NaaStatusName(0x10), "application error");
  EXPECT_EQ(NaaStatusName(0x7f), "application error");
  EXPECT_EQ(NaaStatusName(0x0f), "reserved status");
  EXPECT_EQ(NaaStatusName(0x80), "reserved status");
  EXPECT_EQ(MrspErrorName(0x03), "too many regions");
  EXPECT_EQ(MrspErrorName(0x00), "unknown MRSP error");
}

}  // namespace
}  // namespace naarpc
