// One connection of a Python Client for one routine, and the client's state
// its sessions share.
#ifndef NAARPC_PYTHON_SESSION_H_
#define NAARPC_PYTHON_SESSION_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "idl/ir.h"
#include "naarpc/client_session.h"
#include "naarpc/comm_state.h"
#include "naarpc/transport.h"
#include "tools/naarpc/dynamic_call.h"

namespace py = pybind11;

namespace naarpc::python {

using cli::DynamicCall;

// ---- client -------------------------------------------------------------------

struct Shared {
  std::shared_ptr<const idl::IdlFile> idl;
  std::unique_ptr<Transport> transport;
  std::string transport_label;
  ClientOptions options;
};

// One session for one routine. Members in this order: the call (and its
// connection) goes before the transport it uses.
struct Session {
  std::shared_ptr<Shared> shared;
  const idl::Service* service = nullptr;
  const idl::Routine* routine = nullptr;
  std::mutex mu;  // one call at a time
  std::unique_ptr<DynamicCall> call;
  size_t naa = 0;       // its NAA: index in the routine's channel
  bool pinned = false;  // arrays from empty() view its buffers
  // Per parameter: the arrays from empty() over its buffer still alive. A
  // call runs here only if given every one of them, so that it writes into
  // no such array it was not given (Client::Call).
  std::vector<std::atomic<uint32_t>> handed;

  bool broken() const {
    return call == nullptr || call->session().state() == CommState::kError ||
           call->session().state() == CommState::kDisconnected;
  }
  // Where parameter `p`'s elements start in the registered buffer.
  std::byte* slot(const idl::Param& p) const {
    return call->session().buffer(p.index).data() + p.data_offset();
  }
};

// The interpreter's main thread (where Python runs signal handlers).
unsigned long& MainThreadId();

// Runs a call (no streams) on this thread, which holds no GIL, waiting for
// it on the connection in slices of at most 50 ms (ClientSession::WaitCall:
// one blocking receive per answer, as a C++ stub's call): between them it
// takes the GIL and runs Python's signal handlers (PyErr_CheckSignals). If
// one raises (Ctrl-C: KeyboardInterrupt) the call is abandoned (its
// connection closed, so the NAA's late answer cannot land) and the
// exception is kept in `*raised`.
Status RunInterruptible(cli::DynamicCall& call, const std::map<std::string, cli::ValueView>& inputs,
                        Deadline deadline, std::shared_ptr<py::error_already_set>* raised);

}  // namespace naarpc::python

#endif  // NAARPC_PYTHON_SESSION_H_
