// Errors of the Python module: C++ statuses and IDL load errors raised as
// the classes of python/naarpc/_errors.py.
#ifndef NAARPC_PYTHON_ERRORS_H_
#define NAARPC_PYTHON_ERRORS_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters

#include <exception>
#include <string>
#include <vector>

#include "idl/ir.h"
#include "naarpc/status.h"

namespace py = pybind11;

namespace naarpc::python {

// ---- errors -------------------------------------------------------------------
// Raised as the classes of python/naarpc/_errors.py (naarpc.Error and its
// subclasses), which carry the status's fields as attributes.

struct StatusError {
  Status status;
  std::string status_name;  // kNaaError: the IDL's name of the NAA status
  std::string status_doc;
};

struct IdlLoadError {
  std::string message;
  std::vector<std::string> diagnostics;
};

// Throws `s` as a StatusError; kNaaError statuses are named by `service`'s
// errors.
[[noreturn]] void Throw(const Status& s, const idl::Service* service = nullptr);

// The pybind11 exception translator of StatusError and IdlLoadError.
void TranslateErrors(std::exception_ptr p);

}  // namespace naarpc::python

#endif  // NAARPC_PYTHON_ERRORS_H_
