// libFuzzer target for the IDL front-end (idl::LoadFromString, then the C++
// back-end's pass idl::PrepareForCpp as the generator runs it): any bytes
// must give either an IR or errors, each "file:line[:col]: error: ...",
// never a crash, a hang, a sanitizer report or an error-free failure.
// Seeded with the project's valid IDL files; byte-level mutations of them
// reach YAML, schema, validation and the clash analysis.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "idl/cpp/cpp_pass.h"
#include "idl/load.h"

namespace {
[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "load_fuzzer: invariant broken: %s: %s\n", what, detail.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace naarpc;
  // An exactly sized copy: ASan sees any read past the input.
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<idl::Diagnostic> diags;
  Result<idl::IdlFile> r = idl::LoadFromString(text, "fuzz.naa.yaml", &diags);
  if (r.ok()) {
    if (Status s = idl::PrepareForCpp(*r, &diags); !s.ok()) r = s;
  }
  size_t errors = 0;
  for (const idl::Diagnostic& d : diags) {
    const std::string line = d.ToString();
    if (line.rfind("fuzz.naa.yaml:", 0) != 0) Fail("diagnostic without the file", line);
    errors += line.find(": error: ") != std::string::npos;
  }
  if (r.ok() && errors != 0) Fail("accepted with errors", r.status().ToString());
  if (!r.ok()) {
    if (errors == 0) Fail("refused without an error diagnostic", r.status().ToString());
    if (r.status().code() != StatusCode::kInvalidArgument) {
      Fail("refusal is not kInvalidArgument", r.status().ToString());
    }
  }
  return 0;
}
