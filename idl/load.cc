#include "idl/load.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <new>
#include <sstream>
#include <sys/stat.h>

#include "idl/internal/sink.h"
#include "idl/internal/text.h"
#include "idl/internal/validate.h"
#include "idl/internal/yaml_tree.h"

namespace naarpc::idl {
namespace {

using internal::Sink;

std::optional<IdlFile> Parse(std::string_view text, Sink& sink) {
  if (text.size() > kMaxIdlFileBytes) {
    sink.Error({}, "", "the file is " + std::to_string(text.size()) +
                           " bytes; IDL files are limited to " +
                           std::to_string(kMaxIdlFileBytes) + " bytes");
    return std::nullopt;
  }
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte-order mark
  const internal::LineIndex lines(text);
  if (!internal::CheckText(text, lines, sink)) return std::nullopt;
  std::optional<internal::YamlNode> root = internal::ParseYaml(text, lines, sink);
  if (!root) return std::nullopt;
  internal::FileNames names;
  IdlFile idl = internal::BuildIr(*root, sink.file(), sink, &names);
  if (sink.error_count() > 0) return std::nullopt;
  return idl;
}

Result<IdlFile> Finish(std::optional<IdlFile> idl, Sink& sink,
                       std::vector<Diagnostic>* diagnostics, bool unreadable = false) {
  std::vector<Diagnostic> diags = sink.Take();
  std::string message;
  if (!idl) {
    for (const Diagnostic& d : diags) {
      if (!message.empty()) message += "\n";
      message += d.ToString();
    }
  }
  if (diagnostics) {
    diagnostics->insert(diagnostics->end(), diags.begin(), diags.end());
  }
  if (!idl) {
    return unreadable ? NotFoundError(std::move(message))
                      : InvalidArgumentError(std::move(message));
  }
  return std::move(*idl);
}

Result<IdlFile> LoadText(std::string_view text, std::string path,
                         std::vector<Diagnostic>* diagnostics) {
  Sink sink(std::move(path));
  std::optional<IdlFile> idl;
  try {
    idl = Parse(text, sink);
  } catch (const std::bad_alloc&) {
    sink.Error({}, "", "out of memory");
    idl.reset();
  } catch (const std::exception& e) {
    sink.Error({}, "", std::string("internal error: ") + e.what());
    idl.reset();
  }
  return Finish(std::move(idl), sink, diagnostics);
}

}  // namespace

Result<IdlFile> LoadFromString(std::string_view text, std::string_view path,
                               std::vector<Diagnostic>* diagnostics) {
  return LoadText(text, std::string(path), diagnostics);
}

Result<IdlFile> Load(std::string_view path, std::vector<Diagnostic>* diagnostics,
                     const LoadOptions& options) {
  const std::string file(path);
  const std::string shown = options.display_path.empty() ? file : options.display_path;
  const auto fail = [&](const std::string& message, bool unreadable) -> Result<IdlFile> {
    Sink sink(shown);
    sink.Error({}, "", message);
    return Finish(std::nullopt, sink, diagnostics, unreadable);
  };
  const auto cannot_read = [&](const std::string& why) {
    return fail("cannot read file: " + why, /*unreadable=*/true);
  };
  struct stat st;
  if (::stat(file.c_str(), &st) != 0) return cannot_read(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return cannot_read("it is a directory");
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > kMaxIdlFileBytes) {
    return fail("the file is " + std::to_string(st.st_size) + " bytes; IDL files are limited to " +
                    std::to_string(kMaxIdlFileBytes) + " bytes",
                /*unreadable=*/false);
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return cannot_read(std::strerror(errno));
  // Read at most one byte more than the limit (the file may be a pipe).
  std::string text(kMaxIdlFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return cannot_read(std::strerror(errno));
  text.resize(static_cast<size_t>(in.gcount()));
  return LoadText(text, shown, diagnostics);
}

}  // namespace naarpc::idl
