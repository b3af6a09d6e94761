// Socket addresses as text, for peer names and errors of the transports.
#ifndef NAARPC_RUNTIME_SOCKADDR_TEXT_H_
#define NAARPC_RUNTIME_SOCKADDR_TEXT_H_

#include <sys/socket.h>

#include <string>

namespace naarpc {

// "192.0.2.1:7" or "[2001:db8::1]:7" (naarpc::HostPort); "?" for nullptr
// or a family other than IPv4/IPv6.
std::string SockaddrToString(const sockaddr* sa);

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_SOCKADDR_TEXT_H_
