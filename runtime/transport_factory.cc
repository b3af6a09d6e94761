#include "naarpc/transport_factory.h"

#include <string>

#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc {

Result<std::unique_ptr<Transport>> NewTransport(std::string_view name,
                                                std::string_view rdma_device) {
  VerbsOptions verbs;
  verbs.device = std::string(rdma_device);
  if (name == "verbs") return NewVerbsTransport(verbs);
  if (name == "auto" && RdmaDeviceAvailable()) return NewVerbsTransport(verbs);
  if (name == "emulated" || name == "auto") {
    if (!rdma_device.empty()) {
      return InvalidArgumentError("RDMA device '" + verbs.device + "' selected, but the " +
                                  (name == "auto" ? "machine has no RDMA device"
                                                  : "emulated transport uses none"));
    }
    return NewEmulatedTransport();
  }
  return InvalidArgumentError("unknown transport '" + std::string(name) +
                              "' (expected emulated, verbs or auto)");
}

Result<std::string> RdmaDeviceOfAddress(const std::string& address) {
  return VerbsDeviceOfAddress(address);
}

}  // namespace naarpc
