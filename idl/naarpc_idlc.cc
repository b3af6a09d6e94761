// naarpc_idlc: validates a naarpc IDL file (*.naa.yaml) and writes its IR as
// JSON for the code generator (codegen/naarpc_gen.py).
//
//   naarpc_idlc IDL [--out FILE.json] [--include_prefix DIR] [--label PATH]
//   naarpc_idlc IDL --check
//
// Diagnostics go to stderr as file:line:col: error|warning: field: message.
// Exit status: 0 valid, 1 invalid IDL (nothing written), 2 usage or I/O.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "idl/generated_files.h"
#include "idl/ir_json.h"
#include "idl/load.h"

namespace {

constexpr const char* kUsage =
    "usage: naarpc_idlc IDL.naa.yaml [--out FILE.json] [--include_prefix DIR]\n"
    "                   [--label PATH] [--check]\n"
    "  --out FILE         write the IR as JSON to FILE (default: stdout)\n"
    "  --include_prefix   directory the generated files are #included from\n"
    "  --label PATH       the IDL's name in diagnostics and generated banners\n"
    "  --check            validate only\n";

int Usage(const std::string& problem) {
  std::cerr << "naarpc_idlc: " << problem << "\n" << kUsage;
  return 2;
}

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
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&](std::string* target) {
      if (i + 1 >= argc) return false;
      *target = argv[++i];
      return true;
    };
    if (arg == "--out") {
      if (!value(&out_path)) return Usage("--out needs a file");
    } else if (arg == "--include_prefix") {
      if (!value(&include_prefix)) return Usage("--include_prefix needs a directory");
    } else if (arg == "--label") {
      if (!value(&label)) return Usage("--label needs a path");
    } else if (arg == "--check") {
      check = true;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      return Usage("unknown option " + std::string(arg));
    } else if (idl_path.empty()) {
      idl_path = std::string(arg);
    } else {
      return Usage("more than one IDL file");
    }
  }
  if (idl_path.empty()) return Usage("no IDL file given");
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
  int errors = 0;
  for (const naarpc::idl::Diagnostic& d : diagnostics) {
    std::cerr << d.ToString() << "\n";
    errors += d.is_error() ? 1 : 0;
  }
  if (!idl.ok()) {
    std::cerr << shown << ": " << errors << " error(s); nothing generated\n";
    return 1;
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
