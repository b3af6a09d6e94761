#include "runtime/sockaddr_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "naarpc/transport.h"

namespace naarpc {

std::string SockaddrToString(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa != nullptr && sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    if (::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) != nullptr) {
      return HostPort(buf, ntohs(in->sin_port));
    }
  } else if (sa != nullptr && sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf)) != nullptr) {
      return HostPort(buf, ntohs(in6->sin6_port));
    }
  }
  return "?";
}

}  // namespace naarpc
