#include "services/naaice_stock/stock_kernels.h"

#include <cstddef>

namespace naarpc::services::naaice_stock {

uint8_t NaaiceStockKernels::Handle(NaaCall& call) {
  if (call.dialect != Dialect::kReference) return kNaaStatusBadRegionLayout;
  uint8_t add = 0;
  switch (call.function_code) {
    case kAddOne: add = 1; break;
    case kAddTwo: add = 2; break;
    case kNothing: return kNaaStatusSuccess;
    default: return kNaaStatusUnknownFunction;
  }
  for (NaaRegion& region : call.params) {
    for (std::byte& b : region.data) b = static_cast<std::byte>(static_cast<uint8_t>(b) + add);
  }
  return kNaaStatusSuccess;
}

}  // namespace naarpc::services::naaice_stock
