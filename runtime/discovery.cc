#include "naarpc/discovery.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>

namespace naarpc {
namespace {

// Parses a decimal in [lo, hi]; nullopt if anything else.
std::optional<uint64_t> Decimal(std::string_view s, uint64_t lo, uint64_t hi) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

Result<NaaEndpoint> ParseEntry(std::string_view entry, size_t number) {
  const std::string where = "NAA_SPEC entry " + std::to_string(number) + " " + Quote(entry);
  NaaEndpoint e;
  std::string_view rest = entry;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:...
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgumentError(where + ": address: '[' without ']'");
    }
    e.address = std::string(rest.substr(1, close - 1));
    rest.remove_prefix(close + 1);
    if (rest.empty() || rest.front() != ':') {
      return InvalidArgumentError(where + ": expected ':' after the bracketed address");
    }
    rest.remove_prefix(1);
  } else {
    const size_t colon = rest.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgumentError(where +
                                  ": expected <address>:<port>:<fncode>:<param_count>");
    }
    e.address = std::string(rest.substr(0, colon));
    rest.remove_prefix(colon + 1);
  }
  if (e.address.empty()) return InvalidArgumentError(where + ": address is empty");
  // port:fncode:param_count
  std::string_view fields[3];
  for (int i = 0; i < 3; ++i) {
    const size_t colon = rest.find(':');
    if (i < 2 && colon == std::string_view::npos) {
      return InvalidArgumentError(where + ": expected <address>:<port>:<fncode>:<param_count> (" +
                                  std::to_string(i + 2) + " fields found)");
    }
    fields[i] = i < 2 ? rest.substr(0, colon) : rest;
    if (i < 2) rest.remove_prefix(colon + 1);
  }
  if (fields[2].find(':') != std::string_view::npos) {
    return InvalidArgumentError(where + ": more than 4 fields (an IPv6 address needs brackets)");
  }
  if (!fields[0].empty()) {
    auto port = Decimal(fields[0], 1, 65535);
    if (!port) return InvalidArgumentError(where + ": port " + Quote(fields[0]) + " is not 1..65535");
    e.port = static_cast<uint16_t>(*port);
  }
  auto code = Decimal(fields[1], 1, 127);
  if (!code) {
    return InvalidArgumentError(where + ": function code " + Quote(fields[1]) + " is not 1..127");
  }
  e.function_code = static_cast<uint8_t>(*code);
  auto count = Decimal(fields[2], 1, 255);
  if (!count) {
    return InvalidArgumentError(where + ": parameter count " + Quote(fields[2]) +
                                " is not 1..255");
  }
  e.param_count = static_cast<uint32_t>(*count);
  return e;
}

}  // namespace

Result<std::vector<NaaEndpoint>> ParseNaaSpec(std::string_view spec) {
  std::vector<NaaEndpoint> out;
  size_t number = 0;
  while (true) {
    ++number;
    const size_t comma = spec.find(',');
    const std::string_view entry = spec.substr(0, comma);
    if (entry.empty()) {
      return InvalidArgumentError("NAA_SPEC entry " + std::to_string(number) + " is empty");
    }
    NAARPC_ASSIGN_OR_RETURN(NaaEndpoint e, ParseEntry(entry, number));
    for (const NaaEndpoint& prev : out) {
      if (prev.function_code == e.function_code && prev.address == e.address &&
          prev.port == e.port) {
        return InvalidArgumentError("NAA_SPEC entry " + std::to_string(number) + " " +
                                    Quote(entry) + ": function code " +
                                    std::to_string(e.function_code) + " is named twice for " +
                                    Quote(e.address + ":" + std::to_string(e.port)));
      }
      if (prev.function_code == e.function_code && prev.param_count != e.param_count) {
        return InvalidArgumentError(
            "NAA_SPEC entry " + std::to_string(number) + " " + Quote(entry) + ": function code " +
            std::to_string(e.function_code) + " has parameter count " +
            std::to_string(e.param_count) + " here and " + std::to_string(prev.param_count) +
            " in an entry before");
      }
    }
    out.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return out;
}

Result<NaaEndpoint> NaaDiscovery::Find(uint8_t function_code) const {
  std::string codes;
  for (const NaaEndpoint& e : endpoints) {
    if (e.function_code == function_code) return e;
    codes += (codes.empty() ? "" : ", ") + std::to_string(e.function_code);
  }
  return NotFoundError("NAA_SPEC names no NAA for function code " + std::to_string(function_code) +
                       " (it names " + (codes.empty() ? std::string("none") : codes) + ")");
}

Result<NaaDiscovery> DiscoverNaa() {
  const char* spec = std::getenv("NAA_SPEC");
  if (spec == nullptr || *spec == '\0') {
    return NotFoundError(
        "NAA_SPEC is not set (<address>:<port>:<fncode>:<param_count>[,...], as for the NAAICE "
        "reference library)");
  }
  NaaDiscovery d;
  NAARPC_ASSIGN_OR_RETURN(d.endpoints, ParseNaaSpec(spec));
  if (const char* local = std::getenv("NAA_LOCAL_IP"); local != nullptr && *local != '\0') {
    d.local_ip = local;
  }
  return d;
}

Status CheckLocalIp(std::string_view address) {
  const std::string what = "NAA_LOCAL_IP=" + std::string(address);
  std::string bare(address);
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, bare.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, bare.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return InvalidArgumentError(what + ": not an IPv4 or IPv6 address");
  }
  // An address of this host is one a socket can bind to.
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool local = fd >= 0 && bind(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0;
  if (fd >= 0) close(fd);
  if (!local) {
    return InvalidArgumentError(what +
                                ": not an address of this host (unset it, or give one of this "
                                "host's addresses)");
  }
  return Status::Ok();
}

}  // namespace naarpc
