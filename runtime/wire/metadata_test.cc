// The NAA's reading of the spec dialect's metadata region (runtime/wire/metadata.h).
#include "runtime/wire/metadata.h"
#include "runtime/wire/byte_order.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/wire/golden.h"

namespace naarpc {
namespace {

// Parameters 0..2 start at these host addresses.
constexpr uint64_t kAddr[] = {0x00007f0000001000, 0x00007f0000002000, 0x00007f0000003000};

size_t ParamOf(uint64_t addr) {
  for (size_t p = 0; p < 3; ++p) {
    if (kAddr[p] == addr) return p;
  }
  return SIZE_MAX;
}

std::vector<uint8_t> Be(std::initializer_list<uint64_t> addrs) {
  std::vector<uint8_t> out(addrs.size() * 8);
  size_t i = 0;
  for (uint64_t a : addrs) PutBe64(out.data() + 8 * i++, a);
  return out;
}

TEST(Metadata, ResolvesInWriteBackOrderWithoutDuplicates) {
  std::vector<size_t> r;
  ASSERT_TRUE(ResolveMetadataReturns(Be({kAddr[2], kAddr[0], kAddr[2]}), ParamOf, r));
  EXPECT_EQ(r, (std::vector<size_t>{2, 0}));
}

TEST(Metadata, ZeroPaddingEndsTheList) {
  std::vector<size_t> r;
  ASSERT_TRUE(ResolveMetadataReturns(Be({kAddr[1], 0, kAddr[0]}), ParamOf, r));
  EXPECT_EQ(r, (std::vector<size_t>{1}));
}

TEST(Metadata, LittleEndianAddressesOfOlderHostsAreAccepted) {
  std::vector<uint8_t> raw(8);
  for (int i = 0; i < 8; ++i) raw[i] = uint8_t(kAddr[1] >> (8 * i));  // raw uintptr_t, LE
  std::vector<size_t> r;
  ASSERT_TRUE(ResolveMetadataReturns(raw, ParamOf, r));
  EXPECT_EQ(r, (std::vector<size_t>{1}));
}

TEST(Metadata, RejectsUnknownAddressesBadSizesAndEmptyLists) {
  std::vector<size_t> r;
  EXPECT_FALSE(ResolveMetadataReturns(Be({kAddr[0], 0x1234}), ParamOf, r));
  std::vector<uint8_t> odd = Be({kAddr[0]});
  odd.push_back(0);
  EXPECT_FALSE(ResolveMetadataReturns(odd, ParamOf, r));
  EXPECT_FALSE(ResolveMetadataReturns(Be({0, kAddr[0]}), ParamOf, r));
  EXPECT_FALSE(ResolveMetadataReturns(std::vector<uint8_t>{}, ParamOf, r));
}

// Per-call memory windows (docs/protocol.md 4.5, example 20): the host's
// encoding gives the golden bytes, the NAA's reading gives back the
// parameter and the key.
TEST(MetadataWindows, GoldenBytes) {
  std::vector<uint8_t> out(16, 0xEE);
  PutMetadataWindowEntry(out.data(), 0x00007F3A5C200000, 0x00123405);
  EXPECT_EQ(out, golden::kMetadataWindows);
  std::vector<size_t> r;
  std::vector<uint32_t> keys;
  auto param_of = [](uint64_t a) { return a == 0x00007F3A5C200000 ? size_t{0} : SIZE_MAX; };
  ASSERT_TRUE(ResolveMetadataWindowReturns(golden::kMetadataWindows, param_of, r, keys));
  EXPECT_EQ(r, std::vector<size_t>({0}));
  EXPECT_EQ(keys, std::vector<uint32_t>({0x00123405}));
}

TEST(MetadataWindows, ResolvesEachReturnWithItsKey) {
  std::vector<uint8_t> m(4 * 16);
  PutMetadataWindowEntry(m.data(), kAddr[2], 0x111);
  PutMetadataWindowEntry(m.data() + 16, kAddr[0], 0x222);
  PutMetadataWindowEntry(m.data() + 32, kAddr[2], 0x333);  // named twice: first key kept
  std::vector<size_t> r;
  std::vector<uint32_t> keys;
  ASSERT_TRUE(ResolveMetadataWindowReturns(m, ParamOf, r, keys));  // zero entry ends the list
  EXPECT_EQ(r, std::vector<size_t>({2, 0}));
  EXPECT_EQ(keys, std::vector<uint32_t>({0x111, 0x222}));
}

TEST(MetadataWindows, RejectsWhatNamesNoParameterOrIsMisSized) {
  std::vector<size_t> r;
  std::vector<uint32_t> keys;
  std::vector<uint8_t> m(16);
  PutMetadataWindowEntry(m.data(), 0x1234, 1);  // no such parameter
  EXPECT_FALSE(ResolveMetadataWindowReturns(m, ParamOf, r, keys));
  // A byte-swapped address is not retried in this format.
  uint64_t swapped = 0;
  for (int i = 0; i < 8; ++i) swapped = swapped << 8 | ((kAddr[0] >> (8 * i)) & 0xff);
  PutMetadataWindowEntry(m.data(), swapped, 1);
  EXPECT_FALSE(ResolveMetadataWindowReturns(m, ParamOf, r, keys));
  std::vector<uint8_t> odd(24);
  PutMetadataWindowEntry(odd.data(), kAddr[0], 1);
  EXPECT_FALSE(ResolveMetadataWindowReturns(odd, ParamOf, r, keys));
  EXPECT_FALSE(ResolveMetadataWindowReturns(std::vector<uint8_t>(16), ParamOf, r, keys));
}

}  // namespace
}  // namespace naarpc
