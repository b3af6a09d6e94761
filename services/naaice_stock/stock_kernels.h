// The NAAICE reference library's stock kernels, served by a naarpc software
// NAA so that the reference's own host clients (which call these codes on
// any region layout) can be pointed at naarpc unchanged:
//   1: adds 1 to every byte of every parameter region;
//   2: adds 2 to every byte of every parameter region;
//   3: does nothing.
// Reference dialect only (a spec-dialect call gets status 0x04); any other
// function code gets 0x03. Internal regions are left alone. Every region
// flagged OUTPUT is written back whole, as the reference NAA does.
// Run it: ./tools/bazel run //examples:naa_server -- --naaice-stock-kernels
#ifndef NAARPC_SERVICES_NAAICE_STOCK_STOCK_KERNELS_H_
#define NAARPC_SERVICES_NAAICE_STOCK_STOCK_KERNELS_H_

#include <cstdint>

#include "naarpc/naa_server.h"

namespace naarpc::services::naaice_stock {

inline constexpr uint8_t kAddOne = 1;
inline constexpr uint8_t kAddTwo = 2;
inline constexpr uint8_t kNothing = 3;

class NaaiceStockKernels final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override;
};

}  // namespace naarpc::services::naaice_stock

#endif  // NAARPC_SERVICES_NAAICE_STOCK_STOCK_KERNELS_H_
