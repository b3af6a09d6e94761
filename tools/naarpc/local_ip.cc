#include "tools/naarpc/local_ip.h"

#include "naarpc/discovery.h"
#include "naarpc/transport_factory.h"

namespace naarpc::cli {

Result<LocalSide> ApplyLocalIp(const std::string& local_ip, const std::string& transport,
                               const std::string& device) {
  LocalSide side{transport, device};
  const std::string what = "NAA_LOCAL_IP=" + local_ip;
  NAARPC_RETURN_IF_ERROR(CheckLocalIp(local_ip));
  if (transport == "emulated") return side;
  auto found = RdmaDeviceOfAddress(local_ip);
  const std::string owner = found.ok() ? *found : "";
  if (owner.empty()) {
    if (transport == "verbs") {
      return InvalidArgumentError(what +
                                  ": no RDMA device has this address (ibv_devices, "
                                  "rdma link show)");
    }
    return side;  // auto: no device there, so the emulated transport
  }
  if (!device.empty() && device != owner) {
    return InvalidArgumentError(what + " belongs to RDMA device " + owner + ", not --device " +
                                device);
  }
  side.transport = "verbs";
  side.device = owner;
  return side;
}

}  // namespace naarpc::cli
