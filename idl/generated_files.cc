#include "idl/generated_files.h"

#include <cctype>

namespace naarpc::idl {

std::string HeaderGuard(std::string_view include_path) {
  std::string g;
  for (char c : include_path) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && std::isalnum(u)) {
      g += static_cast<char>(std::toupper(u));
    } else if (!g.empty() && g.back() != '_') {
      g += '_';
    }
  }
  while (!g.empty() && g.back() == '_') g.pop_back();
  if (g.empty() || !std::isalpha(static_cast<unsigned char>(g[0]))) g = "NAARPC_" + g;
  return g + "_";
}

Result<GeneratedFiles> PlanGeneratedFiles(std::string_view idl_path,
                                          std::string_view include_prefix) {
  constexpr std::string_view kSuffix = ".naa.yaml";
  std::string_view base = idl_path.substr(idl_path.find_last_of('/') + 1);
  if (base.size() <= kSuffix.size() || base.substr(base.size() - kSuffix.size()) != kSuffix) {
    return InvalidArgumentError(std::string(idl_path) +
                                ": IDL file names must end in .naa.yaml (and have a stem)");
  }
  for (std::string_view s : {base, include_prefix}) {
    for (char c : s) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (u < 0x20 || u == 0x7f || c == '"' || c == '\\') {
        return InvalidArgumentError(
            "file names and include prefixes cannot contain control characters, '\"' or "
            "'\\' (they go into #include lines): " + std::string(s));
      }
    }
  }
  while (!include_prefix.empty() && include_prefix.front() == '/') include_prefix.remove_prefix(1);
  while (!include_prefix.empty() && include_prefix.back() == '/') include_prefix.remove_suffix(1);
  GeneratedFiles f;
  f.stem = std::string(base.substr(0, base.size() - kSuffix.size()));
  const std::string dir = include_prefix.empty() ? "" : std::string(include_prefix) + "/";
  f.header = dir + f.stem + ".naa.h";
  f.source = dir + f.stem + ".naa.cc";
  f.mock = dir + f.stem + ".naa_mock.h";
  f.header_guard = HeaderGuard(f.header);
  f.mock_guard = HeaderGuard(f.mock);
  return f;
}

}  // namespace naarpc::idl
