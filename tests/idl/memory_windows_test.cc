// `memory_windows` (docs/idl.md): the service's declaration is its
// routines' default, a routine's own wins; values, and the routines that
// cannot use windows, are errors at their line and column.
#include <gtest/gtest.h>

#include <string>

#include "idl/load.h"
#include "tests/idl/test_util.h"

namespace naarpc::idl {
namespace {

using testing::Accepted;
using testing::HasError;
using testing::Idl;
using testing::Routine;

constexpr char kStreamParams[] =
    "          - {name: data, type: f32, direction: in, stream: {chunk: 1024, window: 4}}\n"
    "          - {name: out, type: f32, size: 4, direction: out}\n";
constexpr char kSingleSendParams[] =
    "          - {name: w, type: f32, size: 4, direction: in, single_send: true}\n"
    "          - {name: out, type: f32, size: 4, direction: out}\n";

Result<IdlFile> Load(const std::string& text) {
  std::vector<Diagnostic> diags;
  Result<IdlFile> idl = LoadFromString(text, testing::kPath, &diags);
  EXPECT_TRUE(diags.empty()) << diags.size() << " diagnostic(s), first: "
                             << (diags.empty() ? "" : diags[0].ToString());
  return idl;
}

TEST(MemoryWindows, OffUnlessDeclared) {
  Result<IdlFile> idl = Load(Idl());
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  EXPECT_FALSE(idl->services[0].memory_windows);
  EXPECT_FALSE(idl->services[0].routines[0].memory_windows);
}

TEST(MemoryWindows, ServiceDeclarationIsTheRoutinesDefault) {
  Result<IdlFile> idl =
      Load(Idl(Routine("Add", "1") +
                   Routine("Sub", "2", "", "        memory_windows: none\n") +
                   Routine("Mul", "3", "", "        memory_windows: required\n"),
               "    memory_windows: required\n"));
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  const Service& s = idl->services[0];
  EXPECT_TRUE(s.memory_windows);
  EXPECT_TRUE(s.routines[0].memory_windows);   // inherited
  EXPECT_FALSE(s.routines[1].memory_windows);  // its own `none` wins
  EXPECT_TRUE(s.routines[2].memory_windows);
}

TEST(MemoryWindows, RoutineDeclarationAlone) {
  Result<IdlFile> idl =
      Load(Idl(Routine("Add", "1", "", "        memory_windows: required\n") + Routine("Sub", "2")));
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  EXPECT_FALSE(idl->services[0].memory_windows);
  EXPECT_TRUE(idl->services[0].routines[0].memory_windows);
  EXPECT_FALSE(idl->services[0].routines[1].memory_windows);
}

TEST(MemoryWindows, BadValues) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "", "        memory_windows: always\n")), 7, 25,
                       "services[0].routines[0].memory_windows",
                       "string 'always' is not one of: required, none"));
  // YAML 1.1 tools read `off` and `true` as booleans: neither is a value here.
  EXPECT_TRUE(HasError(Idl(Routine(), "    memory_windows: off\n"), 4, 21,
                       "services[0].memory_windows",
                       "'off' (a boolean in YAML 1.1) is not one of: required, none"));
  EXPECT_TRUE(HasError(Idl(Routine(), "    memory_windows: true\n"), 4, 21,
                       "services[0].memory_windows", "is not one of: required, none"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "", "        memory_windows:\n")), 7, 9,
                       "services[0].routines[0].memory_windows",
                       "expected required or none, got null (empty value)"));
}

TEST(MemoryWindows, NotWithStreams) {
  EXPECT_TRUE(HasError(
      Idl(Routine("Add", "1", kStreamParams, "        memory_windows: required\n")), 7, 25,
      "services[0].routines[0].memory_windows",
      "routine 'Add' has stream 'data' and cannot use memory windows: a stream's ring keeps "
      "connection-long keys"));
  // Inherited: reported at the routine, naming the service's declaration.
  const std::string inherited =
      Idl(Routine("Add", "1") + Routine("Pipe", "2", kStreamParams), "    memory_windows: required\n");
  EXPECT_TRUE(HasError(inherited, 11, 15, "services[0].routines[1]",
                       "routine 'Pipe' has stream 'data' and cannot use memory windows: a "
                       "stream's ring keeps connection-long keys; it inherits 'memory_windows: "
                       "required' from service 'Svc' (line 4): declare 'memory_windows: none' on "
                       "it"));
  EXPECT_TRUE(Accepted(Idl(Routine("Add", "1") + Routine("Pipe", "2", kStreamParams,
                                                         "        memory_windows: none\n"),
                           "    memory_windows: required\n")));
}

// single_send is the reference dialect's; the window keys travel in the
// spec dialect's metadata region, so no session could have both.
TEST(MemoryWindows, NotWithTheReferenceDialect) {
  EXPECT_TRUE(HasError(
      Idl(Routine("Add", "1", kSingleSendParams, "        memory_windows: required\n")), 7, 25,
      "services[0].routines[0].memory_windows",
      "routine 'Add' cannot use memory windows: parameter 'w' is single_send, which needs the "
      "reference dialect, and the window keys travel in the spec dialect's metadata region"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", kSingleSendParams), "    memory_windows: required\n"),
                       6, 15, "services[0].routines[0]", "(line 4): declare 'memory_windows: none'"));
}

}  // namespace
}  // namespace naarpc::idl
