// `naarpc call`: one routine called with inputs from the command line, over
// one NAA or a channel of several (docs/cli.md).
#ifndef NAARPC_TOOLS_NAARPC_CALL_COMMAND_H_
#define NAARPC_TOOLS_NAARPC_CALL_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tools/naarpc/cli_common.h"

namespace naarpc::cli {

struct CallArgs {
  CommonArgs common;
  std::string routine;
  std::vector<std::string> inputs, outputs;
  std::string format = "auto";
  uint64_t repeat = 1;
  bool json = false;
};

// Runs the command; returns the exit status.
int Call(const CallArgs& a);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_CALL_COMMAND_H_
