// numpy <-> IDL values: dtypes of the element types, argument arrays checked
// against their parameters, and the loaded IDL as Python sees it.
#ifndef NAARPC_PYTHON_VALUES_H_
#define NAARPC_PYTHON_VALUES_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters

#include <memory>
#include <string>

#include "idl/ir.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/target.h"

namespace py = pybind11;

namespace naarpc::python {

// ---- element types ------------------------------------------------------------

// The dtype of an element type, made once (parsing a dtype string costs
// about a microsecond a call). Never freed: the module lives as long as the
// interpreter.
py::dtype DtypeOf(idl::ElementType t);

// A 1-D array of `n` elements: new, or over `ptr` (kept alive by `base`).
py::array Array1D(const py::dtype& dt, py::ssize_t n, void* ptr = nullptr,
                  py::handle base = py::handle());

std::string DtypeText(const py::dtype& dt);

std::string TypeName(const idl::Param& p);

// "1024 x f32", "at most 1024 x i32", "a stream of u32".
std::string Shape(const idl::Param& p);

std::string ShapeText(const py::array& a);

// Python arguments as C-contiguous 1-D arrays of the IDL type; errors name
// the parameter, expected vs actual.
// `context` follows the parameter's name in errors (" (chunk 3 of the stream)").
py::array CheckArray(const std::string& full, const idl::Param& p, py::object value,
                     const std::string& context = "");

// The name of `v`'s type ("list").
std::string TypeNameOf(py::handle v);

// bytes, bytearray or a memoryview: u8 elements (numpy.frombuffer).
bool IsBytesLike(py::handle v);

// `n` as a count 0..max: TypeError unless an int (a numpy integer counts),
// ValueError out of range; `what` starts the messages ("R: set_length('q', n): ...").
uint64_t CountArg(py::handle n, uint64_t max, const std::string& what);

// The parameter a keyword argument names; TypeError listing the routine's
// parameters if none.
const idl::Param& ParamOf(const idl::Routine& routine, const std::string& full,
                          const std::string& pname);

// ---- IDL ----------------------------------------------------------------------

struct Idl {
  std::shared_ptr<const idl::IdlFile> file;

  const idl::Service* service_of(const std::string& routine_name,
                                 const idl::Routine** routine) const {
    const idl::Service* service = nullptr;
    *routine = nullptr;
    Status found = cli::FindRoutine(*file, routine_name, &service, routine);
    if (!found.ok()) throw py::key_error(found.message());
    return service;
  }
};

Idl LoadIdl(const std::string& path);

// A routine's declaration for the Python side: {name, service, code,
// deadline_ms, timeout_ms, doc, memory_windows, params: [{name, type, dtype, count, variable,
// direction, stream}], errors: {NAME: code}}.
py::dict RoutineInfo(const idl::Service& s, const idl::Routine& r);

}  // namespace naarpc::python

#endif  // NAARPC_PYTHON_VALUES_H_
