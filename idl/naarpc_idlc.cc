// naarpc_idlc: validates a naarpc IDL file (*.naa.yaml), runs the C++
// back-end's pass (C++ names, name clashes: idl/cpp/cpp_pass.h) and writes
// the IR as JSON for the code generator (codegen/naarpc_gen.py).
//
//   naarpc_idlc IDL [--out FILE.json] [--include_prefix DIR] [--label PATH]
//   naarpc_idlc IDL --check
//
// Diagnostics go to stderr as file:line:col: error|warning: field: message.
// Exit status: 0 valid, 1 invalid IDL (nothing written), 2 usage or I/O (the
// IDL file missing or unreadable, the output not writable).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "idl/cpp/cpp_pass.h"
#include "idl/generated_files.h"
#include "idl/ir_json.h"
#include "idl/load.h"

namespace {

// Writes next to `path` and renames: readers never see a partial file.
bool WriteAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string idl_path, out_path, include_prefix, label;
  bool check = false;
  CLI::App app{"validates a naarpc IDL file (*.naa.yaml) and writes its IR as JSON",
               "naarpc_idlc"};
  app.add_option("idl", idl_path, "the IDL file (*.naa.yaml)")->required();
  app.add_option("--out", out_path, "write the IR as JSON to FILE (default: stdout)")
      ->option_text("FILE");
  app.add_option("--include_prefix", include_prefix,
                 "directory the generated files are #included from")
      ->option_text("DIR");
  app.add_option("--label", label, "the IDL's name in diagnostics and generated banners")
      ->option_text("PATH");
  app.add_flag("--check", check, "validate only");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; usage errors: 2
  }
  const std::string shown = label.empty() ? idl_path : label;

  naarpc::Result<naarpc::idl::GeneratedFiles> files =
      naarpc::idl::PlanGeneratedFiles(idl_path, include_prefix);
  if (!files.ok()) {
    std::cerr << shown << ": error: " << files.status().message() << "\n";
    return 2;
  }
  std::vector<naarpc::idl::Diagnostic> diagnostics;
  naarpc::Result<naarpc::idl::IdlFile> idl =
      naarpc::idl::Load(idl_path, &diagnostics, {.display_path = shown});
  if (idl.ok()) {  // the C++ back-end's names and checks
    if (naarpc::Status s = naarpc::idl::PrepareForCpp(*idl, &diagnostics); !s.ok()) idl = s;
  }
  int errors = 0;
  for (const naarpc::idl::Diagnostic& d : diagnostics) {
    std::cerr << d.ToString() << "\n";
    errors += d.is_error() ? 1 : 0;
  }
  if (!idl.ok()) {
    std::cerr << shown << ": " << errors << " error(s); nothing generated\n";
    return idl.status().code() == naarpc::StatusCode::kNotFound ? 2 : 1;  // unreadable: I/O
  }
  if (check) return 0;
  const std::string json = naarpc::idl::IrToJson(*idl, &*files);
  if (out_path.empty()) {
    std::cout << json;
    std::cout.flush();
    return std::cout ? 0 : 2;
  }
  if (!WriteAtomically(out_path, json)) {
    std::cerr << "naarpc_idlc: cannot write " << out_path << ": " << std::strerror(errno) << "\n";
    return 2;
  }
  return 0;
}
