#include "idl/internal/validate.h"

#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include "idl/internal/layout.h"
#include "idl/internal/scalar.h"
#include "idl/internal/schema.h"
#include "runtime/u128_text.h"

namespace naarpc::idl::internal {
namespace {

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string Hex(uint64_t v, int width = 0) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", width, static_cast<unsigned long long>(v));
  return buf;
}

std::string Line(Location at) { return "line " + std::to_string(at.line); }

// Bytes of `count` elements of `size` bytes (+ header), exact: counts are
// below 2^63 and elements at most 8 bytes.
unsigned __int128 Bytes(uint64_t count, uint64_t size, uint64_t header = 0) {
  return static_cast<unsigned __int128>(count) * size + header;
}

class Builder {
 public:
  Builder(std::string_view path, Sink& sink) : path_(path), sink_(sink) {}

  IdlFile Build(const YamlNode& root, FileNames* names) {
    IdlFile out;
    out.path = std::string(path_);
    Object file(root, "", FileRules(), sink_);
    if (!file.is_mapping()) return out;
    if (std::optional<std::string> pkg = file.String("package")) {
      out.package = *pkg;
      out.package_location = file.At("package");
    }
    out.doc = file.String("doc").value_or("");
    if (const std::vector<YamlNode>* services = file.List("services")) {
      std::map<std::string, Location> service_names;
      for (size_t i = 0; i < services->size(); ++i) {
        ServiceNames& sn = names->services.emplace_back();
        Service svc = BuildService((*services)[i], Index("services", i), sn);
        if (sn.name.ok) {
          if (auto it = service_names.find(svc.name); it != service_names.end()) {
            sink_.Error(sn.name.at, sn.name.field, "duplicate service name '" + svc.name +
                                                       "' (first at " + Line(it->second) + ")");
            sn.name.ok = false;
          } else {
            service_names.emplace(svc.name, sn.name.at);
          }
        }
        out.services.push_back(std::move(svc));
      }
    }
    return out;
  }

 private:
  struct ErrorTables {
    std::map<std::string, Location> names;
    std::map<int64_t, std::pair<std::string, Location>> codes;
  };

  // Reads `name` (an identifier; whether a back-end's language can use it
  // is that back-end's check, e.g. idl/cpp/cpp_pass.h).
  NameInfo ReadName(Object& o, std::string* name) {
    NameInfo info;
    info.at = o.At("name");
    info.field = o.Path("name");
    if (std::optional<std::string> n = o.String("name")) {
      *name = *n;
      info.ok = true;
    }
    return info;
  }

  void ReadErrors(Object& owner, const std::string& routine, ErrorTables& tables, Service& svc,
                  ServiceNames& names, std::vector<ErrorCode>* routine_errors) {
    const std::vector<YamlNode>* list = owner.List("errors");
    if (list == nullptr) return;
    for (size_t i = 0; i < list->size(); ++i) {
      Object o((*list)[i], Index(owner.Path("errors"), i), ErrorRules(), sink_);
      ErrorCode e;
      e.routine = routine;
      NameInfo info;
      info.at = o.At("name");
      info.field = o.Path("name");
      e.location = o.Has("name") ? info.at : o.location();
      if (std::optional<std::string> n = o.String("name")) {
        e.name = *n;
        info.ok = true;
        if (e.name == "OK") {
          sink_.Error(info.at, info.field, "'OK' is reserved (status 0)");
          info.ok = false;
        } else if (auto it = tables.names.find(e.name); it != tables.names.end()) {
          sink_.Error(info.at, info.field, "duplicate error name '" + e.name + "' (first at " +
                                               Line(it->second) + ")");
          info.ok = false;
        } else {
          tables.names.emplace(e.name, info.at);
        }
      }
      if (std::optional<int64_t> c = o.Integer("code")) {
        e.code = static_cast<uint8_t>(*c);
        if (auto it = tables.codes.find(*c); it != tables.codes.end()) {
          sink_.Error(o.At("code"), o.Path("code"),
                      "error code " + Hex(static_cast<uint64_t>(*c), 2) + " of '" + e.name +
                          "' is already used by '" + it->second.first + "' (" +
                          Line(it->second.second) + "); codes are unique within a service");
        } else {
          tables.codes.emplace(*c, std::make_pair(e.name, e.location));
        }
      }
      e.doc = o.String("doc").value_or("");
      if (routine_errors) routine_errors->push_back(e);
      svc.errors.push_back(std::move(e));
      names.errors.push_back(std::move(info));
    }
  }

  Service BuildService(const YamlNode& node, const std::string& path, ServiceNames& names) {
    Service svc;
    Object o(node, path, ServiceRules(), sink_);
    svc.location = o.location();
    if (!o.is_mapping()) return svc;
    names.name = ReadName(o, &svc.name);
    if (o.Has("name")) svc.location = names.name.at;
    svc.doc = o.String("doc").value_or("");
    svc.timeout_ms = static_cast<uint32_t>(o.Integer("timeout_ms").value_or(kDefaultTimeoutMs));
    svc.memory_windows = ReadMemoryWindows(o).value_or(false);
    ServiceDefaults defaults{svc.name, svc.timeout_ms, svc.memory_windows, o.At("memory_windows")};
    ErrorTables errors;
    ReadErrors(o, "", errors, svc, names, nullptr);
    const std::vector<YamlNode>* routines = o.List("routines");
    if (routines == nullptr) return svc;
    std::map<int64_t, std::pair<std::string, Location>> codes;
    std::map<std::string, Location> routine_names;
    for (size_t i = 0; i < routines->size(); ++i) {
      names.routines.emplace_back();
      RoutineNames& rn = names.routines.back();
      const std::string rpath = Index(o.Path("routines"), i);
      Object r((*routines)[i], rpath, RoutineRules(), sink_);
      Routine rt = BuildRoutine(r, defaults, rn);
      if (rn.name.ok) {
        if (auto it = routine_names.find(rt.name); it != routine_names.end()) {
          sink_.Error(rn.name.at, rn.name.field, "duplicate routine name '" + rt.name +
                                                     "' (first at " + Line(it->second) + ")");
          rn.name.ok = false;
        } else {
          routine_names.emplace(rt.name, rn.name.at);
        }
      }
      if (r.Has("code") && rt.code != 0) {
        if (auto it = codes.find(rt.code); it != codes.end()) {
          sink_.Error(r.At("code"), r.Path("code"),
                      "function code " + std::to_string(rt.code) + " of routine '" + rt.name +
                          "' is already used by '" + it->second.first + "' (" +
                          Line(it->second.second) + ")");
        } else {
          codes.emplace(rt.code, std::make_pair(rt.name, rt.location));
        }
      }
      if (r.is_mapping()) ReadErrors(r, rt.name, errors, svc, names, &rt.errors);
      svc.routines.push_back(std::move(rt));
    }
    return svc;
  }

  // What a routine inherits from its service.
  struct ServiceDefaults {
    std::string name;
    uint32_t timeout_ms = 0;
    bool memory_windows = false;
    Location memory_windows_at;  // where the service declares it
  };

  // `memory_windows`: true for `required`, false for `none`, nullopt if
  // absent or reported.
  std::optional<bool> ReadMemoryWindows(Object& o) {
    std::optional<std::string> v = o.String("memory_windows");
    if (!v) return std::nullopt;
    return *v == "required";
  }

  // A routine whose sessions use per-call memory windows (docs/idl.md
  // `memory_windows`): the rules ClientSession::Open enforces, found here.
  void CheckMemoryWindows(Object& r, const Routine& rt, const std::string& shown,
                          const ServiceDefaults& service, bool own) {
    const Location at = own ? r.At("memory_windows") : rt.location;
    const std::string field = own ? r.Path("memory_windows") : r.path();
    const std::string from =
        own ? std::string()
            : "; it inherits 'memory_windows: required' from service '" + service.name + "' (" +
                  Line(service.memory_windows_at) + "): declare 'memory_windows: none' on it";
    for (const Param& p : rt.params) {
      if (p.is_stream()) {
        sink_.Error(at, field,
                    "routine '" + shown + "' has stream '" + p.name +
                        "' and cannot use memory windows: a stream's ring keeps "
                        "connection-long keys" + from);
        return;
      }
      if (p.single_send) {
        sink_.Error(at, field,
                    "routine '" + shown + "' cannot use memory windows: parameter '" + p.name +
                        "' is single_send, which needs the reference dialect, and the window "
                        "keys travel in the spec dialect's metadata region (docs/protocol.md "
                        "4.5)" + from);
        return;
      }
    }
  }

  Routine BuildRoutine(Object& r, const ServiceDefaults& service, RoutineNames& names) {
    const uint32_t service_timeout = service.timeout_ms;
    Routine rt;
    rt.location = r.location();
    if (!r.is_mapping()) return rt;
    names.name = ReadName(r, &rt.name);
    if (r.Has("name")) rt.location = names.name.at;
    const std::string shown = rt.name.empty() ? "?" : rt.name;
    if (std::optional<int64_t> code = r.Integer("code")) {
      if (*code < 1 || *code > kMaxFunctionCode) {
        sink_.Error(r.At("code"), r.Path("code"),
                    "function code " + std::to_string(*code) + " is out of range 1.." +
                        std::to_string(kMaxFunctionCode));
      } else {
        rt.code = static_cast<uint8_t>(*code);
      }
    }
    rt.doc = r.String("doc").value_or("");
    rt.timeout_ms = static_cast<uint32_t>(r.Integer("timeout_ms").value_or(service_timeout));
    const std::optional<int64_t> deadline = r.Integer("deadline_ms");
    rt.deadline_ms = deadline ? static_cast<uint32_t>(*deadline) : rt.timeout_ms + kDeadlineGraceMs;
    if (deadline && rt.deadline_ms <= rt.timeout_ms) {
      sink_.Warning(r.At("deadline_ms"), r.Path("deadline_ms"),
                    "client deadline " + std::to_string(rt.deadline_ms) +
                        " ms <= kernel timeout " + std::to_string(rt.timeout_ms) +
                        " ms: the client gives up before the NAA can report a kernel timeout");
    }

    std::map<std::string, Location> seen;  // parameter and internal names
    bool directions_known = true;
    const std::vector<YamlNode>* params = r.List("params");
    if (params != nullptr) {
      for (size_t i = 0; i < params->size(); ++i) {
        names.params.emplace_back();
        Object p((*params)[i], Index(r.Path("params"), i), ParamRules(), sink_);
        rt.params.push_back(BuildParam(p, i, seen, names.params.back(), &directions_known));
      }
    }
    if (const std::vector<YamlNode>* internals = r.List("internal")) {
      for (size_t i = 0; i < internals->size(); ++i) {
        names.internals.emplace_back();
        Object it((*internals)[i], Index(r.Path("internal"), i), InternalRules(), sink_);
        rt.internals.push_back(BuildInternal(it, i, seen, names.internals.back()));
      }
    }
    NumberStreams(r, rt);
    if (std::optional<bool> idem = r.Boolean("idempotent")) {
      rt.idempotent = *idem;
      if (rt.idempotent && rt.has_streams()) {
        sink_.Error(r.At("idempotent"), r.Path("idempotent"),
                    "routine '" + shown + "' has streams and cannot be idempotent: its sources "
                    "are read once, so a retry on another NAA could not send them again");
      }
    }
    const std::optional<bool> windows = ReadMemoryWindows(r);
    rt.memory_windows = windows.value_or(service.memory_windows);
    if (rt.memory_windows) CheckMemoryWindows(r, rt, shown, service, windows.has_value());
    if (params != nullptr && directions_known) {
      bool in = false, out = false;
      for (const Param& p : rt.params) in |= p.is_input(), out |= p.is_output();
      if (!in) {
        sink_.Error(r.At("params"), r.Path("params"),
                    "routine '" + shown + "' has no input parameter (direction in/inout); the "
                    "call is triggered by the last input write");
      }
      if (!out) {
        sink_.Error(r.At("params"), r.Path("params"),
                    "routine '" + shown + "' has no output parameter (direction out/inout); "
                    "the status travels with the last result write");
      }
    }
    const size_t regions = rt.params.size() + rt.internals.size() + 1;  // + metadata
    if (regions > kMaxMrspRegions) {
      sink_.Error(r.location(), r.path(),
                  "routine '" + shown + "' needs " + std::to_string(regions) +
                      " regions (with the metadata region); one MRSP message carries at most " +
                      std::to_string(kMaxMrspRegions));
    } else if (regions > kNaaDefaultMaxRegions) {
      sink_.Warning(r.location(), r.path(),
                    "routine '" + shown + "' needs " + std::to_string(regions) +
                        " regions (with the metadata region); NAAs accept " +
                        std::to_string(kNaaDefaultMaxRegions) + " by default (MRSP error 0x03)");
    }
    if (rt.total_bytes() > kMaxRoutineBytes) {
      sink_.Error(r.location(), r.path(),
                  "routine '" + shown + "' needs " + std::to_string(rt.total_bytes()) +
                      " bytes of regions in total; the limit is " +
                      std::to_string(kMaxRoutineBytes) +
                      " (4 GiB, the NAA's per-connection budget)");
    }
    return rt;
  }

  void CheckDuplicate(std::map<std::string, Location>& seen, NameInfo& info,
                      const std::string& name) {
    if (!info.ok && name.empty()) return;
    if (auto it = seen.find(name); it != seen.end()) {
      sink_.Error(info.at, info.field,
                  "duplicate name '" + name + "' (first at " + Line(it->second) + ")");
      info.ok = false;
    } else {
      seen.emplace(name, info.at);
    }
  }

  Param BuildParam(Object& p, size_t index, std::map<std::string, Location>& seen,
                   NameInfo& info, bool* directions_known) {
    Param prm;
    prm.index = index;
    prm.count = 1;
    prm.location = p.location();
    if (!p.is_mapping()) {
      *directions_known = false;
      return prm;
    }
    info = ReadName(p, &prm.name);
    if (p.Has("name")) prm.location = info.at;
    CheckDuplicate(seen, info, prm.name);
    const std::string shown = prm.name.empty() ? "?" : prm.name;
    std::optional<ElementType> type;
    if (std::optional<std::string> t = p.String("type")) type = ParseElementType(*t);
    if (type) prm.type = *type;
    std::optional<Direction> dir;
    if (std::optional<std::string> d = p.String("direction")) {
      dir = *d == "in" ? Direction::kIn : *d == "out" ? Direction::kOut : Direction::kInOut;
      prm.direction = *dir;
    } else {
      *directions_known = false;
    }
    const bool has_size = p.Has("size"), has_max = p.Has("max");
    std::optional<uint64_t> count;
    if (p.Has("stream")) {
      ReadStream(p, prm, type, dir, has_size, has_max);
    } else if (has_size == has_max) {
      sink_.Error(p.location(), p.path(),
                  "give exactly one of 'size' (fixed element count) and 'max' (variable "
                  "length)");
    } else {
      const char* key = has_size ? "size" : "max";
      prm.variable = has_max;
      if (std::optional<int64_t> n = p.Integer(key)) {
        if (*n < 1) {
          sink_.Error(p.At(key), p.Path(key),
                      "parameter '" + shown + "' has " + key + " " + std::to_string(*n) +
                          "; it must be at least 1 element");
        } else {
          count = static_cast<uint64_t>(*n);
          prm.count = *count;
        }
      }
    }
    if (std::optional<bool> single = p.Boolean("single_send")) {
      prm.single_send = *single;
      if (*single && prm.stream) {
        sink_.Error(p.At("single_send"), p.Path("single_send"),
                    "a stream cannot be single_send (its data flows anew in every call)");
      } else if (*single && dir && *dir != Direction::kIn) {
        sink_.Error(p.At("single_send"), p.Path("single_send"),
                    "only 'in' parameters can be single_send (direction is '" +
                        std::string(DirectionName(*dir)) + "')");
      }
    }
    prm.doc = p.String("doc").value_or("");
    if (p.Has("layout")) ReadLayout(p, prm, count, sink_);
    if (prm.stream) {
      prm.count = 0;
    } else if (type && count) {
      const unsigned __int128 bytes = Bytes(*count, Describe(*type).size, prm.data_offset());
      if (bytes > kMaxRegionBytes) {
        const char* key = prm.variable ? "max" : "size";
        sink_.Error(p.At(key), p.Path(key),
                    "parameter '" + shown + "' needs " + naarpc::internal::U128Text(bytes) +
                        " bytes; one parameter is limited to " + std::to_string(kMaxRegionBytes) +
                        " bytes (1 GiB, one wire region" +
                        (prm.variable ? ", including the 8-byte length header)" : ")"));
        prm.count = 1;  // keep the routine's total meaningful
      }
    } else {
      prm.count = 1;
    }
    return prm;
  }

  // `stream: {chunk, window}` of a parameter (docs/protocol.md 15): an input
  // or an output with no size of its own.
  void ReadStream(Object& p, Param& prm, std::optional<ElementType> type,
                  std::optional<Direction> dir, bool has_size, bool has_max) {
    const std::string shown = prm.name.empty() ? "?" : prm.name;
    Object so(*p.Get("stream"), p.Path("stream"), StreamRules(), sink_);
    StreamDecl sd;
    sd.location = p.At("stream");
    sd.chunk = 1;
    sd.window = 1;
    prm.stream = sd;  // even if invalid: the parameter is no sized region
    if (has_size || has_max) {
      const char* key = has_size ? "size" : "max";
      sink_.Error(p.At(key), p.Path(key),
                  "stream parameter '" + shown + "' has no '" + key +
                      "': its length is open (a chunk shorter than the chunk size ends it); "
                      "'stream: {chunk, window}' bounds its memory");
    }
    if (dir && *dir == Direction::kInOut) {
      sink_.Error(p.At("direction"), p.Path("direction"),
                  "stream parameter '" + shown + "' is inout; a stream is an input or an "
                  "output (docs/protocol.md 15.1): declare an 'in' stream and an 'out' stream");
    }
    if (!so.is_mapping()) return;
    const std::optional<int64_t> chunk = so.Integer("chunk");
    const std::optional<int64_t> window = so.Integer("window");
    if (chunk) {
      prm.stream->chunk = static_cast<uint64_t>(*chunk);
      if (type) {
        const unsigned __int128 bytes = Bytes(prm.stream->chunk, Describe(*type).size);
        if (bytes > kMaxStreamChunkBytes) {
          sink_.Error(so.At("chunk"), so.Path("chunk"),
                      "stream '" + shown + "' has chunks of " + naarpc::internal::U128Text(bytes) +
                          " bytes; a chunk is limited to " + std::to_string(kMaxStreamChunkBytes) +
                          " bytes (8 MiB, docs/protocol.md 15.1)");
          prm.stream->chunk = 1;
        }
      }
    }
    if (window) prm.stream->window = static_cast<uint32_t>(*window);
  }

  // Stream indices, NAA parameter indices and the limits of a routine's
  // streams (docs/protocol.md 15.3: windows add up to <= 62).
  void NumberStreams(Object& r, Routine& rt) {
    size_t streams = 0, plain = 0;
    uint64_t windows = 0;
    for (Param& p : rt.params) {
      if (p.stream) {
        p.stream->index = streams++;
        windows += p.stream->window;
      } else {
        p.naa_index = plain++;
      }
    }
    const std::string shown = rt.name.empty() ? "?" : rt.name;
    if (streams > kMaxStreams) {
      sink_.Error(r.At("params"), r.Path("params"),
                  "routine '" + shown + "' has " + std::to_string(streams) +
                      " stream parameters; at most " + std::to_string(kMaxStreams) +
                      " (the 5-bit stream index)");
    }
    if (windows > kMaxStreamWindowTotal) {
      std::string list;
      for (const Param& p : rt.params) {
        if (!p.stream) continue;
        if (!list.empty()) list += " + ";
        list += std::to_string(p.stream->window) + " (" + (p.name.empty() ? "?" : p.name) + ")";
      }
      sink_.Error(r.At("params"), r.Path("params"),
                  "the windows of the streams of routine '" + shown + "' add up to " +
                      std::to_string(windows) + " = " + list + "; at most " +
                      std::to_string(kMaxStreamWindowTotal) +
                      " (a queue pair's 64 receives less the call's two, "
                      "docs/protocol.md 15.3)");
    }
  }

  Internal BuildInternal(Object& o, size_t index, std::map<std::string, Location>& seen,
                         NameInfo& info) {
    Internal in;
    in.index = index;
    in.count = 1;
    in.location = o.location();
    if (!o.is_mapping()) return in;
    info = ReadName(o, &in.name);
    if (o.Has("name")) in.location = info.at;
    CheckDuplicate(seen, info, in.name);
    const std::string shown = in.name.empty() ? "?" : in.name;
    bool type_known = true;  // default u8
    if (o.Has("type")) {
      type_known = false;
      if (std::optional<std::string> t = o.String("type")) {
        if (std::optional<ElementType> parsed = ParseElementType(*t)) {
          in.type = *parsed;
          type_known = true;
        }
      }
    }
    if (std::optional<int64_t> n = o.Integer("size")) {
      const unsigned __int128 bytes = Bytes(static_cast<uint64_t>(*n), Describe(in.type).size);
      if (*n < 1) {
        sink_.Error(o.At("size"), o.Path("size"),
                    "internal region '" + shown + "' has size " + std::to_string(*n) +
                        "; it must be at least 1 element");
      } else if (type_known && bytes > kMaxRegionBytes) {
        sink_.Error(o.At("size"), o.Path("size"),
                    "internal region '" + shown + "' needs " + naarpc::internal::U128Text(bytes) +
                        " bytes; the limit is " + std::to_string(kMaxRegionBytes) + " (1 GiB)");
      } else {
        in.count = static_cast<uint64_t>(*n);
      }
    }
    if (std::optional<int64_t> addr = o.Integer("naa_address")) {
      if (static_cast<uint64_t>(*addr) > kMaxNaaAddress) {
        sink_.Error(o.At("naa_address"), o.Path("naa_address"),
                    "NAA address " + Hex(static_cast<uint64_t>(*addr)) +
                        " does not fit the 7-byte MRSP field (< 2^56)");
      } else {
        in.naa_address = static_cast<uint64_t>(*addr);
      }
    }
    in.doc = o.String("doc").value_or("");
    return in;
  }

  std::string_view path_;
  Sink& sink_;
};

}  // namespace

IdlFile BuildIr(const YamlNode& root, std::string_view path, Sink& sink, FileNames* names) {
  return Builder(path, sink).Build(root, names);
}

}  // namespace naarpc::idl::internal
