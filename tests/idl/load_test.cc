// The rules of docs/idl.md: every violation is an error at its line and
// column, with the field path; one run reports all of them.
#include <gtest/gtest.h>

#include <string>

#include "idl/load.h"
#include "tests/idl/test_util.h"

namespace naarpc::idl {
namespace {

using testing::Accepted;
using testing::Diagnose;
using testing::ErrorCount;
using testing::HasError;
using testing::Idl;
using testing::Routine;

std::string Params(std::string_view a, std::string_view b) {
  return "          - " + std::string(a) + "\n          - " + std::string(b) + "\n";
}

TEST(Load, ValidIdlIsAccepted) {
  std::vector<Diagnostic> diags;
  Result<IdlFile> idl = testing::LoadForCpp(Idl(), testing::kPath, &diags);
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  EXPECT_TRUE(diags.empty());
  EXPECT_EQ(idl->cpp_namespace, "t::pkg");
  ASSERT_EQ(idl->services.size(), 1u);
  const Service& s = idl->services[0];
  EXPECT_EQ(s.timeout_ms, 10000u);
  ASSERT_EQ(s.routines.size(), 1u);
  EXPECT_EQ(s.routines[0].code, 1);
  EXPECT_EQ(s.routines[0].deadline_ms, 11000u);
  EXPECT_EQ(s.location, (Location{3, 11}));
}

TEST(Load, DuplicateFunctionCode) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1") + Routine("Sub", "1")), 11, 15,
                       "services[0].routines[1].code",
                       "function code 1 of routine 'Sub' is already used by 'Add' (line 5)"));
}

TEST(Load, FunctionCodeOutOfRange) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "128")), 6, 15, "services[0].routines[0].code",
                       "function code 128 is out of range 1..127"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "0")), 6, 15, "services[0].routines[0].code",
                       "out of range 1..127"));
}

TEST(Load, FunctionCodeNotAnInteger) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "one")), 6, 15, "services[0].routines[0].code",
                       "expected an integer, got string 'one'"));
}

TEST(Load, UnknownType) {
  const std::string p = Params("{name: a, type: float128, size: 4, direction: in}",
                               "{name: out, type: f32, size: 4, direction: out}");
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", p)), 8, 29,
                       "services[0].routines[0].params[0].type",
                       "string 'float128' is not one of: u8, u16, u32"));
}

TEST(Load, ZeroSizeAndNegativeMax) {
  const std::string text = Idl(Routine("Add", "1", Params("{name: a, type: f32, size: 0, direction: in}",
                                                          "{name: out, type: f32, max: -3, direction: out}")));
  EXPECT_TRUE(HasError(text, 8, 40, "services[0].routines[0].params[0].size",
                       "parameter 'a' has size 0; it must be at least 1 element"));
  EXPECT_TRUE(HasError(text, 9, 41, "services[0].routines[0].params[1].max",
                       "parameter 'out' has max -3"));
}

TEST(Load, SizeAndMax) {
  const std::string text = Idl(Routine("Add", "1", Params("{name: a, type: f32, size: 4, max: 8, direction: in}",
                                                          "{name: out, type: f32, direction: out}")));
  EXPECT_EQ(ErrorCount(text), 2);
  EXPECT_TRUE(HasError(text, 8, 13, "services[0].routines[0].params[0]",
                       "give exactly one of 'size'"));
  EXPECT_TRUE(HasError(text, 9, 13, "services[0].routines[0].params[1]",
                       "give exactly one of 'size'"));
}

TEST(Load, OversizedParameter) {
  const std::string text = Idl(Routine("Add", "1", Params("{name: a, type: f64, size: 134217729, direction: in}",
                                                          "{name: out, type: u8, max: 1073741824, direction: out}")));
  EXPECT_TRUE(HasError(text, 8, 40, "services[0].routines[0].params[0].size",
                       "parameter 'a' needs 1073741832 bytes"));
  EXPECT_TRUE(HasError(text, 9, 40, "services[0].routines[0].params[1].max",
                       "including the 8-byte length header"));
  // Huge counts do not overflow the byte arithmetic.
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: f64, size: 9223372036854775807, direction: in}",
                                                      "{name: out, type: u8, size: 1, direction: out}"))),
                       8, 40, "services[0].routines[0].params[0].size", "needs"));
}

// Sizes over a limit are stated exactly, however large (never a capped value).
TEST(Load, OversizedCountsAreStatedExactly) {
  const std::string out = "{name: out, type: u8, size: 1, direction: out}";
  const std::string p0 = "services[0].routines[0].params[0]";
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: u8, size: 2199023255552, direction: in}", out))),
                       8, 39, p0 + ".size",
                       "parameter 'a' needs 2199023255552 bytes; one parameter is limited to "
                       "1073741824 bytes"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: f64, size: 2305843009213693952, direction: in}", out))),
                       8, 40, p0 + ".size", "parameter 'a' needs 18446744073709551616 bytes;"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: f64, size: 9223372036854775807, direction: in}", out))),
                       8, 40, p0 + ".size", "parameter 'a' needs 73786976294838206456 bytes;"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: u8, max: 2199023255552, direction: in}", out))),
                       8, 38, p0 + ".max", "parameter 'a' needs 2199023255560 bytes;"));
  EXPECT_TRUE(HasError(
      Idl(Routine("Add", "1", Params("{name: d, type: u64, direction: in, stream: {chunk: 2305843009213693952, window: 1}}", out))),
      8, 65, p0 + ".stream.chunk", "stream 'd' has chunks of 18446744073709551616 bytes;"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "",
                                   "        internal:\n          - {name: t, type: f64, size: 2305843009213693952}\n")),
                       8, 40, "services[0].routines[0].internal[0].size",
                       "internal region 't' needs 18446744073709551616 bytes; the limit is 1073741824"));
}

TEST(Load, OneGibParameterIsFine) {
  EXPECT_TRUE(Accepted(Idl(Routine("Add", "1", Params("{name: a, type: u8, size: 1073741824, direction: in}",
                                                      "{name: out, type: u8, size: 1, direction: out}")))));
}

TEST(Load, TotalOverBudget) {
  std::string p;
  for (int i = 0; i < 4; ++i) {
    p += "          - {name: a" + std::to_string(i) + ", type: u8, size: 1073741824, direction: in}\n";
  }
  p += "          - {name: out, type: u8, size: 1, direction: out}\n";
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", p)), 5, 9, "services[0].routines[0]",
                       "needs 4294967297 bytes of regions in total"));
}

TEST(Load, NoInputsOrNoOutputs) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "          - {name: out, type: f32, size: 4, direction: out}\n")),
                       8, 11, "services[0].routines[0].params", "routine 'Add' has no input parameter"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "          - {name: a, type: f32, size: 4, direction: in}\n")),
                       8, 11, "services[0].routines[0].params", "routine 'Add' has no output parameter"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "          []\n")), 8, 11,
                       "services[0].routines[0].params", "no input parameter"));
}

std::string ManyParams(int inputs) {
  std::string p;
  for (int i = 0; i < inputs; ++i) {
    p += "          - {name: a" + std::to_string(i) + ", type: u8, size: 1, direction: in}\n";
  }
  return p + "          - {name: out, type: u8, size: 1, direction: out}\n";
}

TEST(Load, TooManyRegions) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", ManyParams(254))), 5, 9, "services[0].routines[0]",
                       "needs 256 regions (with the metadata region); one MRSP message carries "
                       "at most 255"));
}

TEST(Load, MoreRegionsThanTheNaaDefaultWarns) {
  std::vector<Diagnostic> diags;
  Result<IdlFile> idl = testing::LoadForCpp(Idl(Routine("Add", "1", ManyParams(32))), testing::kPath, &diags);
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].ToString(),
            "t.naa.yaml:5:9: warning: services[0].routines[0]: routine 'Add' needs 34 regions "
            "(with the metadata region); NAAs accept 32 by default (MRSP error 0x03)");
}

TEST(Load, DeadlineNotAboveTimeoutWarns) {
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(testing::LoadForCpp(Idl(Routine("Add", "1", "", "        timeout_ms: 100\n        deadline_ms: 100\n")),
                             testing::kPath, &diags).ok());
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].location, (Location{8, 22}));
  EXPECT_NE(diags[0].message.find("client deadline 100 ms <= kernel timeout 100 ms"),
            std::string::npos);
}

TEST(Load, CppKeywordNames) {
  const std::string p = Params("{name: class, type: f32, size: 4, direction: in}",
                               "{name: out, type: f32, size: 4, direction: out}");
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", p)), 8, 20, "services[0].routines[0].params[0].name",
                       "'class' is a C++ keyword"));
  EXPECT_TRUE(HasError(Idl(Routine("delete")), 5, 15, "services[0].routines[0].name",
                       "'delete' is a C++ keyword"));
  EXPECT_TRUE(HasError(Idl("", "", "t.new"), 1, 10, "package", "'new' is a C++ keyword"));
  EXPECT_TRUE(HasError(Idl("", "", "t.std"), 1, 10, "package", "'std' is a C++ keyword or reserved"));
}

TEST(Load, ReservedNames) {
  const std::string text = Idl(Routine("Add", "1", Params("{name: naarpc_x, type: f32, size: 4, direction: in}",
                                                          "{name: deadline, type: f32, size: 4, direction: out}")));
  EXPECT_TRUE(HasError(text, 8, 20, "services[0].routines[0].params[0].name",
                       "prefix 'naarpc_' reserved for generated code"));
  EXPECT_TRUE(HasError(text, 9, 20, "services[0].routines[0].params[1].name",
                       "generates 'deadline' (argument of SvcClient::Add), which the generated "
                       "code itself declares there (argument deadline)"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a__b, type: f32, size: 4, direction: in}",
                                                      "{name: out, type: f32, size: 4, direction: out}"))),
                       8, 20, "services[0].routines[0].params[0].name",
                       "reserved in C++ (double underscore"));
  EXPECT_TRUE(HasError(Idl(Routine("Handle")), 5, 15, "services[0].routines[0].name",
                       "routine 'Handle' generates 'Handle' (kernel (pure virtual method) of "
                       "SvcService), which the generated code itself declares there (method "
                       "Handle, the NaaHandler dispatcher)"));
  EXPECT_TRUE(HasError(Idl("", "", "naarpc.x"), 1, 10, "package",
                       "packages under it must start with naarpc.services"));
  EXPECT_TRUE(Accepted(Idl("", "", "naarpc.services.x")));
}

TEST(Load, BadIdentifier) {
  EXPECT_TRUE(HasError(Idl(Routine("'9lives'")), 5, 15, "services[0].routines[0].name",
                       "'9lives' is not an identifier"));
  EXPECT_TRUE(HasError(Idl("", "", "a..b"), 1, 10, "package", "is not a dotted name"));
}

TEST(Load, DuplicateRoutineName) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1") + Routine("Add", "2")), 10, 15,
                       "services[0].routines[1].name", "duplicate routine name 'Add' (first at line 5)"));
  // The duplicate is not reported again as a clash of everything it generates.
  EXPECT_EQ(ErrorCount(Idl(Routine("Add", "1") + Routine("Add", "2"))), 1);
}

TEST(Load, DuplicateServiceName) {
  const std::string text = "package: t.pkg\nservices:\n  - name: S\n    routines:\n" + Routine() +
                           "  - name: T\n    routines:\n" + Routine() +
                           "  - name: S\n    routines:\n" + Routine();
  EXPECT_TRUE(HasError(text, 17, 11, "services[2].name", "duplicate service name 'S' (first at line 3)"));
  EXPECT_EQ(ErrorCount(text), 1) << testing::Lines(Diagnose(text));
  // The front-end alone (the CLI's, Python's) rejects it too.
  EXPECT_FALSE(LoadFromString(text, testing::kPath).ok());
}

TEST(Load, DuplicateParameterAndInternalName) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: f32, size: 4, direction: in}",
                                                      "{name: a, type: f32, size: 4, direction: out}"))),
                       9, 20, "services[0].routines[0].params[1].name", "duplicate name 'a' (first at line 8)"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "", "        internal:\n          - {name: out, size: 8}\n")),
                       8, 20, "services[0].routines[0].internal[0].name",
                       "duplicate name 'out' (first at line 11)"));
}

TEST(Load, BadErrorCodes) {
  const std::string text = Idl("",
                               "    errors:\n"
                               "      - {name: LOW, code: 0x05}\n"
                               "      - {name: HIGH, code: 0x80}\n"
                               "      - {name: lower_case, code: 0x11}\n");
  EXPECT_TRUE(HasError(text, 5, 27, "services[0].errors[0].code", "5 is below the minimum 16 (0x10)"));
  EXPECT_TRUE(HasError(text, 6, 28, "services[0].errors[1].code", "128 is above the maximum 127 (0x7f)"));
  EXPECT_TRUE(HasError(text, 7, 16, "services[0].errors[2].name", "'lower_case' is not UPPER_SNAKE_CASE"));
}

TEST(Load, DuplicateErrorCodeAndName) {
  const std::string text = Idl(Routine("Add", "1", "",
                                       "        errors:\n"
                                       "          - {name: WORSE, code: 0x10}\n"
                                       "          - {name: BAD, code: 0x11}\n"
                                       "          - {name: OK, code: 0x12}\n"),
                               "    errors:\n      - {name: BAD, code: 0x10}\n");
  EXPECT_TRUE(HasError(text, 10, 33, "services[0].routines[0].errors[0].code",
                       "error code 0x10 of 'WORSE' is already used by 'BAD' (line 5)"));
  EXPECT_TRUE(HasError(text, 11, 20, "services[0].routines[0].errors[1].name",
                       "duplicate error name 'BAD' (first at line 5)"));
  EXPECT_TRUE(HasError(text, 12, 20, "services[0].routines[0].errors[2].name", "'OK' is reserved"));
}

TEST(Load, MissingAndUnknownFields) {
  const std::string text = Idl(Routine("Add", "1", Params("{name: a, type: f32, size: 4}",
                                                          "{name: out, type: f32, size: 4, direction: out, color: red}")));
  EXPECT_TRUE(HasError(text, 8, 13, "services[0].routines[0].params[0].direction", "required field is missing"));
  EXPECT_TRUE(HasError(text, 9, 61, "services[0].routines[0].params[1].color",
                       "unknown field (allowed: name, type, size, max, direction, single_send, stream, layout, doc)"));
  EXPECT_TRUE(HasError("services: []\n", 1, 1, "package", "required field is missing"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: f32, size: 4, direction: in}",
                                                      "{name: out, type: f32, size: 4, direciton: out}"))),
                       9, 45, "services[0].routines[0].params[1].direciton", "did you mean 'direction'?"));
}

TEST(Load, UnknownFieldsSuggestTheFieldMeant) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: f32, size: 4, dir: in}",
                                                      "{name: out, type: f32, size: 4, direction: out}"))),
                       8, 43, "services[0].routines[0].params[0].dir", "did you mean 'direction'?"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "", "        timeout: 100\n")), 7, 9,
                       "services[0].routines[0].timeout", "did you mean 'timeout_ms'?"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "", "        deadline: 100\n")), 7, 9,
                       "services[0].routines[0].deadline", "did you mean 'deadline_ms'?"));
  EXPECT_TRUE(HasError(Idl("", "    timeout: 100\n"), 4, 5, "services[0].timeout",
                       "did you mean 'timeout_ms'?"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "", "        names: x\n")), 7, 9,
                       "services[0].routines[0].names", "did you mean 'name'?"));
  // A longer spelling, a typo, and something unrelated (no guess).
  const std::string text = Idl(Routine("Add", "1", "", "        codes: 2\n        dox: x\n        colour: red\n"));
  EXPECT_TRUE(HasError(text, 7, 9, "services[0].routines[0].codes", "did you mean 'code'?"));
  EXPECT_TRUE(HasError(text, 8, 9, "services[0].routines[0].dox", "did you mean 'doc'?"));
  for (const Diagnostic& d : Diagnose(text)) {
    if (d.field == "services[0].routines[0].colour") {
      EXPECT_EQ(d.message.find("did you mean"), std::string::npos) << d.ToString();
    }
  }
}

TEST(Load, SingleSendOnlyForInputs) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", Params("{name: a, type: f32, size: 4, direction: in}",
                                                      "{name: out, type: f32, size: 4, direction: out, single_send: true}"))),
                       9, 74, "services[0].routines[0].params[1].single_send",
                       "only 'in' parameters can be single_send (direction is 'out')"));
}

TEST(Load, NaaAddressTooLarge) {
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "",
                                   "        internal:\n          - {name: s, size: 8, naa_address: 0x100000000000000}\n")),
                       8, 45, "services[0].routines[0].internal[0].naa_address",
                       "NAA address 0x100000000000000 does not fit the 7-byte MRSP field"));
}

TEST(Load, InternalRegionRules) {
  const std::string text = Idl(Routine("Add", "1", "",
                                       "        internal:\n"
                                       "          - {name: s, size: 0}\n"
                                       "          - {name: t, type: f64, size: 134217729}\n"
                                       "          - {name: u, type: f99, size: 1}\n"));
  EXPECT_TRUE(HasError(text, 8, 29, "services[0].routines[0].internal[0].size",
                       "internal region 's' has size 0"));
  EXPECT_TRUE(HasError(text, 9, 40, "services[0].routines[0].internal[1].size",
                       "internal region 't' needs 1073741832 bytes; the limit is 1073741824"));
  EXPECT_TRUE(HasError(text, 10, 29, "services[0].routines[0].internal[2].type", "'f99' is not one of"));
}

TEST(Load, EmptyRoutineAndServiceLists) {
  EXPECT_TRUE(HasError("package: a\nservices:\n  - name: S\n    routines: []\n", 4, 15,
                       "services[0].routines", "needs at least 1 entry"));
  EXPECT_TRUE(HasError("package: a\nservices: []\n", 2, 11, "services", "needs at least 1 entry"));
}

TEST(Load, SchemaErrorsDoNotHideSemanticErrors) {
  // A bad type in one parameter, a duplicate code and an unknown field: all
  // reported in one run. (A C++ keyword is the C++ back-end's error, reported
  // once the front-end accepts the file: LanguageNeutral below.)
  const std::string text = Idl(Routine("Add", "1", Params("{name: a, type: f33, size: 4, direction: in}",
                                                          "{name: out, type: f32, size: 4, direction: out}")) +
                               Routine("Sub", "1", "", "        colour: red\n") + Routine("Mul", "2"));
  EXPECT_EQ(ErrorCount(text), 3) << testing::Lines(Diagnose(text));
  EXPECT_TRUE(HasError(text, 8, 29, "services[0].routines[0].params[0].type", "not one of"));
  EXPECT_TRUE(HasError(text, 11, 15, "services[0].routines[1].code", "already used by 'Add'"));
  EXPECT_TRUE(HasError(text, 12, 9, "services[0].routines[1].colour", "unknown field"));
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1") + Routine("union", "2")), 10, 15,
                       "services[0].routines[1].name", "'union' is a C++ keyword"));
}

TEST(Load, LanguageNeutral) {
  // The front-end alone (the CLI's, Python's) neither names nor checks
  // anything in C++; the C++ back-end's pass does both.
  const std::string text = Idl(Routine("Add", "1") + Routine("union", "2"), "", "t.new");
  std::vector<Diagnostic> diags;
  Result<IdlFile> idl = LoadFromString(text, testing::kPath, &diags);
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  EXPECT_TRUE(diags.empty()) << testing::Lines(diags);
  EXPECT_EQ(idl->cpp_namespace, "");
  EXPECT_EQ(idl->services[0].cpp.client, "");
  EXPECT_EQ(idl->services[0].routines[0].cpp.method, "");
  const Status s = PrepareForCpp(*idl, &diags);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("t.naa.yaml:1:10: error: package: 'new' is a C++ keyword"),
            std::string::npos) << s.message();
  EXPECT_NE(s.message().find("t.naa.yaml:10:15: error: services[0].routines[1].name: 'union' is "
                             "a C++ keyword"),
            std::string::npos) << s.message();
  EXPECT_EQ(diags.size(), 2u) << testing::Lines(diags);
  EXPECT_EQ(idl->services[0].cpp.client, "SvcClient");  // filled either way
}

TEST(Load, DuplicateKeysAreAllReportedWithTheirPath) {
  const std::string text = Idl(Routine("Add", "1", "", "        code: 2\n        doc: x\n        doc: y\n"));
  EXPECT_TRUE(HasError(text, 7, 9, "services[0].routines[0].code", "duplicate key 'code' (first at line 6)"));
  EXPECT_TRUE(HasError(text, 9, 9, "services[0].routines[0].doc", "duplicate key 'doc' (first at line 8)"));
  EXPECT_TRUE(HasError("package: a\npackage: b\nservices: []\n", 2, 1, "package",
                       "duplicate key 'package' (first at line 1)"));
}

TEST(Load, AllErrorsAtOnceAreSortedByPosition) {
  std::vector<Diagnostic> diags = Diagnose(Idl(Routine("A", "1") + Routine("B", "1") + Routine("C", "200")));
  ASSERT_EQ(diags.size(), 2u) << testing::Lines(diags);
  EXPECT_LT(diags[0].location.line, diags[1].location.line);
}

TEST(Load, StatusListsEveryError) {
  Result<IdlFile> idl = testing::LoadForCpp(Idl(Routine("A", "1") + Routine("B", "1") + Routine("C", "200")),
                                       testing::kPath);
  ASSERT_FALSE(idl.ok());
  EXPECT_EQ(idl.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(idl.status().message().find("t.naa.yaml:11:15: error: services[0].routines[1].code"),
            std::string::npos) << idl.status().message();
  EXPECT_NE(idl.status().message().find("\nt.naa.yaml:16:15: error:"), std::string::npos);
}

TEST(Load, FromFile) {
  std::vector<Diagnostic> diags;
  Result<IdlFile> missing = Load("/nonexistent/x.naa.yaml", &diags);
  ASSERT_FALSE(missing.ok());
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].ToString(),
            "/nonexistent/x.naa.yaml: error: cannot read file: No such file or directory");
  // An I/O problem, not an invalid IDL (naarpc_idlc exits 2 on it, not 1).
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  diags.clear();
  const Result<IdlFile> dir = Load("/", &diags);
  EXPECT_EQ(dir.status().code(), StatusCode::kNotFound);
  EXPECT_NE(diags.at(0).message.find("directory"), std::string::npos);

  const std::string path = ::testing::TempDir() + "/ok.naa.yaml";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  const std::string text = Idl();
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  Result<IdlFile> ok = Load(path, nullptr, {.display_path = "shown.naa.yaml"});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->path, "shown.naa.yaml");
}

TEST(Load, TheIrCanBeWalked) {
  Result<IdlFile> idl = testing::LoadForCpp(
      "package: a.b\n"
      "doc: the file\n"
      "services:\n"
      "  - name: Math\n"
      "    timeout_ms: 500\n"
      "    errors: [{name: DIVISION_BY_ZERO, code: 0x11, doc: b was 0}]\n"
      "    routines:\n"
      "      - name: GetX\n"
      "        code: 9\n"
      "        params:\n"
      "          - {name: a, type: i32, max: 8, direction: inout}\n"
      "          - {name: b, type: f64, size: 1, direction: in, single_send: true}\n"
      "        internal:\n"
      "          - {name: scratch, type: u16, size: 3, naa_address: 0x1000}\n",
      "x.naa.yaml");
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  EXPECT_EQ(idl->doc, "the file");
  const Service* s = idl->FindService("Math");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(idl->FindService("Nope"), nullptr);
  EXPECT_EQ(s->cpp.mock, "MockMathClient");
  ASSERT_EQ(s->errors.size(), 1u);
  EXPECT_EQ(s->errors[0].enumerator, "kDivisionByZero");
  const idl::Routine* r = s->FindRoutineByCode(9);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r, s->FindRoutine("GetX"));
  EXPECT_EQ(r->timeout_ms, 500u);
  EXPECT_EQ(r->deadline_ms, 1500u);
  EXPECT_EQ(r->cpp.pool_member, "pool_get_x_");
  EXPECT_EQ(r->cpp.routine_struct, "MathGetXRoutine");
  EXPECT_FALSE(r->cpp.mock_packs_arguments);
  const Param* a = r->FindParam("a");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->variable);
  EXPECT_EQ(a->region_bytes(), 8u + 8 * 4);
  EXPECT_EQ(a->expected_flags(), 0x0c);
  EXPECT_EQ(a->cpp.client_type, "std::vector<int32_t>*");
  EXPECT_EQ(a->cpp.kernel_type, "naarpc::codegen::VarSpan<int32_t>&");
  EXPECT_EQ(a->cpp.size_setter, "set_a_size");
  const Param& b = r->params[1];
  EXPECT_TRUE(b.scalar());
  EXPECT_EQ(b.expected_flags(), 0x06);
  EXPECT_EQ(b.cpp.client_type, "double");
  EXPECT_EQ(b.cpp.size_getter, "");
  ASSERT_EQ(r->internals.size(), 1u);
  EXPECT_EQ(r->internals[0].region_bytes(), 6u);
  EXPECT_EQ(r->internals[0].naa_address, 0x1000u);
  EXPECT_EQ(r->total_bytes(), 40u + 8 + 6);
  EXPECT_EQ(r->region_count(), 3u);
}

// ----- Streams (docs/idl.md "Streams", docs/protocol.md 15)

// "          - {name: data, type: u8, direction: in, stream: {...}}" and an
// ordinary output: the stream parameter is on line 8, the output on line 9.
std::string StreamIn(std::string_view stream_param,
                     std::string_view out = "{name: out, type: u64, size: 4, direction: out}") {
  return Params(stream_param, out);
}

TEST(LoadStreams, InputAndOutputStreamsAndTheirIr) {
  Result<IdlFile> idl = testing::LoadForCpp(
      Idl(Routine("Scale", "1",
                  "          - {name: factor, type: f32, size: 1, direction: in}\n"
                  "          - {name: data, type: f32, direction: in, stream: {chunk: 1024, window: 4}}\n"
                  "          - {name: n, type: u64, size: 1, direction: out}\n"
                  "          - {name: out, type: f64, direction: out, stream: {chunk: 0x10, window: 58}}\n")),
      testing::kPath);
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  const idl::Routine& r = idl->services[0].routines[0];
  EXPECT_TRUE(r.has_streams());
  EXPECT_EQ(r.stream_count(), 2u);
  EXPECT_EQ(r.region_count(), 4u);  // a stream is one MRSP entry
  const Param& data = r.params[1];
  ASSERT_TRUE(data.is_stream());
  EXPECT_EQ(data.stream->chunk, 1024u);
  EXPECT_EQ(data.stream->window, 4u);
  EXPECT_EQ(data.stream->index, 0u);
  EXPECT_EQ(data.stream->location, (Location{9, 60}));
  EXPECT_FALSE(data.scalar());
  EXPECT_FALSE(data.variable);
  EXPECT_EQ(data.chunk_bytes(), 4096u);
  EXPECT_EQ(data.region_bytes(), 4u * 4096);  // the ring
  EXPECT_EQ(data.expected_flags(), 0x15);
  EXPECT_EQ(data.cpp.client_type, "std::span<const float>");
  EXPECT_EQ(data.cpp.stream_client_type, "naarpc::codegen::StreamSource<float>&");
  EXPECT_EQ(data.cpp.kernel_type, "naarpc::codegen::StreamReader<float>&");
  EXPECT_EQ(data.cpp.accessor, "");  // no buffer in the zero-copy call
  const Param& out = r.params[3];
  EXPECT_EQ(out.stream->index, 1u);
  EXPECT_EQ(out.chunk_bytes(), 128u);
  EXPECT_EQ(out.expected_flags(), 0x19);
  EXPECT_EQ(out.cpp.client_type, "std::vector<double>*");
  EXPECT_EQ(out.cpp.stream_client_type, "naarpc::codegen::StreamSink<double>&");
  EXPECT_EQ(out.cpp.kernel_type, "naarpc::codegen::StreamWriter<double>&");
  // NaaCall::params holds the non-stream parameters only.
  EXPECT_EQ(r.params[0].naa_index, 0u);
  EXPECT_EQ(r.params[2].naa_index, 1u);
  EXPECT_EQ(r.total_bytes(), 4u + 4 * 4096 + 8 + 58 * 128);
}

TEST(LoadStreams, StreamsAloneAreInputAndOutput) {
  EXPECT_TRUE(Accepted(Idl(Routine(
      "Copy", "1",
      StreamIn("{name: a, type: u8, direction: in, stream: {chunk: 1, window: 1}}",
               "{name: b, type: u8, direction: out, stream: {chunk: 8388608, window: 61}}")))));
}

TEST(LoadStreams, InoutIsNotAStream) {
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: inout, stream: {chunk: 8, window: 2}}"))),
      8, 44, "services[0].routines[0].params[0].direction",
      "stream parameter 'd' is inout; a stream is an input or an output"));
}

TEST(LoadStreams, NoSizeOrMax) {
  const std::string text = Idl(Routine(
      "R", "1",
      StreamIn("{name: d, type: u8, size: 4, direction: in, stream: {chunk: 8, window: 2}}",
               "{name: o, type: u8, max: 4, direction: out, stream: {chunk: 8, window: 2}}")));
  EXPECT_EQ(ErrorCount(text), 2);
  EXPECT_TRUE(HasError(text, 8, 39, "services[0].routines[0].params[0].size",
                       "stream parameter 'd' has no 'size': its length is open"));
  EXPECT_TRUE(HasError(text, 9, 38, "services[0].routines[0].params[1].max",
                       "stream parameter 'o' has no 'max'"));
}

TEST(LoadStreams, WindowLimits) {
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: in, stream: {chunk: 8, window: 0}}"))),
      8, 75, "services[0].routines[0].params[0].stream.window", "0 is below the minimum 1"));
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: in, stream: {chunk: 8, window: 65}}"))),
      8, 75, "services[0].routines[0].params[0].stream.window", "65 is above the maximum 64"));
  EXPECT_TRUE(Accepted(Idl(Routine(
      "R", "1", StreamIn("{name: d, type: u8, direction: in, stream: {chunk: 8, window: 62}}")))));
}

TEST(LoadStreams, WindowsOfARoutineAddUpToAtMost62) {
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1",
                  StreamIn("{name: d, type: u8, direction: in, stream: {chunk: 8, window: 40}}",
                           "{name: e, type: u8, direction: out, stream: {chunk: 8, window: 23}}"))),
      8, 11, "services[0].routines[0].params",
      "the windows of the streams of routine 'R' add up to 63 = 40 (d) + 23 (e); at most 62"));
}

TEST(LoadStreams, ChunkLimits) {
  // 8 MiB per chunk at most, in bytes: 1048576 u64 elements are fine, one more is not.
  EXPECT_TRUE(Accepted(Idl(Routine(
      "R", "1", StreamIn("{name: d, type: u64, direction: in, stream: {chunk: 1048576, window: 1}}")))));
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u64, direction: in, stream: {chunk: 1048577, window: 1}}"))),
      8, 65, "services[0].routines[0].params[0].stream.chunk",
      "stream 'd' has chunks of 8388616 bytes; a chunk is limited to 8388608 bytes"));
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u64, direction: in, stream: {chunk: 0, window: 1}}"))),
      8, 65, "services[0].routines[0].params[0].stream.chunk", "0 is below the minimum 1"));
}

TEST(LoadStreams, SchemaOfTheStreamMapping) {
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: in, stream: {chunk: 8}}"))),
      8, 56, "services[0].routines[0].params[0].stream.window", "required field is missing"));
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: in, stream: {chunk: 8, window: 2, depth: 3}}"))),
      8, 78, "services[0].routines[0].params[0].stream.depth",
      "unknown field (allowed: chunk, window)"));
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: in, stream: 4096}"))),
      8, 56, "services[0].routines[0].params[0].stream",
      "expected a mapping (the fields of a stream), got"));
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: in, stream: {chunk: \"8\", window: 2}}"))),
      8, 64, "services[0].routines[0].params[0].stream.chunk", "remove the quotes"));
}

TEST(LoadStreams, NotSingleSend) {
  EXPECT_TRUE(HasError(
      Idl(Routine("R", "1", StreamIn("{name: d, type: u8, direction: in, single_send: true, stream: {chunk: 8, window: 2}}"))),
      8, 61, "services[0].routines[0].params[0].single_send", "a stream cannot be single_send"));
}

TEST(LoadStreams, AtMost32Streams) {
  std::string p;
  for (int i = 0; i < 33; ++i) {
    p += "          - {name: s" + std::to_string(i) +
         ", type: u8, direction: in, stream: {chunk: 8, window: 1}}\n";
  }
  p += "          - {name: out, type: u8, size: 1, direction: out}\n";
  EXPECT_TRUE(HasError(Idl(Routine("R", "1", p)), 8, 11, "services[0].routines[0].params",
                       "routine 'R' has 33 stream parameters; at most 32"));
}

TEST(LoadStreams, ChunkAndWindowErrorsAreAllReported) {
  const std::string text = Idl(Routine(
      "R", "1",
      StreamIn("{name: d, type: u8, direction: inout, size: 2, stream: {chunk: 0, window: 99}}")));
  EXPECT_EQ(ErrorCount(text), 4);
}

}  // namespace
}  // namespace naarpc::idl

namespace naarpc::idl {
namespace {

TEST(Load, IdempotentRoutines) {
  std::vector<Diagnostic> diags;
  const std::string text =
      Idl(Routine("Add", "1", "", "        idempotent: true\n") + Routine("Sub", "2"));
  Result<IdlFile> idl = testing::LoadForCpp(text, testing::kPath, &diags);
  ASSERT_TRUE(idl.ok()) << idl.status().message();
  EXPECT_TRUE(diags.empty());
  EXPECT_TRUE(idl->services[0].routines[0].idempotent);
  EXPECT_FALSE(idl->services[0].routines[1].idempotent);
  EXPECT_TRUE(HasError(Idl(Routine("Add", "1", "", "        idempotent: 3\n")), 7, 21,
                       "services[0].routines[0].idempotent", "expected true or false, got integer 3"));
  EXPECT_TRUE(HasError(
      Idl(Routine("Add", "1",
                  Params("{name: data, type: f32, direction: in, stream: {chunk: 1024, window: 4}}",
                         "{name: out, type: f32, size: 4, direction: out}"),
                  "        idempotent: true\n")),
      7, 21, "services[0].routines[0].idempotent",
      "routine 'Add' has streams and cannot be idempotent: its sources are read once, so a "
      "retry on another NAA could not send them again"));
}

}  // namespace
}  // namespace naarpc::idl
