// Hostile input to the IDL front-end: bytes that are not UTF-8 text, YAML
// that is too deep or too large, YAML features the IDL does not support and
// YAML 1.1 surprises. Each is one error at its line:column that says what
// to do, never a crash or a silent misreading.
#include <gtest/gtest.h>

#include <string>

#include "tests/idl/test_util.h"

namespace naarpc::idl::testing {
namespace {

// An error at line:column (any field) containing `fragment`.
::testing::AssertionResult ErrorAt(std::string_view text, int line, int column,
                                   std::string_view fragment) {
  bool ok = false;
  const std::vector<Diagnostic> diags = Diagnose(text, &ok);
  if (ok) return ::testing::AssertionFailure() << "accepted; diagnostics:" << Lines(diags);
  for (const Diagnostic& d : diags) {
    if (d.is_error() && d.location.line == line && d.location.column == column &&
        d.message.find(fragment) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << "no error at " << line << ":" << column << " with '"
                                       << fragment << "' among:" << Lines(diags);
}

std::string WithCode(std::string_view code) { return Idl(Routine("Add", code)); }

TEST(Input, NotUtf8) {
  EXPECT_TRUE(ErrorAt("package: t\xe9\n", 1, 11, "invalid UTF-8 (byte 0xe9)"));
  EXPECT_TRUE(ErrorAt("package: t\xe9\n", 1, 11, "iconv -f LATIN1 -t UTF-8"));
  EXPECT_TRUE(ErrorAt(std::string("\xff\xfep\0a\0", 6), 1, 1, "the file is UTF-16"));
  EXPECT_TRUE(ErrorAt(std::string("package: t\0x\n", 13), 1, 11, "NUL byte"));
}

TEST(Input, ControlCharactersInDocs) {
  EXPECT_EQ(ErrorCount(Idl(Routine(), "    doc: \"a\\u0007b\"\n")), 1);
  EXPECT_EQ(ErrorCount(Idl(Routine(), "    doc: \"a\\u202eb\"\n")), 1);
  EXPECT_TRUE(Accepted(Idl(Routine(), "    doc: \"tab\\there, */ and C:\\\\data\\\\\"\n")));
}

TEST(Input, DepthAndSize) {
  const std::string deep = "package: " + std::string(5000, '[') + std::string(5000, ']') + "\n";
  EXPECT_TRUE(ErrorAt(deep, 1, 41, "YAML nesting deeper than 32 levels"));
  std::string huge = Idl() + "# " + std::string(kMaxIdlFileBytes, 'x') + "\n";
  bool ok = true;
  const auto diags = Diagnose(huge, &ok);
  EXPECT_FALSE(ok);
  ASSERT_EQ(diags.size(), 1u) << Lines(diags);
  EXPECT_NE(diags[0].ToString().find("t.naa.yaml:"), std::string::npos);
}

TEST(Input, DocumentRootNotAMappingIsReportedAtItsLine) {
  EXPECT_TRUE(ErrorAt("- a\n- b\n", 1, 1, "expected the document to be a mapping"));
  EXPECT_TRUE(ErrorAt("# a comment\n\n- a\n", 3, 1, "got a list"));
}

TEST(Input, YamlSyntaxErrorsKeepTheParsersContext) {
  EXPECT_TRUE(ErrorAt("package: t\nservices: [\n  {a: 1\n", 4, 1,
                      "while parsing the flow mapping that starts at line 3, column 3"));
}

// yaml-cpp reads a quoted string without its closing quote to the end of
// the file without an error: it is one, at the opening quote, and alone
// (what the string swallowed is not reported as missing).
TEST(Input, UnterminatedQuotedStringAtTheEnd) {
  const std::string routine = Idl();  // its last line is 9
  const auto only = [](std::string_view text, int line, int column) {
    bool ok = true;
    const std::vector<Diagnostic> diags = Diagnose(text, &ok);
    EXPECT_FALSE(ok);
    ASSERT_EQ(diags.size(), 1u) << Lines(diags);
    EXPECT_EQ(diags[0].location, (Location{line, column})) << Lines(diags);
    EXPECT_EQ(diags[0].message, "YAML syntax error: unterminated quoted string");
  };
  only(routine + "        doc: \"unterminated", 10, 14);
  only(routine + "        doc: \"unterminated\n", 10, 14);
  only("package: 'audit.t\nservices: []\n", 1, 10);
  only(routine + "        doc: \"an escaped \\\" is no end\n", 10, 14);
  only(routine + "        doc: 'nor is '' in single quotes\n", 10, 14);
  only(routine + "        doc: !!str \"tagged\n", 10, 20);
  only(Idl(Routine("Add", "1",  // columns count characters: é is 2 bytes
                   "          - {doc: \"\u00e9\", name: a, type: f32, size: 4, direction: \"in}\n")),
       8, 64);
  only(Idl(Routine("Add", "1",
                   "          - {name: a, type: f32, size: 4, direction: in, doc: \"x}\n")),
       8, 63);
  const Result<IdlFile> r = LoadFromString(routine + "        doc: \"x", kPath);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // Closed ones, whatever they hold.
  EXPECT_TRUE(Accepted(routine + "        doc: \"say \\\"hi\\\"\""));
  EXPECT_TRUE(Accepted(routine + "        doc: \"C:\\\\\""));
  EXPECT_TRUE(Accepted(routine + "        doc: 'it''s'"));
  EXPECT_TRUE(Accepted(routine + "        doc: \"two\n          lines\"\n"));
  EXPECT_TRUE(Accepted(routine + "        doc: it's \"plain\n"));
  EXPECT_TRUE(Accepted(routine + "        doc: |\n          a \" in a block\n"));
}

TEST(Input, UnsupportedYamlFeaturesAreNamed) {
  const std::string merge =
      "x: &a {p: 1}\npackage: t\nservices:\n  - <<: *a\n    name: S\n";
  EXPECT_TRUE(ErrorAt(merge, 1, 4, "anchors and aliases are not supported by the IDL"));
  EXPECT_TRUE(ErrorAt(merge, 4, 5, "merge keys (<<) are not supported by the IDL"));
}

TEST(Input, IntegersAreDecimalOrHexOnly) {
  EXPECT_TRUE(Accepted(WithCode("0x10")));
  EXPECT_TRUE(Accepted(WithCode("16")));
  EXPECT_TRUE(ErrorAt(WithCode("010"), 6, 15, "YAML 1.1 reads '010' as an octal number"));
  EXPECT_TRUE(ErrorAt(WithCode("1:30"), 6, 15, "base-60"));
  EXPECT_TRUE(ErrorAt(WithCode("OFF"), 6, 15, "a boolean in YAML 1.1"));
  EXPECT_TRUE(ErrorAt(WithCode("1e3"), 6, 15, "exponent notation"));
  EXPECT_TRUE(ErrorAt(WithCode("!!int abc"), 6, 15, "tagged !!int but is not an integer"));
}

TEST(Input, Yaml11BooleansAreNotBooleans) {
  // single_send takes true/false only: `yes` is a YAML 1.1 boolean.
  const std::string params =
      "          - {name: a, type: f32, size: 4, direction: in, single_send: yes}\n"
      "          - {name: out, type: f32, size: 4, direction: out}\n";
  bool ok = true;
  const auto diags = Diagnose(Idl(Routine("Add", "1", params)), &ok);
  EXPECT_FALSE(ok) << Lines(diags);
}

}  // namespace
}  // namespace naarpc::idl::testing
