// Helpers of the IDL front-end tests: IDL snippets and assertions on
// diagnostics ("t.naa.yaml:LINE:COL: error: FIELD: ...").
#ifndef NAARPC_TESTS_IDL_TEST_UTIL_H_
#define NAARPC_TESTS_IDL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "idl/cpp/cpp_pass.h"
#include "idl/load.h"

namespace naarpc::idl::testing {

inline constexpr char kPath[] = "t.naa.yaml";

// "      - name: Add\n        code: 1\n<extra>        params:\n<params>": the
// name value is at column 15 of the first line, code at column 15 of the
// second; parameters are "          - {name: ..." (name value at column 20).
inline std::string Routine(std::string_view name = "Add", std::string_view code = "1",
                           std::string_view params = "", std::string_view extra = "") {
  std::string p(params);
  if (p.empty()) {
    p = "          - {name: a, type: f32, size: 4, direction: in}\n"
        "          - {name: out, type: f32, size: 4, direction: out}\n";
  }
  return "      - name: " + std::string(name) + "\n        code: " + std::string(code) + "\n" +
         std::string(extra) + "        params:\n" + p;
}

// A file with one service Svc (line 3): "package: <package>\nservices:\n  -
// name: Svc\n<service_extra>    routines:\n<routines>" (first routine at line
// 5 without extras).
inline std::string Idl(std::string_view routines = "", std::string_view service_extra = "",
                       std::string_view package = "t.pkg") {
  return "package: " + std::string(package) + "\nservices:\n  - name: Svc\n" +
         std::string(service_extra) + "    routines:\n" +
         (routines.empty() ? Routine() : std::string(routines));
}

// The front-end, then (if it accepts the file) the C++ back-end's pass, as
// the generator (naarpc_idlc) runs them.
inline Result<IdlFile> LoadForCpp(std::string_view text, std::string_view path = kPath,
                                  std::vector<Diagnostic>* diags = nullptr) {
  Result<IdlFile> r = LoadFromString(text, path, diags);
  if (!r.ok()) return r;
  NAARPC_RETURN_IF_ERROR(PrepareForCpp(*r, diags));
  return r;
}

inline std::vector<Diagnostic> Diagnose(std::string_view text, bool* ok = nullptr) {
  std::vector<Diagnostic> diags;
  const Result<IdlFile> r = LoadForCpp(text, kPath, &diags);
  if (ok) *ok = r.ok();
  return diags;
}

inline std::string Lines(const std::vector<Diagnostic>& diags) {
  std::string out;
  for (const Diagnostic& d : diags) out += "\n  " + d.ToString();
  return out.empty() ? " (none)" : out;
}

// The file is rejected with an error at line:column for `field` whose
// message contains `fragment`.
inline ::testing::AssertionResult HasError(std::string_view text, int line, int column,
                                           std::string_view field, std::string_view fragment) {
  bool ok = false;
  const std::vector<Diagnostic> diags = Diagnose(text, &ok);
  if (ok) return ::testing::AssertionFailure() << "accepted; diagnostics:" << Lines(diags);
  for (const Diagnostic& d : diags) {
    if (d.is_error() && d.location.line == line && d.location.column == column &&
        d.field == field && d.message.find(fragment) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure()
         << "no error " << line << ":" << column << " " << field << ": ..." << fragment
         << "... among:" << Lines(diags);
}

inline ::testing::AssertionResult Accepted(std::string_view text) {
  bool ok = false;
  const std::vector<Diagnostic> diags = Diagnose(text, &ok);
  if (!ok) return ::testing::AssertionFailure() << "rejected:" << Lines(diags);
  return ::testing::AssertionSuccess();
}

inline int ErrorCount(std::string_view text) {
  int n = 0;
  for (const Diagnostic& d : Diagnose(text)) n += d.is_error() ? 1 : 0;
  return n;
}

}  // namespace naarpc::idl::testing

#endif  // NAARPC_TESTS_IDL_TEST_UTIL_H_
