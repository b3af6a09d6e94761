#include "tools/naarpc/target.h"

#include <cstdlib>

namespace naarpc::cli {

Status FindRoutine(const idl::IdlFile& idl, const std::string& name, const idl::Service** service,
                   const idl::Routine** routine) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) {
    for (const idl::Service& s : idl.services) {
      if (const idl::Routine* r = s.FindRoutine(name)) {
        if (*routine != nullptr) {
          return InvalidArgumentError("routine '" + name +
                                      "' is in several services; write "
                                      "Service." +
                                      name);
        }
        *service = &s;
        *routine = r;
      }
    }
  } else {
    *service = idl.FindService(name.substr(0, dot));
    if (*service != nullptr) *routine = (*service)->FindRoutine(name.substr(dot + 1));
  }
  if (*routine == nullptr) {
    std::string all;
    for (const idl::Service& s : idl.services) {
      for (const idl::Routine& r : s.routines)
        all += (all.empty() ? "" : ", ") + s.name + "." + r.name;
    }
    return NotFoundError(idl.path + " has no routine '" + name + "' (routines: " + all +
                         "; see naarpc describe " + idl.path + ")");
  }
  return Status::Ok();
}

Result<Target> ParseTarget(const std::string& text, std::string_view option) {
  const std::string opt(option);
  Target t;
  std::string port;
  bool has_port = false;  // a ':' after the host: then a port must follow
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) {
      return InvalidArgumentError(opt + " '" + text + "': missing ']' after the IPv6 address");
    }
    t.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') {
        return InvalidArgumentError(opt + " '" + text + "': expected ':PORT' after ']'");
      }
      port = text.substr(close + 2);
      has_port = true;
    }
  } else {
    const size_t colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos) {
      return InvalidArgumentError(opt + " '" + text +
                                  "': write IPv6 addresses in brackets, "
                                  "[addr]:port");
    }
    t.host = text.substr(0, colon);
    if (colon != std::string::npos) {
      port = text.substr(colon + 1);
      has_port = true;
    }
  }
  if (t.host.empty()) return InvalidArgumentError(opt + " '" + text + "': no host");
  if (has_port) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(port.c_str(), &end, 10);
    if (port.empty() || end != port.c_str() + port.size() || v == 0 || v > 65535) {
      return InvalidArgumentError(opt + " '" + text + "': port '" + port +
                                  "' is not a number in 1..65535");
    }
    t.port = static_cast<uint16_t>(v);
  }
  return t;
}

Result<Target> ResolveTarget(const std::string& target, const idl::Routine& routine,
                             std::string_view option) {
  if (!target.empty()) return ParseTarget(target, option);
  if (std::getenv("NAA_SPEC") == nullptr) {
    const std::string opt(option);
    return InvalidArgumentError("no " + opt + ", and NAA_SPEC is not set; give " + opt +
                                " HOST[:PORT]");
  }
  auto discovery = DiscoverNaa();
  if (!discovery.ok()) return discovery.status();
  auto endpoint = discovery->Find(routine.code);
  if (!endpoint.ok()) return endpoint.status();
  if (endpoint->param_count != routine.params.size()) {
    return InvalidArgumentError("NAA_SPEC's entry for function code " +
                                std::to_string(routine.code) + " declares " +
                                std::to_string(endpoint->param_count) + " parameters, the IDL's " +
                                routine.name + " has " + std::to_string(routine.params.size()));
  }
  return Target{endpoint->address, endpoint->port};
}

Result<Dialect> ParseDialect(const std::string& d, std::string_view option) {
  if (d == "spec") return Dialect::kSpec;
  if (d == "reference") return Dialect::kReference;
  return InvalidArgumentError(std::string(option) + " '" + d + "': spec or reference");
}

Result<LocalSide> LocalSideFromEnvironment(const std::string& transport,
                                           const std::string& device) {
  const char* local = std::getenv("NAA_LOCAL_IP");
  if (local == nullptr || *local == '\0') return LocalSide{transport, device};
  return ApplyLocalIp(local, transport, device);
}

std::string TransportLabel(const std::string& requested, std::string_view resolved) {
  if (resolved.empty() || resolved == requested) return requested;
  return requested + " (" + std::string(resolved) + ")";
}

Result<std::vector<Target>> ResolveTargets(const std::vector<std::string>& targets,
                                           const idl::Routine& routine, std::string_view option) {
  std::vector<Target> out;
  for (const std::string& t : targets) {
    NAARPC_ASSIGN_OR_RETURN(Target one, ParseTarget(t, option));
    for (const Target& prev : out) {
      if (prev.host == one.host && prev.port == one.port) {
        return InvalidArgumentError(std::string(option) + " '" + t + "' is given twice");
      }
    }
    out.push_back(std::move(one));
  }
  if (!out.empty()) return out;
  // The first entry with ResolveTarget's checks and words, then the others.
  NAARPC_ASSIGN_OR_RETURN(Target first, ResolveTarget("", routine, option));
  out.push_back(first);
  NAARPC_ASSIGN_OR_RETURN(NaaDiscovery d, DiscoverNaa());
  for (const NaaEndpoint& e : d.endpoints) {
    if (e.function_code != routine.code || (e.address == first.host && e.port == first.port)) {
      continue;
    }
    out.push_back({e.address, e.port});
  }
  return out;
}

}  // namespace naarpc::cli
