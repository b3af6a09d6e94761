#include "runtime/transport_factory.h"

#include <string>

#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc {

Result<std::unique_ptr<Transport>> NewTransport(std::string_view name) {
  if (name == "emulated") return NewEmulatedTransport();
  if (name == "verbs") return NewVerbsTransport();
  if (name == "auto") {
    if (RdmaDeviceAvailable()) return NewVerbsTransport();
    return NewEmulatedTransport();
  }
  return InvalidArgumentError("unknown transport '" + std::string(name) +
                              "' (expected emulated, verbs or auto)");
}

}  // namespace naarpc
