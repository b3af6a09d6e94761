// Software-NAA kernel of services/increment/increment.naa.yaml.
#ifndef NAARPC_SERVICES_INCREMENT_INCREMENT_SERVICE_H_
#define NAARPC_SERVICES_INCREMENT_INCREMENT_SERVICE_H_

#include "services/increment/increment.naa.h"

namespace naarpc::services::increment {

class IncrementServiceImpl final : public IncrementService {
 public:
  IncrementError IncrementBytes(const NaaCall& call, std::span<uint8_t> data) override;
};

}  // namespace naarpc::services::increment

#endif  // NAARPC_SERVICES_INCREMENT_INCREMENT_SERVICE_H_
