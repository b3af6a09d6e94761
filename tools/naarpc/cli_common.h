// What the naarpc subcommands share: exit statuses, error output, loading
// the IDL file, hints for a failed call, and the options every command that
// calls an NAA takes (CommonArgs).
#ifndef NAARPC_TOOLS_NAARPC_CLI_COMMON_H_
#define NAARPC_TOOLS_NAARPC_CLI_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "idl/ir.h"
#include "naarpc/client_session.h"
#include "naarpc/status.h"
#include "tools/naarpc/local_ip.h"
#include "tools/naarpc/target.h"

namespace naarpc::cli {

// Exit statuses (also in --help).
enum Exit : int {
  kExitOk = 0,
  kExitFailure = 1,      // anything else
  kExitUsage = 2,        // bad command line or input values
  kExitIdl = 3,          // the IDL file is missing or invalid
  kExitUnreachable = 4,  // connect, MRSP or transport failure
  kExitDeadline = 5,     // the deadline passed
  kExitNaaStatus = 6,    // the NAA answered with a non-zero status
};

inline constexpr const char* kExitHelp =
    "Exit status: 0 success, 1 other failure, 2 bad command line or input, 3 IDL file "
    "missing or invalid, 4 NAA unreachable (connect, MRSP, transport), 5 deadline "
    "exceeded, 6 the NAA returned a non-zero status.";

// "1.5 MiB", "12.0 KiB", "17 B".
std::string HumanBytes(uint64_t n);

// Prints "naarpc: MESSAGE" to stderr; returns `code`.
int Fail(int code, const std::string& message);

// The exit status for a failed call's status.
int ExitFor(const Status& s);

// The IDL file at `path`; its diagnostics go to stderr.
Result<idl::IdlFile> LoadIdl(const std::string& path);

// A hint for a failed call ("" if none). `transport`: a TransportLabel.
std::string Hint(const Status& s, const Target& t, const std::string& transport);

// The options of every command that calls an NAA (call, bench).
struct CommonArgs {
  std::string idl, transport = "auto", device, dialect = "spec";
  std::vector<std::string> targets;  // --target, repeatable: a channel over them
  int64_t deadline_ms = 0;  // 0: the routine's default deadline
  // Per-call windows (docs/protocol.md 4.5): --memory-windows /
  // --no-memory-windows; neither: the routine's IDL declaration.
  bool memory_windows = false, no_memory_windows = false;
};

// --dialect and --[no-]memory-windows as ClientOptions.
Result<ClientOptions> ClientOptionsFor(const CommonArgs& c);

// --transport / --device, adjusted for NAA_LOCAL_IP if it is set.
Result<LocalSide> LocalSideFor(const CommonArgs& c);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_CLI_COMMON_H_
