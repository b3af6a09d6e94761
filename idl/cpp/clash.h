// The C++ name-clash analysis: a model of every scope the generated code
// has (namespace, classes, nested classes, function parameter lists and
// bodies), with the names each IDL declaration makes the templates declare
// there and the names generated code looks up there. Two declarations of
// one name in a scope, a declaration that hides a name a generated body
// needs, and a generated name that is a keyword or a header macro are
// errors naming both declarations and their lines.
//
// The model follows codegen/templates/*.j2; //tests/idl:generator_fuzz_test
// compiles random IDLs with hostile names to keep the two in step.
#ifndef NAARPC_IDL_CPP_CLASH_H_
#define NAARPC_IDL_CPP_CLASH_H_

#include <string>
#include <string_view>
#include <vector>

#include "idl/ir.h"
#include "idl/internal/sink.h"
#include "idl/internal/validate.h"

namespace naarpc::idl::internal {

// The members <S>ChannelClient declares besides the routines' methods
// (codegen/templates/channel_client.h.j2).
inline constexpr std::string_view kChannelClientMembers[] = {"with_key", "channel", "naa_client",
                                                            "stubs_", "key_"};

void CheckNameClashes(const IdlFile& idl, const FileNames& names, Sink& sink);

// For tests and debugging: every scope with its declarations
// ("name <- origin") and lookups, one per line.
std::string DescribeNameModel(const IdlFile& idl, const FileNames& names);

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_CPP_CLASH_H_
