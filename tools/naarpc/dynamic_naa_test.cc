// DynamicNaa (naarpc serve, Python kernels) refuses a layout and reports a
// kernel's exception as a generated skeleton does: the same check
// (codegen::RegionMismatch) and the same failure_detail for the NAA's log.
#include "tools/naarpc/dynamic_naa.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "idl/load.h"
#include "naarpc/protocol.h"

namespace naarpc::cli {
namespace {

constexpr char kIdl[] = R"(package: t
services:
  - name: V
    routines:
      - name: Add
        code: 1
        params:
          - {name: a, type: f32, size: 4, direction: in}
          - {name: out, type: f32, size: 4, direction: out}
)";

// A call of `code` on regions of `sizes` bytes (the last one returned).
struct FakeCall {
  std::vector<std::vector<std::byte>> bufs;
  std::vector<NaaRegion> regions;
  NaaCall call;
  FakeCall(uint8_t code, std::vector<size_t> sizes) {
    for (size_t s : sizes) bufs.emplace_back(s);
    for (size_t i = 0; i < sizes.size(); ++i) {
      NaaRegion r;
      r.data = bufs[i];
      r.is_output = i + 1 == sizes.size();
      r.is_input = true;
      regions.push_back(r);
    }
    call.function_code = code;
    call.params = regions;
  }
};

class DynamicNaaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto idl = idl::LoadFromString(kIdl, "t.naa.yaml");
    ASSERT_TRUE(idl.ok()) << idl.status().ToString();
    idl_ = std::move(*idl);
    auto naa = DynamicNaa::Create({&idl_.services[0]}, {});
    ASSERT_TRUE(naa.ok()) << naa.status().ToString();
    naa_ = std::move(*naa);
  }
  idl::IdlFile idl_;
  std::unique_ptr<DynamicNaa> naa_;
};

TEST_F(DynamicNaaTest, RefusedLayoutsSayWhy) {
  FakeCall wrong_size(1, {16, 12});
  EXPECT_EQ(naa_->Handle(wrong_size.call), kNaaStatusBadRegionLayout);
  EXPECT_EQ(wrong_size.call.failure_detail, "V.Add: region 'out' is 12 bytes, expected 16");
  FakeCall missing(1, {16});
  EXPECT_EQ(naa_->Handle(missing.call), kNaaStatusBadRegionLayout);
  EXPECT_EQ(missing.call.failure_detail,
            "V.Add: 1 parameter regions, 0 internal regions and 0 streams, expected 2, 0 and 0");
  FakeCall fine(1, {16, 16});
  EXPECT_EQ(naa_->Handle(fine.call), kNaaStatusSuccess) << fine.call.failure_detail;
}

TEST_F(DynamicNaaTest, AKernelsExceptionIsTheCallsFailureDetail) {
  ASSERT_TRUE(naa_->SetKernel("Add", [](KernelArgs&) -> uint8_t {
                     throw std::runtime_error("out of widgets");
                   }, "throws").ok());
  FakeCall f(1, {16, 16});
  EXPECT_EQ(naa_->Handle(f.call), kNaaStatusKernelFailed);
  EXPECT_EQ(f.call.failure_detail, "V.Add: the kernel threw 'out of widgets'");
}

}  // namespace
}  // namespace naarpc::cli
