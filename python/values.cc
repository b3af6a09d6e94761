#include "python/values.h"

#include <map>
#include <utility>
#include <vector>

#include "idl/load.h"
#include "python/errors.h"
#include "tools/naarpc/dynamic_call.h"

namespace py = pybind11;

namespace naarpc::python {

namespace {

py::dtype MakeDtype(idl::ElementType t) {
  switch (t) {
    case idl::ElementType::kU8:
    case idl::ElementType::kBytes:
      return py::dtype("<u1");
    case idl::ElementType::kU16:
      return py::dtype("<u2");
    case idl::ElementType::kU32:
      return py::dtype("<u4");
    case idl::ElementType::kU64:
      return py::dtype("<u8");
    case idl::ElementType::kI8:
      return py::dtype("<i1");
    case idl::ElementType::kI16:
      return py::dtype("<i2");
    case idl::ElementType::kI32:
      return py::dtype("<i4");
    case idl::ElementType::kI64:
      return py::dtype("<i8");
    case idl::ElementType::kF32:
      return py::dtype("<f4");
    case idl::ElementType::kF64:
      return py::dtype("<f8");
  }
  return py::dtype("<u1");
}


}  // namespace

// ---- element types ------------------------------------------------------------

// The dtype of an element type, made once (parsing a dtype string costs
// about a microsecond a call). Never freed: the module lives as long as the
// interpreter.
py::dtype DtypeOf(idl::ElementType t) {
  static auto* cache = new std::map<idl::ElementType, py::dtype>();
  auto it = cache->find(t);
  if (it == cache->end()) it = cache->emplace(t, MakeDtype(t)).first;
  return it->second;
}

// A 1-D array of `n` elements: new, or over `ptr` (kept alive by `base`).
py::array Array1D(const py::dtype& dt, py::ssize_t n, void* ptr,
                  py::handle base) {
  return py::array(dt, py::array::ShapeContainer{n}, py::array::StridesContainer{}, ptr, base);
}

std::string DtypeText(const py::dtype& dt) { return py::str(py::handle(dt)).cast<std::string>(); }

std::string TypeName(const idl::Param& p) { return std::string(idl::Describe(p.type).idl); }

// "1024 x f32", "at most 1024 x i32", "a stream of u32".
std::string Shape(const idl::Param& p) {
  if (p.is_stream()) return "a stream of " + TypeName(p);
  return std::string(p.variable ? "at most " : "") + std::to_string(p.count) + " x " + TypeName(p);
}

std::string ShapeText(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    s += std::to_string(a.shape(i));
    if (a.ndim() == 1 || i + 1 < a.ndim()) s += ",";
    if (i + 1 < a.ndim()) s += " ";
  }
  return s + ")";
}

// Python arguments as C-contiguous 1-D arrays of the IDL type; errors name
// the parameter, expected vs actual.
// `context` follows the parameter's name in errors (" (chunk 3 of the stream)").
py::array CheckArray(const std::string& full, const idl::Param& p, py::object value,
                     const std::string& context) {
  const py::dtype want = DtypeOf(p.type);
  const std::string what = full + ": parameter '" + p.name + "'" + context;
  py::array a;
  if (py::isinstance<py::array>(value)) {
    a = py::reinterpret_borrow<py::array>(value);
    if (!a.dtype().is(want) && !a.dtype().equal(want)) {
      throw py::type_error(what + " needs dtype " + DtypeText(want) + " (" +
                           TypeName(p) + "), got dtype " +
                           DtypeText(a.dtype()) +
                           (a.dtype().kind() == want.kind() ? ""
                                                            : "; convert with .astype(np." +
                                                                  DtypeText(want) + ")"));
    }
  } else {
    if (!p.is_input()) {
      throw py::type_error(what + " is an output (" +
                           std::string(idl::DirectionName(p.direction)) +
                           "): give a numpy array for its result (e.g. from c.empty()), got " +
                           py::str(value.get_type().attr("__name__")).cast<std::string>());
    }
    // Python numbers and lists: converted, refusing values the type
    // cannot hold exactly.
    py::module_ np = py::module_::import("numpy");
    py::object raw = np.attr("asarray")(value);
    py::object converted;
    try {
      converted = np.attr("asarray")(value, want);
    } catch (py::error_already_set& e) {
      throw py::value_error(what + ": cannot be converted to " + TypeName(p) + ": " + e.what());
    }
    if (!np.attr("array_equal")(converted, raw).cast<bool>()) {
      throw py::value_error(what + ": the values do not fit " + TypeName(p) +
                            " exactly (give a numpy array of dtype " +
                            DtypeText(want) + ")");
    }
    a = py::reinterpret_borrow<py::array>(converted);
    if (a.ndim() == 0) a = a.attr("reshape")(1).cast<py::array>();
  }
  if (a.ndim() == 0 && p.count == 1 && !p.variable) a = a.attr("reshape")(1).cast<py::array>();
  if (a.ndim() != 1) {
    throw py::value_error(what + " needs a 1-D array (" + Shape(p) + "), got shape " +
                          ShapeText(a));
  }
  const auto n = static_cast<uint64_t>(a.size());
  if (p.is_input()) {
    if (!p.is_stream() && (p.variable ? n > p.count : n != p.count)) {
      throw py::value_error(what + " needs " + (p.variable ? "at most " : "exactly ") +
                            std::to_string(p.count) + " elements (" + TypeName(p) + "), got " +
                            std::to_string(n));
    }
  } else if (!p.is_stream() && n != p.count) {
    throw py::value_error(what + " (an output array) needs " + std::to_string(p.count) +
                          " elements (" + TypeName(p) + (p.variable ? ", its maximum" : "") +
                          "), got " + std::to_string(n));
  }
  if (!p.is_input()) {
    if (!a.writeable()) throw py::value_error(what + " is an output, but the array is read-only");
    if (!(a.flags() & py::array::c_style)) {
      throw py::value_error(what + " is an output; its array must be contiguous");
    }
    if (p.is_stream()) {
      throw py::value_error(what + " is an output stream; its result is returned, not written "
                                   "into an array");
    }
  } else if (!(a.flags() & py::array::c_style)) {
    a = py::module_::import("numpy").attr("ascontiguousarray")(a).cast<py::array>();
  }
  return a;
}

// The parameter a keyword argument names; TypeError listing the routine's
// parameters if none.
const idl::Param& ParamOf(const idl::Routine& routine, const std::string& full,
                          const std::string& pname) {
  if (const idl::Param* p = routine.FindParam(pname)) return *p;
  std::string names;
  for (const idl::Param& q : routine.params) names += (names.empty() ? "" : ", ") + q.name;
  throw py::type_error(full + "() got an unexpected keyword argument '" + pname +
                       "' (parameters: " + names + ")");
}

// ---- IDL ----------------------------------------------------------------------

Idl LoadIdl(const std::string& path) {
  std::vector<idl::Diagnostic> diags;
  auto loaded = idl::Load(path, &diags);
  if (!loaded.ok()) {
    IdlLoadError e;
    for (const idl::Diagnostic& d : diags) {
      if (d.is_error()) e.diagnostics.push_back(d.ToString());
    }
    e.message = e.diagnostics.empty() ? loaded.status().message() : "";
    for (const std::string& d : e.diagnostics) e.message += (e.message.empty() ? "" : "\n") + d;
    throw e;
  }
  return Idl{std::make_shared<const idl::IdlFile>(std::move(*loaded))};
}

// A routine's declaration for the Python side: {name, service, code,
// deadline_ms, timeout_ms, doc, params: [{name, type, dtype, count, variable,
// direction, stream}], errors: {NAME: code}}.
py::dict RoutineInfo(const idl::Service& s, const idl::Routine& r) {
  py::dict d;
  d["name"] = r.name;
  d["service"] = s.name;
  d["full_name"] = s.name + "." + r.name;
  d["code"] = int{r.code};
  d["deadline_ms"] = r.deadline_ms;
  d["timeout_ms"] = r.timeout_ms;
  d["doc"] = r.doc;
  d["memory_windows"] = r.memory_windows;  // the IDL's declaration (docs/idl.md)
  py::list params;
  for (const idl::Param& p : r.params) {
    py::dict q;
    q["name"] = p.name;
    q["type"] = TypeName(p);
    q["dtype"] = DtypeOf(p.type);
    q["count"] = p.count;
    q["variable"] = p.variable;
    q["direction"] = std::string(idl::DirectionName(p.direction));
    q["stream"] = p.is_stream();
    q["doc"] = p.doc;
    params.append(q);
  }
  d["params"] = params;
  py::dict errors;
  for (const idl::ErrorCode& e : s.errors) errors[py::str(e.name)] = int{e.code};
  d["errors"] = errors;
  return d;
}

}  // namespace naarpc::python
