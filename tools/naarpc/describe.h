// `naarpc describe`: what an IDL file declares, for people (text) and
// scripts (JSON, format "naarpc-describe/1").
#ifndef NAARPC_TOOLS_NAARPC_DESCRIBE_H_
#define NAARPC_TOOLS_NAARPC_DESCRIBE_H_

#include <string>
#include <string_view>

#include "idl/ir.h"
#include "naarpc/status.h"

namespace naarpc::cli {

// `selector`: "" (everything), "Service" or "Service.Routine"; an unknown
// name is kNotFound listing the names there are.
Result<std::string> DescribeText(const idl::IdlFile& idl, std::string_view selector);
Result<std::string> DescribeJson(const idl::IdlFile& idl, std::string_view selector);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_DESCRIBE_H_
