// The NAA's reading of the spec dialect's metadata region (runtime/wire/metadata.h).
#include "runtime/wire/metadata.h"
#include "runtime/wire/byte_order.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

}  // namespace
}  // namespace naarpc
