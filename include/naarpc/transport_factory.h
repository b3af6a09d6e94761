// Chooses a transport backend by name.
#ifndef NAARPC_TRANSPORT_FACTORY_H_
#define NAARPC_TRANSPORT_FACTORY_H_

#include <memory>
#include <string_view>

#include "naarpc/status.h"
#include "naarpc/transport.h"

namespace naarpc {

// name: "emulated", "verbs", or "auto" (verbs if an RDMA device exists,
// else emulated). Unknown names fail with kInvalidArgument.
// rdma_device: for verbs, the RDMA device to use (VerbsOptions::device;
// empty = the one the address routes to); an error with "emulated".
Result<std::unique_ptr<Transport>> NewTransport(std::string_view name,
                                                std::string_view rdma_device = {});

// The RDMA device that owns the local IP address `address` (e.g. the
// NAA_LOCAL_IP); kNotFound naming the address if none has it.
Result<std::string> RdmaDeviceOfAddress(const std::string& address);

}  // namespace naarpc

#endif  // NAARPC_TRANSPORT_FACTORY_H_
