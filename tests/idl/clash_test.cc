// The C++ name-clash analysis (docs/idl.md, "Names"): two declarations that
// would generate the same C++ identifier in one scope are rejected, naming
// both and the generated name, at the later one's line:column.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "idl/cpp/clash.h"
#include "tests/idl/test_util.h"

namespace naarpc::idl::testing {
namespace {

std::string Services(std::string_view services) {
  return "package: t.pkg\nservices:\n" + std::string(services);
}
// A one-line routine with an input and an output parameter.
std::string R(std::string_view name, int code, std::string_view in = "a",
              std::string_view out = "o") {
  return "      - {name: " + std::string(name) + ", code: " + std::to_string(code) +
         ", params: [{name: " + std::string(in) + ", type: u8, size: 1, direction: in}, {name: " +
         std::string(out) + ", type: u8, size: 1, direction: out}]}\n";
}

::testing::AssertionResult Clash(std::string_view text, std::string_view fragment) {
  bool ok = false;
  const std::vector<Diagnostic> diags = Diagnose(text, &ok);
  if (ok) return ::testing::AssertionFailure() << "accepted:" << Lines(diags);
  for (const Diagnostic& d : diags) {
    if (d.is_error() && d.ToString().find(fragment) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << "no '" << fragment << "' among:" << Lines(diags);
}

TEST(Clash, RoutinesDifferingInCaseOrUnderscores) {
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("Add", 1) + R("add", 2)),
                    "t.naa.yaml:6:16: error: services[0].routines[1].name: routine 'add' "
                    "generates 'pool_add_'"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("GetX", 1) + R("Get_x", 2)),
                    "which routine 'GetX' at line 5 also generates"));
}

TEST(Clash, ServiceAndRoutineConcatenations) {
  EXPECT_TRUE(Clash(Services("  - name: A\n    routines:\n" + R("BC", 1) +
                             "  - name: AB\n    routines:\n" + R("C", 2)),
                    "routine 'C' generates 'ABCRoutine' (file-scope struct"));
}

TEST(Clash, ParametersAgainstGeneratedMembers) {
  EXPECT_TRUE(Clash(
      Services("  - name: S\n    routines:\n      - {name: R, code: 1, params: [{name: x, type: "
               "u8, max: 4, direction: in}, {name: x_size, type: u8, size: 1, direction: out}]}\n"),
      "parameter 'x_size' of 'R' generates 'x_size' (accessor of SClient::RCall)"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("R", 1, "lease_", "o")),
                    "which the generated code itself declares there (member lease_ of "
                    "SClient::RCall)"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("R", 1, "a", "RCall")),
                    "the name of class SClient::RCall"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("R", 1, "R", "o")),
                    "parameter 'R' of 'R' generates 'R' (argument of SClient::RAsync), which "
                    "hides 'R'"));
  // SChannelClient's methods forward to its members stubs_ and key_.
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("R", 1, "key_", "o")),
                    "parameter 'key_' of 'R' generates 'key_' (argument of SChannelClient::R"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("R", 1, "stubs_", "o")),
                    "which hides the generated 'stubs_'"));
}

TEST(Clash, ErrorNamesMappingToOneEnumerator) {
  const std::string routines = "    routines:\n" + R("R", 1);
  EXPECT_TRUE(Clash(Services("  - name: S\n    errors: [{name: FOO_1, code: 0x10}, {name: FOO1, "
                             "code: 0x11}]\n" + routines),
                    "error 'FOO1' generates 'kFoo1' (enumerator of SError), which error 'FOO_1'"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    errors: [{name: OK_, code: 0x12}]\n" + routines),
                    "error 'OK_' generates 'kOk' (enumerator of SError), which the generated code "
                    "itself declares there"));
}

TEST(Clash, RoutinesNamedLikeGeneratedClasses) {
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("SClient", 1)),
                    "routine 'SClient' generates 'SClient'"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("SService", 1)),
                    "routine 'SService' generates 'SService'"));
}

// Many services: each lookup sees only the declarations of its name (no
// longer every service's), and a clash across the file is still found.
TEST(Clash, ManyServices) {
  std::string many;
  for (int i = 0; i < 300; ++i) {
    many += "  - name: S" + std::to_string(i) + "\n    routines:\n" + R("R", 1);
  }
  EXPECT_TRUE(Accepted(Services(many)));
  EXPECT_TRUE(Clash(Services("  - name: A\n    routines:\n" + R("BC", 1) + many +
                             "  - name: AB\n    routines:\n" + R("C", 2)),
                    "routine 'C' generates 'ABCRoutine' (file-scope struct (in the .cc)), which "
                    "routine 'BC' at line 5 also generates"));
  EXPECT_TRUE(Clash(Services(many + "  - name: T\n    routines:\n" + R("R", 1, "R", "o")),
                    "parameter 'R' of 'R' generates 'R' (argument of TClient::RAsync), which "
                    "hides 'R'"));
}

TEST(Clash, DistinctNamesAreFine) {
  EXPECT_TRUE(Accepted(Services("  - name: S\n    routines:\n" + R("Add", 1) + R("Sub", 2) +
                                "  - name: T\n    routines:\n" + R("Add", 3))));
}

// Streams (docs/idl.md "Streams"): a stream is an argument of RCall::Invoke,
// and the streaming overloads add names of their own.
TEST(Clash, StreamParameters) {
  const auto streaming = [](std::string_view routine, std::string_view stream) {
    return "      - {name: " + std::string(routine) + ", code: 1, params: [{name: " +
           std::string(stream) +
           ", type: u8, direction: in, stream: {chunk: 8, window: 2}}, {name: o, type: u8, "
           "size: 1, direction: out}]}\n";
  };
  // Invoke(StreamSource<uint8_t>& lease_, ...) would hide the member it uses.
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + streaming("R", "lease_")),
                    "parameter 'lease_' of 'R' generates 'lease_' (argument of "
                    "SClient::RCall::Invoke), which hides the generated 'lease_'"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + streaming("R", "deadline")),
                    "generates 'deadline'"));
  // Accepted: a stream has no accessor, so names that only clash with one are fine.
  EXPECT_TRUE(Accepted(Services("  - name: S\n    routines:\n" + streaming("R", "Invoke2"))));
}

TEST(Clash, PackedStreamingMocks) {
  // 14 parameters: the mocks take tuples, RArgs and (with streams) RStreamArgs.
  const auto wide = [](std::string_view name, int code, bool stream) {
    std::string p;
    for (int i = 0; i < 13; ++i) {
      p += "{name: a" + std::to_string(i) + ", type: u8, size: 1, direction: in}, ";
    }
    p += stream ? "{name: o, type: u8, direction: out, stream: {chunk: 8, window: 2}}"
                : "{name: o, type: u8, size: 1, direction: out}";
    return "      - {name: " + std::string(name) + ", code: " + std::to_string(code) +
           ", params: [" + p + "]}\n";
  };
  EXPECT_TRUE(Accepted(Services("  - name: S\n    routines:\n" + wide("R", 1, true))));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + wide("R", 1, true) +
                             wide("RStream", 2, false)),
                    "routine 'RStream' generates 'RStreamArgs' (argument tuple type of "
                    "MockSClient), which routine 'R' at line 5 also generates"));
}

// <S>ChannelClient (channel_client.h.j2) declares members of its own: a
// routine named like one, or a parameter hiding one its stubs use, is
// rejected.
TEST(Clash, ChannelClientMembers) {
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("with_key", 1)),
                    "routine 'with_key' generates 'with_key'"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("channel", 1)),
                    "which the generated code itself declares there (member channel of "
                    "SChannelClient)"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("naa_client", 1)),
                    "generates 'naa_client'"));
  EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("SChannelClient", 1)),
                    "routine 'SChannelClient' generates 'SChannelClient'"));
  for (const char* member : {"stubs_", "key_"}) {
    EXPECT_TRUE(Clash(Services("  - name: S\n    routines:\n" + R("R", 1, member, "o")),
                      std::string("which hides the generated '") + member + "'"))
        << member;
  }
}

// The members the clash model knows (kChannelClientMembers) are those
// channel_client.h.j2 declares: a member added to the template without the
// model fails here.
TEST(Clash, ChannelClientMembersMatchTheTemplate) {
  std::ifstream in("codegen/templates/channel_client.h.j2");
  ASSERT_TRUE(in) << "codegen/templates/channel_client.h.j2 is not in the runfiles";
  std::stringstream text;
  text << in.rdbuf();
  // The class body: member declarations other than the routines' stubs
  // (whose names come from Jinja expressions) and the constructor.
  std::string body = text.str();
  const size_t open = body.find("ChannelClient final");
  ASSERT_NE(open, std::string::npos);
  body = body.substr(open);
  std::set<std::string> declared;
  const std::regex method(R"(([A-Za-z_][A-Za-z0-9_]*)\()");
  const std::regex data(R"(\s([a-z][A-Za-z0-9_]*_);)");
  body = body.substr(0, body.find("\n};"));
  // Jinja expressions and the names glued to them (the routines' stubs, the
  // constructor) go; so do inline bodies.
  const std::regex jinja(R"(\{\{[^}]*\}\}[A-Za-z0-9_]*)");
  const std::regex inline_body(R"(\{[^}]*\})");
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("{%") != std::string::npos) continue;
    std::string code = line.substr(0, line.find("//"));
    code = std::regex_replace(code, jinja, "@");
    code = std::regex_replace(code, inline_body, ";");
    for (const std::regex* re : {&method, &data}) {
      for (auto it = std::sregex_iterator(code.begin(), code.end(), *re);
           it != std::sregex_iterator(); ++it) {
        declared.insert((*it)[1]);
      }
    }
  }
  // Calls in default arguments and types are not members.
  for (const char* not_member : {"After", "void"}) declared.erase(not_member);
  const std::set<std::string> known(std::begin(internal::kChannelClientMembers),
                                    std::end(internal::kChannelClientMembers));
  EXPECT_EQ(declared, known);
}

}  // namespace
}  // namespace naarpc::idl::testing
