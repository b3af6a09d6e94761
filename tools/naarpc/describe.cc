#include "tools/naarpc/describe.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "naarpc/strided_view.h"
#include "tools/naarpc/dynamic_call.h"

namespace naarpc::cli {
namespace {

struct Selection {
  std::vector<const idl::Service*> services;
  const idl::Routine* routine = nullptr;  // set: only this routine
};

std::string Names(const idl::IdlFile& idl) {
  std::string out;
  for (const idl::Service& s : idl.services) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

Result<Selection> Select(const idl::IdlFile& idl, std::string_view selector) {
  Selection sel;
  if (selector.empty()) {
    for (const idl::Service& s : idl.services) sel.services.push_back(&s);
    return sel;
  }
  const size_t dot = selector.find('.');
  const std::string_view service_name = selector.substr(0, dot);
  const idl::Service* s = idl.FindService(service_name);
  if (s == nullptr) {
    return NotFoundError(idl.path + ": no service '" + std::string(service_name) +
                         "' (services: " + Names(idl) + ")");
  }
  sel.services.push_back(s);
  if (dot != std::string_view::npos) {
    const std::string_view routine_name = selector.substr(dot + 1);
    sel.routine = s->FindRoutine(routine_name);
    if (sel.routine == nullptr) {
      std::string routines;
      for (const idl::Routine& r : s->routines) routines += (routines.empty() ? "" : ", ") + r.name;
      return NotFoundError(idl.path + ": service " + s->name + " has no routine '" +
                           std::string(routine_name) + "' (routines: " + routines + ")");
    }
  }
  return sel;
}

std::string Hex(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", v);
  return buf;
}

std::string Bytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(buf, sizeof buf, "%.4g %s", v, kUnits[u]);
  }
  return buf;
}

std::string OneLine(const std::string& doc) {
  std::string out;
  for (char c : doc) out += (c == '\n' || c == '\r') ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

void RoutineText(const idl::Service& s, const idl::Routine& r, std::string& out) {
  out += "  " + r.name + "  code " + std::to_string(r.code) + " (" + Hex(r.code) +
         "), kernel timeout " + std::to_string(r.timeout_ms) + " ms, client deadline " +
         std::to_string(r.deadline_ms) + " ms" +
         // docs/idl.md `memory_windows` (the default; ClientOptions overrides)
         (r.memory_windows ? ", per-call memory windows" : "") + "\n";
  if (!r.doc.empty()) out += "    " + OneLine(r.doc) + "\n";
  for (const idl::Param& p : r.params) {
    const std::string_view dir = idl::DirectionName(p.direction);
    out += "    " + std::string(dir) + std::string(6 - dir.size(), ' ') + p.name + ": " +
           std::string(idl::Describe(p.type).idl);
    if (auto stream = StreamOf(p)) {
      out += " stream, chunks of " + std::to_string(stream->chunk) + ", window " +
             std::to_string(stream->window) + "  ring " + Bytes(p.region_bytes());
    } else {
      out += "[" + std::string(p.variable ? "<=" : "") + std::to_string(p.count) + "]  " +
             Bytes(p.region_bytes()) + (p.variable ? " (8-byte length header)" : "") +
             (p.single_send ? ", single-send" : "");
    }
    if (p.layout) {  // docs/idl.md "Layouts": where the caller's elements lie
      out += ", caller's layout " + naarpc::LayoutToString(p.layout->layout) + " (" +
             std::to_string(p.layout->runs) + " runs)";
    }
    if (!p.doc.empty()) out += "  -- " + OneLine(p.doc);
    out += "\n";
  }
  for (const idl::Internal& i : r.internals) {
    out += "    internal " + i.name + ": " + std::string(idl::Describe(i.type).idl) + "[" +
           std::to_string(i.count) + "]  " + Bytes(i.region_bytes());
    if (i.naa_address != 0) {
      char addr[24];
      std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(i.naa_address));
      out += std::string(" at NAA address ") + addr;
    }
    if (!i.doc.empty()) out += "  -- " + OneLine(i.doc);
    out += "\n";
  }
  for (const idl::ErrorCode& e : r.errors) {
    out += "    error " + e.name + " = " + Hex(e.code);
    if (!e.doc.empty()) out += "  -- " + OneLine(e.doc);
    out += "\n";
  }
  (void)s;
}

nlohmann::ordered_json ErrorJson(const idl::ErrorCode& e) {
  return {{"name", e.name}, {"code", e.code}, {"doc", e.doc}};
}

nlohmann::ordered_json RoutineJson(const idl::Routine& r) {
  nlohmann::ordered_json j;
  j["name"] = r.name;
  j["code"] = r.code;
  j["doc"] = r.doc;
  j["timeout_ms"] = r.timeout_ms;
  j["deadline_ms"] = r.deadline_ms;
  j["memory_windows"] = r.memory_windows;
  j["params"] = nlohmann::ordered_json::array();
  for (const idl::Param& p : r.params) {
    j["params"].push_back({{"name", p.name},
                           {"type", idl::Describe(p.type).idl},
                           {"elements", p.count},
                           {"variable", p.variable},
                           {"bytes", p.region_bytes()},
                           {"direction", idl::DirectionName(p.direction)},
                           {"single_send", p.single_send},
                           {"stream", nullptr},
                           {"doc", p.doc}});
    if (auto stream = StreamOf(p)) {
      j["params"].back()["stream"] = {{"chunk", stream->chunk}, {"window", stream->window}};
    }
    if (p.layout) {
      j["params"].back()["layout"] = {{"kind", naarpc::LayoutKindName(p.layout->layout.kind)},
                                      {"text", naarpc::LayoutToString(p.layout->layout)},
                                      {"runs", p.layout->runs},
                                      {"reach", p.layout->reach}};
    }
  }
  j["internal"] = nlohmann::ordered_json::array();
  for (const idl::Internal& i : r.internals) {
    j["internal"].push_back({{"name", i.name},
                             {"type", idl::Describe(i.type).idl},
                             {"elements", i.count},
                             {"bytes", i.region_bytes()},
                             {"naa_address", i.naa_address},
                             {"doc", i.doc}});
  }
  j["errors"] = nlohmann::ordered_json::array();
  for (const idl::ErrorCode& e : r.errors) j["errors"].push_back(ErrorJson(e));
  return j;
}

}  // namespace

Result<std::string> DescribeText(const idl::IdlFile& idl, std::string_view selector) {
  auto sel = Select(idl, selector);
  if (!sel.ok()) return sel.status();
  std::string out;
  if (selector.empty()) {
    out += idl.path + ": package " + idl.package + "\n";
    if (!idl.doc.empty()) out += OneLine(idl.doc) + "\n";
  }
  for (const idl::Service* s : sel->services) {
    if (!out.empty()) out += "\n";
    out += "service " + s->name + " (" + std::to_string(s->routines.size()) + " routine" +
           (s->routines.size() == 1 ? "" : "s") + ")\n";
    if (!s->doc.empty()) out += "  " + OneLine(s->doc) + "\n";
    for (const idl::Routine& r : s->routines) {
      if (sel->routine == nullptr || sel->routine == &r) RoutineText(*s, r, out);
    }
    bool service_errors = false;
    for (const idl::ErrorCode& e : s->errors) {
      if (!e.routine.empty()) continue;
      if (!service_errors) out += "  errors of every routine:\n";
      service_errors = true;
      out += "    " + e.name + " = " + Hex(e.code);
      if (!e.doc.empty()) out += "  -- " + OneLine(e.doc);
      out += "\n";
    }
  }
  return out;
}

Result<std::string> DescribeJson(const idl::IdlFile& idl, std::string_view selector) {
  auto sel = Select(idl, selector);
  if (!sel.ok()) return sel.status();
  nlohmann::ordered_json j;
  j["format"] = "naarpc-describe/1";
  j["file"] = idl.path;
  j["package"] = idl.package;
  j["doc"] = idl.doc;
  j["services"] = nlohmann::ordered_json::array();
  for (const idl::Service* s : sel->services) {
    nlohmann::ordered_json sj;
    sj["name"] = s->name;
    sj["doc"] = s->doc;
    sj["timeout_ms"] = s->timeout_ms;
    sj["memory_windows"] = s->memory_windows;
    sj["routines"] = nlohmann::ordered_json::array();
    for (const idl::Routine& r : s->routines) {
      if (sel->routine == nullptr || sel->routine == &r) sj["routines"].push_back(RoutineJson(r));
    }
    sj["errors"] = nlohmann::ordered_json::array();
    for (const idl::ErrorCode& e : s->errors) {
      nlohmann::ordered_json ej = ErrorJson(e);
      ej["routine"] = e.routine;
      sj["errors"].push_back(ej);
    }
    j["services"].push_back(sj);
  }
  return j.dump(2) + "\n";
}

}  // namespace naarpc::cli
