#include "python/values.h"

#include <cmath>
#include <limits>
#include <map>
#include <type_traits>
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

namespace {

py::module_& Numpy() {
  static auto* np = new py::module_(py::module_::import("numpy"));  // never freed
  return *np;
}

std::string ShortRepr(py::handle v) {
  std::string r = py::repr(v).cast<std::string>();
  return r.size() > 60 ? r.substr(0, 57) + "..." : r;
}

// One Python number as a T, exactly: false if it does not fit (a fraction,
// out of range, rounded; NaN and infinities fit the float types).
// REQUIRES: the GIL; clears any Python error it meets.
template <typename T>
bool ExactElement(PyObject* x, T* out) {
  if constexpr (std::is_floating_point_v<T>) {
    const double d = PyFloat_AsDouble(x);  // ints: correctly rounded
    if (d == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    if (std::is_same_v<T, float> && std::isfinite(d) &&
        std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) {
      return false;
    }
    *out = static_cast<T>(d);
    if (std::isnan(d)) return true;
    if (PyFloat_CheckExact(x)) return static_cast<double>(*out) == d;
    // Ints, bools, fractions: Python compares them with a float exactly.
    py::object back = py::reinterpret_steal<py::object>(PyFloat_FromDouble(*out));
    const int eq = back ? PyObject_RichCompareBool(x, back.ptr(), Py_EQ) : -1;
    if (eq < 0) PyErr_Clear();
    return eq == 1;
  } else {
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(x));
    if (!index) {
      // Not an int: a float (or fraction) of an integral value may fit.
      PyErr_Clear();
      const double d = PyFloat_AsDouble(x);
      if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      // T's range as exact powers of two (NaN fails both comparisons).
      const int bits = static_cast<int>(sizeof(T) * 8) - (std::is_signed_v<T> ? 1 : 0);
      const double lo = std::is_signed_v<T> ? -std::ldexp(1.0, bits) : 0.0;
      if (!(d >= lo && d < std::ldexp(1.0, bits)) || d != std::trunc(d)) return false;
      *out = static_cast<T>(d);
      py::object back = std::is_signed_v<T> ? py::int_(static_cast<long long>(*out))
                                            : py::int_(static_cast<unsigned long long>(*out));
      const int eq = PyObject_RichCompareBool(x, back.ptr(), Py_EQ);
      if (eq < 0) PyErr_Clear();
      return eq == 1;
    }
    if constexpr (std::is_signed_v<T>) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
      if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
      }
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) return false;
      *out = static_cast<T>(v);
    } else {
      const unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());  // negative: error
      if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      if (v > std::numeric_limits<T>::max()) return false;
      *out = static_cast<T>(v);
    }
    return true;
  }
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls `f` with a Tag of the C++ type of element type `t`.
template <typename F>
void WithType(idl::ElementType t, F&& f) {
  switch (t) {
    case idl::ElementType::kU8:
    case idl::ElementType::kBytes:
      return f(Tag<uint8_t>{});
    case idl::ElementType::kU16:
      return f(Tag<uint16_t>{});
    case idl::ElementType::kU32:
      return f(Tag<uint32_t>{});
    case idl::ElementType::kU64:
      return f(Tag<uint64_t>{});
    case idl::ElementType::kI8:
      return f(Tag<int8_t>{});
    case idl::ElementType::kI16:
      return f(Tag<int16_t>{});
    case idl::ElementType::kI32:
      return f(Tag<int32_t>{});
    case idl::ElementType::kI64:
      return f(Tag<int64_t>{});
    case idl::ElementType::kF32:
      return f(Tag<float>{});
    case idl::ElementType::kF64:
      return f(Tag<double>{});
  }
}

// A Python number or (nested) list of numbers as an array of the IDL type,
// element by element: refused (naming the element) unless every value fits
// exactly, so nothing is silently rounded, wrapped or truncated.
py::array ConvertExactly(const std::string& what, const idl::Param& p, const py::dtype& want,
                         const py::object& value) {
  const std::string shape = " (" + Shape(p) + ")";
  if (value.is_none()) throw py::type_error(what + ": None is not a number or an array" + shape);
  if (py::isinstance<py::str>(value)) {
    throw py::type_error(what + ": a str is not a number or an array" + shape +
                         "; bytes are u8 elements: b\"...\" or s.encode()");
  }
  py::array objects;
  try {
    objects = Numpy().attr("asarray")(value, py::arg("dtype") = "O").cast<py::array>();
    if (!(objects.flags() & py::array::c_style)) {
      objects = Numpy().attr("ascontiguousarray")(objects).cast<py::array>();
    }
  } catch (py::error_already_set& e) {
    throw py::value_error(what + ": cannot be converted to " + TypeName(p) + ": " + e.what());
  }
  std::vector<py::ssize_t> dims(objects.shape(), objects.shape() + objects.ndim());
  py::array converted(want, dims);
  const auto n = static_cast<size_t>(objects.size());
  PyObject* const* items = static_cast<PyObject* const*>(objects.data());
  py::handle generic = Numpy().attr("generic");
  WithType(p.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(converted.mutable_data());
    for (size_t i = 0; i < n; ++i) {
      py::object x = py::reinterpret_borrow<py::object>(items[i]);
      const std::string at = "element " + std::to_string(i);
      if (py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x) ||
          py::isinstance<py::array>(x)) {
        throw py::value_error(what + ": nested lists of different lengths (" + at + " is a " +
                              TypeNameOf(x) + ") cannot be converted to " + TypeName(p) + shape);
      }
      if (!PyNumber_Check(x.ptr()) || py::isinstance<py::str>(x) || py::isinstance<py::bytes>(x)) {
        throw py::type_error(what + ": " + at + " is " +
                             (x.is_none() ? std::string("None") : "a " + TypeNameOf(x)) +
                             ", not a number" + shape);
      }
      if (py::isinstance(x, generic)) x = x.attr("item")();  // numpy scalars: exact Python values
      if (!ExactElement<T>(x.ptr(), &out[i])) {
        throw py::value_error(what + ": the values do not fit " + TypeName(p) + " exactly (" +
                              at + " is " + ShortRepr(x) +
                              "); to send them rounded, convert them yourself: np.array(..., "
                              "dtype=np." + DtypeText(want) + ")");
      }
    }
  });
  return converted;
}

}  // namespace

// Python arguments as C-contiguous 1-D arrays of the IDL type; errors name
// the parameter, expected vs actual.
// `context` follows the parameter's name in errors (" (chunk 3 of the stream)").
py::array CheckArray(const std::string& full, const idl::Param& p, py::object value,
                     const std::string& context) {
  const py::dtype want = DtypeOf(p.type);
  const std::string what = full + ": parameter '" + p.name + "'" + context;
  // bytes, bytearray and memoryviews are arrays (of u8 elements for bytes),
  // viewed without a copy.
  bool bytes_like = false;
  if (py::isinstance<py::bytes>(value) || py::isinstance<py::bytearray>(value)) {
    value = Numpy().attr("frombuffer")(value, DtypeOf(idl::ElementType::kU8));
    bytes_like = true;
  } else if (py::isinstance<py::memoryview>(value)) {
    try {
      value = Numpy().attr("asarray")(value);
    } catch (py::error_already_set& e) {
      throw py::type_error(what + ": its memoryview cannot be read as an array: " + e.what());
    }
    bytes_like = true;
  }
  py::array a;
  if (py::isinstance<py::array>(value)) {
    a = py::reinterpret_borrow<py::array>(value);
    if (!a.dtype().is(want) && !a.dtype().equal(want)) {
      throw py::type_error(what + " needs dtype " + DtypeText(want) + " (" +
                           TypeName(p) + "), got " + (bytes_like ? "bytes of dtype " : "dtype ") +
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
                           TypeNameOf(value));
    }
    a = ConvertExactly(what, p, want, value);
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

std::string TypeNameOf(py::handle v) {
  return py::str(v.get_type().attr("__name__")).cast<std::string>();
}

bool IsBytesLike(py::handle v) {
  return py::isinstance<py::bytes>(v) || py::isinstance<py::bytearray>(v) ||
         py::isinstance<py::memoryview>(v);
}

uint64_t CountArg(py::handle n, uint64_t max, const std::string& what) {
  py::object index;
  if (!py::isinstance<py::bool_>(n)) {
    index = py::reinterpret_steal<py::object>(PyNumber_Index(n.ptr()));
  }
  if (!index) {
    PyErr_Clear();
    throw py::type_error(what + "; got a " + TypeNameOf(n) + ", not an int");
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0 || v < 0 || static_cast<unsigned long long>(v) > max) {
    throw py::value_error(what + "; got " + ShortRepr(index));
  }
  return static_cast<uint64_t>(v);
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
