#include "python/errors.h"

#include "tools/naarpc/dynamic_call.h"

namespace py = pybind11;

namespace naarpc::python {

[[noreturn]] void Throw(const Status& s, const idl::Service* service) {
  StatusError e{s, "", ""};
  if (s.code() == StatusCode::kNaaError && s.wire_code() && service != nullptr) {
    e.status_name = cli::StatusName(*service, *s.wire_code());
    for (const idl::ErrorCode& err : service->errors) {
      if (err.code == *s.wire_code()) e.status_doc = err.doc;
    }
  }
  throw e;
}

void TranslateErrors(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const StatusError& e) {
    py::object errors = py::module_::import("naarpc._errors");
    py::object exc = errors.attr("from_status")(
        std::string(StatusCodeName(e.status.code())), e.status.ToString(),
        e.status.wire_code() ? py::cast(int{*e.status.wire_code()}) : py::none(), e.status_name,
        e.status_doc);
    PyErr_SetObject(exc.get_type().ptr(), exc.ptr());
  } catch (const IdlLoadError& e) {
    py::object errors = py::module_::import("naarpc._errors");
    py::object exc = errors.attr("IdlError")(e.message, e.diagnostics);
    PyErr_SetObject(exc.get_type().ptr(), exc.ptr());
  }
}

}  // namespace naarpc::python
