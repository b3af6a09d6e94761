#include "tools/naarpc/cli_common.h"

#include <cstdio>

#include "idl/load.h"
#include "naarpc/discovery.h"

namespace naarpc::cli {

std::string HumanBytes(uint64_t n) {
  char buf[32];
  if (n >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", n / 1048576.0);
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "naarpc: %s\n", message.c_str());
  return code;
}

int ExitFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNaaError:
      return kExitNaaStatus;
    case StatusCode::kDeadlineExceeded:
      return kExitDeadline;
    case StatusCode::kUnavailable:
    case StatusCode::kDisconnected:
    case StatusCode::kTransportError:
    case StatusCode::kMrspError:
    case StatusCode::kNotFound:
    case StatusCode::kProtocolError:
      return kExitUnreachable;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

Result<idl::IdlFile> LoadIdl(const std::string& path) {
  std::vector<idl::Diagnostic> diags;
  auto idl = idl::Load(path, &diags);
  for (const idl::Diagnostic& d : diags) {
    if (!d.is_error() || !idl.ok()) {
      std::fprintf(stderr, "%s\n", d.ToString().c_str());
    }
  }
  return idl;
}

std::string Hint(const Status& s, const Target& t, const std::string& transport) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kNotFound:
      return "is an NAA (e.g. `naarpc serve`) listening on " + HostPort(t.host, t.port) +
             " over the " + transport +
             " transport? (--target, --transport)";
    case StatusCode::kDeadlineExceeded:
      return "raise --deadline (milliseconds), or check the NAA's kernel and its timeout";
    case StatusCode::kMrspError:
      return "the NAA refused the routine's memory regions (see the MRSP error code)";
    case StatusCode::kInvalidArgument:
      if (s.message().find("single_send needs the reference dialect") != std::string::npos) {
        return "the IDL marks this parameter single_send, a feature of the reference dialect: "
               "call with --dialect reference";
      }
      return "";
    default:
      return "";
  }
}

Result<ClientOptions> ClientOptionsFor(const CommonArgs& c) {
  auto dialect = ParseDialect(c.dialect);
  if (!dialect.ok()) return dialect.status();
  if (c.memory_windows && *dialect != Dialect::kSpec) {
    return InvalidArgumentError(
        "--memory-windows needs --dialect spec (the window keys travel in the spec dialect's "
        "metadata; the reference dialect has none)");
  }
  ClientOptions options;
  options.dialect = *dialect;
  if (c.memory_windows || c.no_memory_windows) options.memory_windows = c.memory_windows;
  return options;
}

Result<LocalSide> LocalSideFor(const CommonArgs& c) {
  return LocalSideFromEnvironment(c.transport, c.device);
}

}  // namespace naarpc::cli
