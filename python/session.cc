#include "python/session.h"

#include <chrono>
#include <optional>

namespace py = pybind11;

namespace naarpc::python {

using cli::DynamicCall;
using cli::ValueView;

unsigned long& MainThreadId() {
  static unsigned long id = 0;
  return id;
}

Status RunInterruptible(DynamicCall& call, const std::map<std::string, ValueView>& inputs,
                        Deadline deadline, std::shared_ptr<py::error_already_set>* raised) {
  constexpr auto kSlice = std::chrono::milliseconds(50);
  Status started = call.Start(inputs, deadline);
  if (!started.ok()) return started;
  for (;;) {
    // The slices use the coarse clock (a precise read can cost ~1 us here).
    const Deadline slice_end = Deadline::At(Deadline::CoarseNow() + kSlice);
    if (std::optional<Status> done = call.Wait(Deadline::Earlier(slice_end, deadline))) {
      return *done;
    }
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      *raised = std::make_shared<py::error_already_set>();  // fetches it
      call.Abandon();
      return CancelledError(call.full_name() + ": interrupted");
    }
  }
}

}  // namespace naarpc::python
