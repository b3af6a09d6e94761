#include "tools/naarpc/local_ip.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace naarpc::cli {
namespace {

// `ip` as a socket address (port 0), or nullopt if it is no IP literal.
std::optional<sockaddr_storage> Parse(const std::string& ip) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    return ss;
  }
  std::string bare = ip;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  if (inet_pton(AF_INET6, bare.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    return ss;
  }
  return std::nullopt;
}

socklen_t Length(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

// Whether a socket can bind to the address (it belongs to this host).
bool IsLocal(const sockaddr_storage& ss) {
  const int fd = socket(ss.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const bool ok = bind(fd, reinterpret_cast<const sockaddr*>(&ss), Length(ss)) == 0;
  close(fd);
  return ok;
}

// The RDMA device owning the address, or "" if none.
std::string RdmaDeviceOf(sockaddr_storage ss) {
  rdma_event_channel* channel = rdma_create_event_channel();
  if (channel == nullptr) return "";
  std::string name;
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0) {
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&ss)) == 0 && id->verbs != nullptr) {
      name = ibv_get_device_name(id->verbs->device);
    }
    rdma_destroy_id(id);
  }
  rdma_destroy_event_channel(channel);
  return name;
}

}  // namespace

Result<LocalSide> ApplyLocalIp(const std::string& local_ip, const std::string& transport,
                               const std::string& device) {
  LocalSide side{transport, device};
  const std::string what = "NAA_LOCAL_IP=" + local_ip;
  auto addr = Parse(local_ip);
  if (!addr) return InvalidArgumentError(what + ": not an IPv4 or IPv6 address");
  if (!IsLocal(*addr)) {
    return InvalidArgumentError(what +
                                ": not an address of this host (unset it, or give one "
                                "of this host's addresses)");
  }
  if (transport == "emulated") return side;
  const std::string owner = RdmaDeviceOf(*addr);
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
