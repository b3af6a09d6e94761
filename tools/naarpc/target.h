// Finding what a dynamic call goes to: the routine by name, the NAA by
// HOST[:PORT] or the NAAICE discovery variables (NAA_SPEC, NAA_LOCAL_IP), the
// wire dialect by name. Shared by the `naarpc` CLI and the Python module
// (python/), so both accept and refuse the same things with the same words.
#ifndef NAARPC_TOOLS_NAARPC_TARGET_H_
#define NAARPC_TOOLS_NAARPC_TARGET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "idl/ir.h"
#include "naarpc/discovery.h"
#include "naarpc/protocol.h"
#include "naarpc/status.h"
#include "tools/naarpc/local_ip.h"

namespace naarpc::cli {

// "Service.Routine" (or "Routine" if the name is unique in the file). Unknown:
// kNotFound listing the routines there are; ambiguous: kInvalidArgument.
Status FindRoutine(const idl::IdlFile& idl, const std::string& name, const idl::Service** service,
                   const idl::Routine** routine);

struct Target {
  std::string host;
  uint16_t port = kDefaultNaaPort;
};

// HOST, HOST:PORT, [IPv6], [IPv6]:PORT. `option` names the value in errors
// ("--target", "target").
Result<Target> ParseTarget(const std::string& text, std::string_view option = "--target");

// `target` if not empty, else the NAA_SPEC entry for the routine's function
// code (its param_count checked against the routine).
Result<Target> ResolveTarget(const std::string& target, const idl::Routine& routine,
                             std::string_view option = "--target");

// The --target values (each HOST[:PORT]) or, if there are none, every
// NAA_SPEC entry for the routine's function code (each checked as
// ResolveTarget checks one).
Result<std::vector<Target>> ResolveTargets(const std::vector<std::string>& targets,
                                           const idl::Routine& routine,
                                           std::string_view option = "--target");

// "spec" or "reference".
Result<Dialect> ParseDialect(const std::string& d, std::string_view option = "--dialect");

// The transport and device for `transport` / `device`, adjusted for
// NAA_LOCAL_IP if it is set (local_ip.h).
Result<LocalSide> LocalSideFromEnvironment(const std::string& transport,
                                           const std::string& device);

// The transport a message names: "emulated", or "auto (emulated)" when
// auto chose the backend (`resolved`: Transport::name(); empty if unknown).
std::string TransportLabel(const std::string& requested, std::string_view resolved);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_TARGET_H_
