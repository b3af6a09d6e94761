// MRSP codec: golden bytes, round trips, every malformed input, encode limits.
#include "runtime/wire/mrsp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "runtime/wire/golden.h"
#include "runtime/wire/byte_order.h"

namespace naarpc {
namespace {

using ::testing::HasSubstr;

// ---- Typed forms of the golden examples (docs/protocol.md) -----------------

MrspMessage RequestSpec() {
  return AdvertisementRequestMessage{{
      {0x00, 0x10000, 0x00007F3A5C001000, 0x1A2B, 8},
      {0x00, 0x20000, 0x00007F3A5C100000, 0x1A2C, 0x100000},
      {0x00, 0x120000, 0x00007F3A5C200000, 0x1A2D, 0x1000},
      {kRegionFlagInternal, 0x130000, 0, 0, 0x40000},
  }};
}
MrspMessage AdvertisementSpec() {
  return AdvertisementMessage{{
      {0x10000, 0x101, 8},
      {0x20000, 0x102, 0x100000},
      {0x120000, 0x103, 0x1000},
  }};
}
MrspMessage RequestReference() {
  return AdvertisementRequestMessage{{
      {kRegionFlagInput | kRegionFlagSingleSend, 0x01020304050607,
       0x00007F1020304050, 0x0A0B0C0D, 0x12345},
      {kRegionFlagInput | kRegionFlagOutput, 0x11A1B2C3D4E5F6,
       0x00007FFE12345678, 0x00C0FFEE, 1u << 30},
  }};
}
MrspMessage AdvertisementReference() {
  return AdvertisementMessage{{
      {0x1122334455667788, 0x99AABBCC, 0x12345},
      {0x0000000100000000, 0xDDEEFF01, 1u << 30},
  }};
}

struct GoldenCase {
  const char* name;
  MrspMessage msg;
  const std::vector<uint8_t>* bytes;
};

std::vector<GoldenCase> GoldenCases() {
  return {
      {"request_spec", RequestSpec(), &golden::kRequestSpec},
      {"advertisement_spec", AdvertisementSpec(), &golden::kAdvertisementSpec},
      {"request_reference", RequestReference(), &golden::kRequestReference},
      {"advertisement_reference", AdvertisementReference(),
       &golden::kAdvertisementReference},
      {"advertisement_empty", AdvertisementMessage{}, &golden::kAdvertisementEmpty},
      {"error_too_many_regions",
       ErrorMessage{static_cast<uint8_t>(MrspErrorCode::kTooManyRegions)},
       &golden::kErrorTooManyRegions},
  };
}

TEST(MrspGolden, EncodeProducesExactBytes) {
  for (const GoldenCase& c : GoldenCases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(EncodedSize(c.msg), c.bytes->size());
    Result<std::vector<uint8_t>> enc = EncodeMrsp(c.msg);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(*enc, *c.bytes);
  }
}

TEST(MrspGolden, DecodeYieldsTypedMessage) {
  for (const GoldenCase& c : GoldenCases()) {
    SCOPED_TRACE(c.name);
    Result<MrspMessage> dec = DecodeMrsp(*c.bytes);
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    EXPECT_EQ(*dec, c.msg);
  }
}

TEST(MrspGolden, SizesMatchLayout) {
  EXPECT_EQ(golden::kRequestSpec.size(), 4u + 4 * 24);
  EXPECT_EQ(golden::kRequestReference.size(), 4u + 2 * 24);
  EXPECT_EQ(golden::kAdvertisementSpec.size(), 4u + 3 * 16);
  EXPECT_EQ(golden::kAdvertisementReference.size(), 4u + 2 * 16);
}

TEST(MrspGolden, EncodeIntoSpanLeavesTailUntouched) {
  std::vector<uint8_t> buf(200, 0xEE);
  Result<size_t> n = EncodeMrsp(RequestReference(), buf);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, golden::kRequestReference.size());
  EXPECT_TRUE(std::equal(golden::kRequestReference.begin(),
                         golden::kRequestReference.end(), buf.begin()));
  for (size_t i = *n; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xEE) << i;
}

// ---- Round trips and limits that must be accepted --------------------------

void ExpectRoundTrip(const MrspMessage& m) {
  Result<std::vector<uint8_t>> enc = EncodeMrsp(m);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  ASSERT_EQ(enc->size(), EncodedSize(m));
  Result<MrspMessage> dec = DecodeMrsp(*enc);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  EXPECT_EQ(*dec, m);
}

TEST(MrspRoundTrip, Boundaries) {
  // Extremes of every field.
  ExpectRoundTrip(AdvertisementRequestMessage{
      {{0x0f, kMaxNaaAddress, ~uint64_t{0}, ~uint32_t{0}, 1},
       {0, 0, 0, 0, uint32_t(kMaxRegionSize)},
       {kStreamFlagsOut, kMaxStreamChunkSize, ~uint64_t{0}, ~uint32_t{0},
        uint32_t(kMaxStreamChunkSize) * kMaxStreamWindow}}});
  ExpectRoundTrip(AdvertisementMessage{
      {{~uint64_t{0}, ~uint32_t{0}, 1}, {0, 0, uint32_t(kMaxRegionSize)}}});
  ExpectRoundTrip(ErrorMessage{1});
  ExpectRoundTrip(ErrorMessage{2});
  ExpectRoundTrip(ErrorMessage{0xFF});  // unknown codes are carried through
}

TEST(MrspRoundTrip, MaxCount) {
  AdvertisementRequestMessage req;
  AdvertisementMessage adv;
  for (size_t i = 0; i < kMaxRegionsPerMessage; ++i) {
    req.regions.push_back({uint8_t(i & 0x0f), i * 4096, 0x7f0000000000 + i * 8,
                           uint32_t(i * 7), uint32_t(i + 1)});
    adv.regions.push_back({i << 20, uint32_t(~i), uint32_t(i + 1)});
  }
  EXPECT_EQ(EncodedSize(req), kMaxMrspMessageSize);
  EXPECT_EQ(kMaxMrspMessageSize, 6124u);
  ExpectRoundTrip(req);
  ExpectRoundTrip(adv);
}

TEST(MrspDecode, NonZeroPaddingIsIgnored) {
  for (const GoldenCase& c : GoldenCases()) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> b = *c.bytes;
    b[2] = 0xAA;  // bit 0x01 of byte 2 is a capability (MemoryWindowCapability)
    b[3] = 0xCD;
    Result<MrspMessage> dec = DecodeMrsp(b);
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    EXPECT_EQ(*dec, c.msg);
    // Re-encoding writes zero padding.
    Result<std::vector<uint8_t>> enc = EncodeMrsp(*dec);
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(*enc, *c.bytes);
  }
}

// ---- Malformed input --------------------------------------------------------

void ExpectRejected(const std::vector<uint8_t>& b,
                    const std::vector<std::string>& parts) {
  Result<MrspMessage> dec = DecodeMrsp(b);
  ASSERT_FALSE(dec.ok());
  EXPECT_EQ(dec.status().code(), StatusCode::kProtocolError);
  for (const std::string& p : parts) {
    EXPECT_THAT(dec.status().message(), HasSubstr(p));
  }
}

TEST(MrspDecode, EmptyAndShortInput) {
  ExpectRejected({}, {"empty"});
  ExpectRejected({0x01}, {"too short: 1 bytes"});
  ExpectRejected({0x02, 0x00}, {"too short: 2 bytes"});
  ExpectRejected({0x00, 0x01, 0x00}, {"too short: 3 bytes"});
}

TEST(MrspDecode, UnknownType) {
  for (int t : {0x03, 0x10, 0x81, 0xFF}) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", t);
    ExpectRejected({uint8_t(t), 0x00, 0x00, 0x00}, {"unknown type", hex, "offset 0"});
  }
}

TEST(MrspDecode, RequestCountZero) {
  ExpectRejected({0x01, 0x00, 0x00, 0x00}, {"count 0"});
  std::vector<uint8_t> b(4 + 24, 0);
  b[0] = 0x01;
  ExpectRejected(b, {"count 0"});
}

TEST(MrspDecode, RequestLengthMismatch) {
  std::vector<uint8_t> b(golden::kRequestReference.begin(),
                         golden::kRequestReference.begin() + 30);
  Result<MrspMessage> dec = DecodeMrsp(b);
  ASSERT_FALSE(dec.ok());
  EXPECT_EQ(dec.status().message(),
            "MRSP advertisement+request message length 30 does not match count "
            "2 (expected 52 bytes)");
  // One byte short, one byte trailing, a whole extra entry, header only.
  b = golden::kRequestReference;
  b.pop_back();
  ExpectRejected(b, {"length 51", "count 2", "expected 52"});
  b = golden::kRequestReference;
  b.push_back(0);
  ExpectRejected(b, {"length 53", "count 2", "expected 52"});
  b = golden::kRequestReference;
  b.insert(b.end(), 24, 0x01);
  ExpectRejected(b, {"length 76", "expected 52"});
  ExpectRejected({0x01, 0xFF, 0x00, 0x00}, {"length 4", "count 255", "expected 6124"});
}

TEST(MrspDecode, RequestSizeOutOfRange) {
  // Entry 1 starts at offset 28; its size field at 28 + 20.
  for (uint32_t size : {0u, (1u << 30) + 1, 0x80000000u, 0xFFFFFFFFu}) {
    std::vector<uint8_t> b = golden::kRequestReference;
    PutBe32(b.data() + 48, size);
    ExpectRejected(b, {"advertisement+request entry 1 at offset 28",
                       "size " + std::to_string(size), "must be 1..1073741824"});
  }
  std::vector<uint8_t> b = golden::kRequestReference;
  PutBe32(b.data() + 4 + 20, 0);
  ExpectRejected(b, {"entry 0 at offset 4", "size 0"});
}

TEST(MrspDecode, RequestUnknownFlags) {
  for (uint8_t bad : {0x40, 0x80, 0xC0, 0xE0, 0xFF}) {
    std::vector<uint8_t> b = golden::kRequestSpec;
    b[4 + 3 * 24] = bad;  // entry 3 flags
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", bad & 0xC0);
    ExpectRejected(b, {"advertisement+request entry 3 at offset 76",
                       "unknown flag bits", hex});
  }
  // The stream-version bit belongs to stream entries only.
  std::vector<uint8_t> b = golden::kRequestSpec;
  b[4 + 3 * 24] = 0x20;
  ExpectRejected(b, {"advertisement+request entry 3 at offset 76", "stream flags 0x20"});
  // Every combination of the NAAICE flags is accepted (streams: below).
  for (uint8_t ok = 0; ok <= 0x0f; ++ok) {
    std::vector<uint8_t> b = golden::kRequestSpec;
    b[4] = ok;
    EXPECT_TRUE(DecodeMrsp(b).ok()) << int(ok);
  }
}

TEST(MrspGolden, StreamRequest) {
  const AdvertisementRequestMessage m{
      {{kRegionFlagInput, 0, 0x7F1020304050, 0x0A0B0C0D, 4},
       {kStreamFlagsIn, 4096, 0x7F1020310000, 0x00C0FFEE, 4 * 4096}}};
  Result<std::vector<uint8_t>> enc = EncodeMrsp(m);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(*enc, golden::kRequestStream);
  Result<MrspMessage> dec = DecodeMrsp(golden::kRequestStream);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  EXPECT_EQ(std::get<AdvertisementRequestMessage>(*dec), m);
}

// Per-call memory windows: the capability byte (docs/protocol.md 3.6,
// examples 18 and 19).
TEST(MrspGolden, MemoryWindowCapability) {
  const AdvertisementRequestMessage req{{{0x00, 0x10000, 0x00007F3A5C001000, 0x1A2B, 16},
                                         {0x00, 0x20000, 0x00007F3A5C200000, 0x1A2D, 0x1000}},
                                        kMrspCapMemoryWindows};
  const AdvertisementMessage adv{{{0x10000, 0x101, 16}, {0x20000, 0x102, 0x1000}},
                                 kMrspCapMemoryWindows};
  for (const auto& [msg, bytes] : {std::pair<MrspMessage, const std::vector<uint8_t>*>{
                                       req, &golden::kRequestWindows},
                                   {adv, &golden::kAdvertisementWindows}}) {
    Result<std::vector<uint8_t>> enc = EncodeMrsp(msg);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(*enc, *bytes);
    Result<MrspMessage> dec = DecodeMrsp(*bytes);
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    EXPECT_EQ(*dec, msg);
  }
}

// Unknown capability bits and byte 3 are ignored on receipt and encoded as 0
// (an older peer's padding); an Error's byte 2 stays padding.
TEST(MrspDecode, UnknownCapabilityBitsAreIgnored) {
  std::vector<uint8_t> b = golden::kRequestWindows;
  b[2] = 0xFF;
  b[3] = 0x5A;
  Result<MrspMessage> dec = DecodeMrsp(b);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  EXPECT_EQ(std::get<AdvertisementRequestMessage>(*dec).capabilities, kMrspCapMemoryWindows);
  Result<std::vector<uint8_t>> enc = EncodeMrsp(*dec);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, golden::kRequestWindows);
  b = golden::kRequestSpec;
  b[2] = 0xFE;  // every bit but the known one
  dec = DecodeMrsp(b);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(std::get<AdvertisementRequestMessage>(*dec).capabilities, 0);
  std::vector<uint8_t> e = golden::kErrorTooManyRegions;
  e[2] = 0x01;
  dec = DecodeMrsp(e);
  ASSERT_TRUE(dec.ok());
  enc = EncodeMrsp(*dec);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, golden::kErrorTooManyRegions);
}

TEST(MrspDecode, RequestStreamEntries) {
  // Valid: 0x35 / 0x39, chunk size in the requested-address field, size a
  // window (1..64) of chunks.
  for (uint8_t flags : {kStreamFlagsIn, kStreamFlagsOut}) {
    for (auto [chunk, size] : {std::pair<uint64_t, uint32_t>{1, 1}, {1, 64}, {4096, 4096 * 8},
                               {kMaxStreamChunkSize, uint32_t(kMaxStreamChunkSize) * 64}}) {
      std::vector<uint8_t> b = golden::kRequestSpec;
      uint8_t* e = b.data() + 4 + 3 * 24;
      e[0] = flags;
      for (int i = 0; i < 7; ++i) e[1 + i] = uint8_t(chunk >> (48 - 8 * i));
      PutBe32(e + 20, size);
      Result<MrspMessage> m = DecodeMrsp(b);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      const auto& r = std::get<AdvertisementRequestMessage>(*m).regions[3];
      EXPECT_EQ(r.flags, flags);
      EXPECT_EQ(r.requested_naa_address, chunk);
      EXPECT_EQ(r.size, size);
    }
  }
  struct Bad {
    uint8_t flags;
    uint64_t chunk;
    uint32_t size;
    const char* says;
  };
  for (const Bad& bad : {Bad{0x10, 8, 8, "stream flags 0x10"}, Bad{0x11, 8, 8, "stream flags 0x11"},
                         Bad{0x1d, 8, 8, "stream flags 0x1d"}, Bad{0x17, 8, 8, "stream flags 0x17"},
                         Bad{0x14, 8, 8, "stream flags 0x14"},
                         Bad{0x30, 8, 8, "stream flags 0x30"},
                         // Streams without chunk sequence numbers (15.5).
                         Bad{0x15, 8, 8, "stream flags 0x15: a stream without chunk sequence"},
                         Bad{0x19, 8, 8, "stream flags 0x19: a stream without chunk sequence"},
                         Bad{kStreamFlagsIn, 0, 8, "stream chunk size 0"},
                         Bad{kStreamFlagsIn, kMaxStreamChunkSize + 1, 1u << 30, "stream chunk size 8388609"},
                         Bad{kStreamFlagsOut, 8, 12, "stream size 12"},
                         Bad{kStreamFlagsOut, 8, 8 * 65, "stream size 520"}}) {
    std::vector<uint8_t> b = golden::kRequestSpec;
    uint8_t* e = b.data() + 4 + 3 * 24;
    e[0] = bad.flags;
    for (int i = 0; i < 7; ++i) e[1 + i] = uint8_t(bad.chunk >> (48 - 8 * i));
    PutBe32(e + 20, bad.size);
    ExpectRejected(b, {"advertisement+request entry 3 at offset 76", bad.says});
  }
}

TEST(MrspDecode, AdvertisementLengthMismatch) {
  std::vector<uint8_t> b = golden::kAdvertisementReference;
  b.pop_back();
  ExpectRejected(b, {"advertisement message length 35", "count 2", "expected 36"});
  b = golden::kAdvertisementReference;
  b.push_back(0);
  ExpectRejected(b, {"length 37", "expected 36"});
  ExpectRejected({0x02, 0x00, 0x00, 0x00, 0x00}, {"length 5", "count 0", "expected 4"});
  ExpectRejected({0x02, 0x01, 0x00, 0x00}, {"length 4", "count 1", "expected 20"});
}

TEST(MrspDecode, AdvertisementSizeOutOfRange) {
  for (uint32_t size : {0u, (1u << 30) + 1, 0xFFFFFFFFu}) {
    std::vector<uint8_t> b = golden::kAdvertisementReference;
    PutBe32(b.data() + 4 + 16 + 12, size);
    ExpectRejected(b, {"advertisement entry 1 at offset 20",
                       "size " + std::to_string(size)});
  }
}

TEST(MrspDecode, ErrorMessage) {
  ExpectRejected({0x00, 0x00, 0x00, 0x00}, {"error code 0", "offset 1"});
  ExpectRejected({0x00, 0x01, 0x00, 0x00, 0x00}, {"error message length 5"});
  std::vector<uint8_t> b(8, 0);
  b[1] = 0x02;
  ExpectRejected(b, {"error message length 8"});
  for (int code = 1; code <= 0xFF; ++code) {
    Result<MrspMessage> dec = DecodeMrsp(std::vector<uint8_t>{0x00, uint8_t(code), 0, 0});
    ASSERT_TRUE(dec.ok());
    EXPECT_EQ(std::get<ErrorMessage>(*dec).code, code);
  }
}

TEST(MrspDecode, NeverReadsPastTheSpan) {
  // Decode a prefix of a larger buffer: the bytes after the span are a valid
  // continuation, so reading them would wrongly succeed.
  std::vector<uint8_t> b = golden::kRequestReference;
  for (size_t len = 0; len < b.size(); ++len) {
    EXPECT_FALSE(DecodeMrsp(std::span<const uint8_t>(b.data(), len)).ok()) << len;
  }
  b = golden::kAdvertisementReference;
  for (size_t len = 0; len < b.size(); ++len) {
    EXPECT_FALSE(DecodeMrsp(std::span<const uint8_t>(b.data(), len)).ok()) << len;
  }
}

// ---- Encoding rejects what the wire cannot carry ----------------------------

void ExpectEncodeError(const MrspMessage& m, StatusCode code,
                       const std::vector<std::string>& parts) {
  Result<std::vector<uint8_t>> enc = EncodeMrsp(m);
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), code) << enc.status().ToString();
  for (const std::string& p : parts) {
    EXPECT_THAT(enc.status().message(), HasSubstr(p));
  }
}

TEST(MrspEncode, RequestCount) {
  ExpectEncodeError(AdvertisementRequestMessage{}, StatusCode::kOutOfRange,
                    {"0 regions", "1..255"});
  AdvertisementRequestMessage m;
  m.regions.assign(256, RegionRequest{0, 0, 0, 0, 1});
  ExpectEncodeError(m, StatusCode::kOutOfRange, {"256 regions"});
}

TEST(MrspEncode, RequestFields) {
  auto with = [](RegionRequest r) {
    AdvertisementRequestMessage m = std::get<AdvertisementRequestMessage>(RequestReference());
    m.regions.push_back(r);
    return m;
  };
  ExpectEncodeError(with({0, uint64_t{1} << 56, 0, 0, 1}), StatusCode::kOutOfRange,
                    {"entry 2", "NAA address", "56 bits"});
  ExpectEncodeError(with({0, ~uint64_t{0}, 0, 0, 1}), StatusCode::kOutOfRange,
                    {"entry 2", "NAA address"});
  ExpectEncodeError(with({0, 0, 0, 0, 0}), StatusCode::kOutOfRange,
                    {"entry 2", "size 0"});
  ExpectEncodeError(with({0, 0, 0, 0, (1u << 30) + 1}), StatusCode::kOutOfRange,
                    {"entry 2", "size 1073741825"});
  ExpectEncodeError(with({0x40, 0, 0, 0, 1}), StatusCode::kInvalidArgument,
                    {"entry 2", "unknown flag bits 0x40"});
  // Streams (docs/protocol.md 15.1): flags, chunk size, window.
  ExpectEncodeError(with({0x10, 4096, 0, 0, 4096}), StatusCode::kInvalidArgument,
                    {"entry 2", "stream flags 0x10", "0x35 or 0x39"});
  ExpectEncodeError(with({0x15, 4096, 0, 0, 4096}), StatusCode::kInvalidArgument,
                    {"entry 2", "stream flags 0x15", "without chunk sequence numbers"});
  ExpectEncodeError(with({0x1d, 4096, 0, 0, 4096}), StatusCode::kInvalidArgument,
                    {"entry 2", "stream flags 0x1d"});
  ExpectEncodeError(with({kStreamFlagsIn, 0, 0, 0, 4096}), StatusCode::kInvalidArgument,
                    {"entry 2", "stream chunk size 0", "must be 1..8388608"});
  ExpectEncodeError(with({kStreamFlagsOut, 4096, 0, 0, 4097}), StatusCode::kInvalidArgument,
                    {"entry 2", "stream size 4097", "window of 1..64"});
  ExpectEncodeError(with({kStreamFlagsIn, 1, 0, 0, 65}), StatusCode::kInvalidArgument,
                    {"entry 2", "stream size 65"});
}

TEST(MrspEncode, Advertisement) {
  AdvertisementMessage m;
  m.regions.assign(256, RegionAdvertisement{0, 0, 1});
  ExpectEncodeError(m, StatusCode::kOutOfRange, {"256 regions"});
  ExpectEncodeError(AdvertisementMessage{{{0, 0, 1}, {0, 0, 0}}},
                    StatusCode::kOutOfRange, {"advertisement entry 1", "size 0"});
  ExpectEncodeError(AdvertisementMessage{{{0, 0, (1u << 30) + 1}}},
                    StatusCode::kOutOfRange, {"advertisement entry 0"});
}

TEST(MrspEncode, ErrorCodeZero) {
  ExpectEncodeError(ErrorMessage{0}, StatusCode::kInvalidArgument, {"error code 0"});
}

TEST(MrspEncode, BufferTooSmall) {
  std::vector<uint8_t> buf(golden::kRequestReference.size() - 1, 0xEE);
  Result<size_t> n = EncodeMrsp(RequestReference(), buf);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(n.status().message(), HasSubstr("51 bytes too small for a 52-byte"));
  for (uint8_t v : buf) EXPECT_EQ(v, 0xEE);  // nothing written
  std::vector<uint8_t> empty;
  EXPECT_FALSE(EncodeMrsp(ErrorMessage{1}, empty).ok());
  buf.resize(golden::kRequestReference.size());
  EXPECT_TRUE(EncodeMrsp(RequestReference(), buf).ok());
}

}  // namespace
}  // namespace naarpc
