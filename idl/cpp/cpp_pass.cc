#include "idl/cpp/cpp_pass.h"

#include <string>
#include <string_view>

#include "idl/cpp/clash.h"
#include "idl/cpp/cpp_names.h"
#include "idl/internal/sink.h"
#include "idl/internal/validate.h"

namespace naarpc::idl {
namespace {

using internal::FileNames;
using internal::NameInfo;
using internal::Sink;

std::string Index(std::string_view list, size_t i) {
  return std::string(list) + "[" + std::to_string(i) + "]";
}

// A declaration's name: usable in C++, or reported (and left out of the
// clash analysis).
NameInfo CheckName(std::string_view name, Location at, std::string field, Sink& sink) {
  NameInfo info{.ok = true, .at = at, .field = std::move(field)};
  if (std::string bad = internal::BadIdentifier(name); !bad.empty()) {
    sink.Error(info.at, info.field, bad);
    info.ok = false;
  }
  return info;
}

// The package's parts become nested namespaces.
void CheckPackage(const IdlFile& idl, Sink& sink) {
  const std::string& pkg = idl.package;
  const Location at = idl.package_location;
  size_t start = 0;
  for (int i = 0;; ++i) {
    const size_t dot = pkg.find('.', start);
    const std::string part = pkg.substr(start, dot == std::string::npos ? dot : dot - start);
    if (i == 0 && part == "naarpc") {
      // The project's own IDLs; elsewhere `naarpc` would shadow ::naarpc.
      const std::string second =
          dot == std::string::npos ? "" : pkg.substr(dot + 1, pkg.find('.', dot + 1) - dot - 1);
      if (second != "services" && second != "testing" && second != "examples") {
        sink.Error(at, "package",
                   "the namespace naarpc holds the runtime (naarpc::codegen, "
                   "naarpc::Status, ...); packages under it must start with "
                   "naarpc.services, naarpc.testing or naarpc.examples");
      }
    } else if (std::string bad = internal::BadIdentifier(part); !bad.empty()) {
      sink.Error(at, "package", bad);
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
}

// Every name of the IR checked, with where it is (for the clash analysis).
// Error names are UPPER_SNAKE_CASE (the front-end's rule): their
// enumerators are checked by the clash analysis.
FileNames CheckNames(const IdlFile& idl, Sink& sink) {
  FileNames names;
  for (size_t si = 0; si < idl.services.size(); ++si) {
    const Service& s = idl.services[si];
    const std::string sp = Index("services", si);
    internal::ServiceNames& sn = names.services.emplace_back();
    sn.name = CheckName(s.name, s.location, sp + ".name", sink);
    size_t service_wide = 0;
    for (const ErrorCode& e : s.errors) {
      std::string field = sp + "." + Index("errors", service_wide) + ".name";
      if (e.routine.empty()) {
        ++service_wide;
      } else {
        for (size_t ri = 0; ri < s.routines.size(); ++ri) {
          const Routine& r = s.routines[ri];
          if (r.name != e.routine) continue;
          for (size_t k = 0; k < r.errors.size(); ++k) {
            if (r.errors[k].name == e.name) {
              field = sp + "." + Index("routines", ri) + "." + Index("errors", k) + ".name";
            }
          }
        }
      }
      sn.errors.push_back({.ok = true, .at = e.location, .field = std::move(field)});
    }
    for (size_t ri = 0; ri < s.routines.size(); ++ri) {
      const Routine& r = s.routines[ri];
      const std::string rp = sp + "." + Index("routines", ri);
      internal::RoutineNames& rn = sn.routines.emplace_back();
      rn.name = CheckName(r.name, r.location, rp + ".name", sink);
      for (size_t k = 0; k < r.params.size(); ++k) {
        rn.params.push_back(CheckName(r.params[k].name, r.params[k].location,
                                      rp + "." + Index("params", k) + ".name", sink));
      }
      for (size_t k = 0; k < r.internals.size(); ++k) {
        rn.internals.push_back(CheckName(r.internals[k].name, r.internals[k].location,
                                         rp + "." + Index("internal", k) + ".name", sink));
      }
    }
  }
  return names;
}

}  // namespace

Status PrepareForCpp(IdlFile& idl, std::vector<Diagnostic>* diagnostics) {
  Sink sink(idl.path);
  CheckPackage(idl, sink);
  const FileNames names = CheckNames(idl, sink);
  idl.cpp_namespace.clear();
  for (char c : idl.package) {
    if (c == '.')
      idl.cpp_namespace += "::";
    else
      idl.cpp_namespace += c;
  }
  internal::AssignCppNames(idl);
  internal::CheckNameClashes(idl, names, sink);
  std::vector<Diagnostic> diags = sink.Take();
  std::string message;
  for (const Diagnostic& d : diags) {
    if (!d.is_error()) continue;
    if (!message.empty()) message += "\n";
    message += d.ToString();
  }
  if (diagnostics) diagnostics->insert(diagnostics->end(), diags.begin(), diags.end());
  if (sink.error_count() > 0) return InvalidArgumentError(std::move(message));
  return Status::Ok();
}

}  // namespace naarpc::idl
