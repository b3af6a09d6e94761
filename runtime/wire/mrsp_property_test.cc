// Property tests: random valid messages round-trip; random and mutated byte
// strings either decode to a message that re-encodes to the same bytes
// (padding zeroed) or are rejected, never crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/wire/mrsp.h"

namespace naarpc {
namespace {

using Rng = std::mt19937_64;

uint32_t RandomSize(Rng& rng) {
  switch (rng() % 4) {
    case 0: return 1;
    case 1: return uint32_t(kMaxRegionSize);
    default: return uint32_t(1 + rng() % kMaxRegionSize);
  }
}

MrspMessage RandomValidMessage(Rng& rng) {
  switch (rng() % 3) {
    case 0: {
      AdvertisementRequestMessage m;
      const size_t n = 1 + rng() % kMaxRegionsPerMessage;
      for (size_t i = 0; i < n; ++i) {
        m.regions.push_back({uint8_t(rng() & 0x0f),  // NAAICE flags (streams: mrsp_test)
                             rng() & kMaxNaaAddress, rng(), uint32_t(rng()),
                             RandomSize(rng)});
      }
      return m;
    }
    case 1: {
      AdvertisementMessage m;
      const size_t n = rng() % (kMaxRegionsPerMessage + 1);
      for (size_t i = 0; i < n; ++i) {
        m.regions.push_back({rng(), uint32_t(rng()), RandomSize(rng)});
      }
      return m;
    }
    default:
      return ErrorMessage{uint8_t(1 + rng() % 255)};
  }
}

TEST(MrspProperty, RandomValidMessagesRoundTrip) {
  Rng rng(20240611);
  for (int i = 0; i < 3000; ++i) {
    const MrspMessage m = RandomValidMessage(rng);
    Result<std::vector<uint8_t>> enc = EncodeMrsp(m);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    ASSERT_EQ(enc->size(), EncodedSize(m));
    EXPECT_EQ((*enc)[2], 0);
    EXPECT_EQ((*enc)[3], 0);
    Result<MrspMessage> dec = DecodeMrsp(*enc);
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    ASSERT_EQ(*dec, m) << "iteration " << i;
  }
}

// Returns true if `b` decoded. Checks the decode -> encode -> decode invariant.
bool CheckBytes(const std::vector<uint8_t>& b) {
  Result<MrspMessage> dec = DecodeMrsp(b);
  if (!dec.ok()) {
    EXPECT_EQ(dec.status().code(), StatusCode::kProtocolError);
    EXPECT_FALSE(dec.status().message().empty());
    return false;
  }
  Result<std::vector<uint8_t>> enc = EncodeMrsp(*dec);
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  if (!enc.ok()) return true;
  std::vector<uint8_t> expected = b;
  // Padding is re-encoded as zero; byte 2 of types 0x01/0x02 keeps its
  // known capability bits.
  expected[2] = (b[0] == 0x01 || b[0] == 0x02) ? (b[2] & kMrspCapsKnown) : 0;
  expected[3] = 0;
  EXPECT_EQ(*enc, expected);
  Result<MrspMessage> again = DecodeMrsp(*enc);
  EXPECT_TRUE(again.ok());
  if (again.ok()) {
    EXPECT_EQ(*again, *dec);
  }
  return true;
}

TEST(MrspProperty, RandomBytesDecodeConsistentlyOrAreRejected) {
  Rng rng(99);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    // Bias towards plausible headers so the entry checks are reached.
    const uint8_t type = uint8_t(rng() % 8 == 0 ? rng() : rng() % 3);
    const uint8_t count = uint8_t(rng() % 4 == 0 ? rng() : rng() % 4);
    const size_t entry = type == 1 ? 24 : type == 2 ? 16 : 0;
    size_t len = 4 + count * entry;
    if (rng() % 3 == 0) len = rng() % 128;
    std::vector<uint8_t> b(len);
    for (uint8_t& x : b) x = uint8_t(rng());
    if (len > 0) b[0] = type;
    if (len > 1) b[1] = count;
    // Often keep flags/sizes plausible so that some inputs decode.
    if (rng() % 2 == 0) {
      for (size_t off = 4; entry && off + entry <= len; off += entry) {
        if (type == 1) b[off] &= 0x0f;
        b[off + entry - 4] &= 0x3F;
      }
    }
    (CheckBytes(b) ? accepted : rejected)++;
  }
  // Both paths must have been exercised, or the test proves nothing.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 1000);
}

TEST(MrspProperty, MutatedValidMessages) {
  Rng rng(4242);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 5000; ++i) {
    Result<std::vector<uint8_t>> enc = EncodeMrsp(RandomValidMessage(rng));
    ASSERT_TRUE(enc.ok());
    std::vector<uint8_t> b = *enc;
    switch (rng() % 4) {
      case 0: b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8)); break;
      case 1: b.resize(rng() % b.size()); break;
      case 2: b.push_back(uint8_t(rng())); break;
      default: b[rng() % b.size()] = uint8_t(rng()); break;
    }
    (CheckBytes(b) ? accepted : rejected)++;
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace naarpc
