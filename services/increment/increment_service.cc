#include "services/increment/increment_service.h"

namespace naarpc::services::increment {

IncrementError IncrementServiceImpl::IncrementBytes(const NaaCall&, std::span<uint8_t> data) {
  for (uint8_t& b : data) b = static_cast<uint8_t>(b + 1);
  return IncrementError::kOk;
}

}  // namespace naarpc::services::increment
