// NAA discovery the NAAICE reference library's way: the environment names
// the NAAs and the function codes they serve, so a program written for the
// reference library's environment finds its NAA unchanged.
//
//   NAA_SPEC=<address>:<port>:<fncode>:<param_count>[,<entry>...]
//   NAA_LOCAL_IP=<address>          (optional: the local side's address)
//
// An empty port means the default NAA port 12345. An IPv6 address is
// written in brackets ("[fe80::1]:12345:3:2").
#ifndef NAARPC_DISCOVERY_H_
#define NAARPC_DISCOVERY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "naarpc/status.h"

namespace naarpc {

inline constexpr uint16_t kDefaultNaaPort = 12345;

// One NAA_SPEC entry: where the NAA serving `function_code` listens.
struct NaaEndpoint {
  std::string address;  // host name or IP literal (IPv6 without brackets)
  uint16_t port = kDefaultNaaPort;
  uint8_t function_code = 0;  // 1..127
  uint32_t param_count = 0;   // the routine's parameter count, 1..255
};

// Parses a NAA_SPEC value. kInvalidArgument names the entry (1-based), its
// text and the field that is wrong; every entry must be valid. A function
// code may be served by several NAAs (one entry each, the same parameter
// count: a naarpc::Channel spreads calls over them), but named once per NAA.
Result<std::vector<NaaEndpoint>> ParseNaaSpec(std::string_view spec);

// What the environment says: NAA_SPEC (required: kNotFound if unset or
// empty) and NAA_LOCAL_IP (optional).
struct NaaDiscovery {
  std::vector<NaaEndpoint> endpoints;
  std::optional<std::string> local_ip;
  // The first entry for `function_code`; kNotFound naming the codes there are.
  Result<NaaEndpoint> Find(uint8_t function_code) const;
};
Result<NaaDiscovery> DiscoverNaa();

// Checks an NAA_LOCAL_IP value: an IPv4 or IPv6 literal (brackets allowed)
// that is an address of this host. kInvalidArgument names it
// ("NAA_LOCAL_IP=<address>: ...").
Status CheckLocalIp(std::string_view address);

}  // namespace naarpc

#endif  // NAARPC_DISCOVERY_H_
