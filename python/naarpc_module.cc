// naarpc._naarpc: the C++ half of the Python module `naarpc` (python/naarpc,
// docs/python.md). It is the `naarpc` CLI's dynamic machinery
// (tools/naarpc: IDL loading, describe, DynamicCall, DynamicNaa, target
// resolution) with numpy arrays at the edges; python/naarpc/__init__.py adds
// the attribute-style interface, futures and asyncio.
//
// Concurrency: a Client keeps a pool of sessions (one connection each) per
// routine; a call takes an idle one or opens one, and runs with the GIL
// released. Arrays from Client.empty() view a session's registered buffer and
// pin that session: calls given such an array as an output use that session,
// so results land in the array without a copy. The GIL is never held while
// waiting for a session's lock.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "naarpc/stats_registry.h"
#include "python/client.h"
#include "python/errors.h"
#include "python/server.h"
#include "python/streams.h"
#include "python/values.h"
#include "tools/naarpc/describe.h"

namespace py = pybind11;

PYBIND11_MODULE(_naarpc, m) {
  using namespace naarpc::python;
  m.doc() = "The C++ half of the naarpc Python module (use `import naarpc`).";
  py::register_exception_translator(&TranslateErrors);
  MainThreadId() =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();

  py::class_<Idl>(m, "Idl")
      .def_property_readonly("path", [](const Idl& i) { return i.file->path; })
      .def_property_readonly("package", [](const Idl& i) { return i.file->package; })
      .def_property_readonly("services",
                             [](const Idl& i) {
                               std::vector<std::string> names;
                               for (const auto& s : i.file->services) names.push_back(s.name);
                               return names;
                             })
      .def("routines",
           [](const Idl& i, const std::string& service) {
             std::vector<std::string> names;
             for (const auto& s : i.file->services) {
               if (s.name != service) continue;
               for (const auto& r : s.routines) names.push_back(r.name);
               return names;
             }
             throw py::key_error(i.file->path + " has no service '" + service + "'");
           })
      .def("routine",
           [](const Idl& i, const std::string& name) {
             const naarpc::idl::Routine* r = nullptr;
             const naarpc::idl::Service* s = i.service_of(name, &r);
             return RoutineInfo(*s, *r);
           })
      .def(
          "describe",
          [](const Idl& i, const std::string& selector, bool json) {
            auto out = json ? naarpc::cli::DescribeJson(*i.file, selector)
                            : naarpc::cli::DescribeText(*i.file, selector);
            if (!out.ok()) throw py::key_error(out.status().message());
            return *out;
          },
          py::arg("selector") = "", py::arg("json") = false);

  m.def("load_idl", &LoadIdl, py::arg("path"));

  // The process's per-routine statistics (StatsRegistry::Default(): the
  // calls of every Client, and of every NAA served here), one dict each.
  m.def("stats", [] {
    py::list out;
    for (const naarpc::RoutineStats::Snapshot& s : naarpc::StatsRegistry::Default()->Take()) {
      py::dict d;
      d["side"] = std::string(naarpc::CallSideName(s.side));
      d["routine"] = s.routine;
      d["peer"] = s.peer;
      d["calls"] = s.completed;
      d["in_flight"] = s.in_flight;
      d["bytes_sent"] = s.bytes_sent;
      d["bytes_received"] = s.bytes_received;
      py::dict errors;
      for (const auto& [name, count] : s.errors) errors[py::str(name)] = count;
      d["errors"] = errors;
      // Latency in seconds (the histogram's bucket bounds: a few % coarse).
      d["latency_p50"] = static_cast<double>(s.latency_ns.Percentile(0.50)) * 1e-9;
      d["latency_p90"] = static_cast<double>(s.latency_ns.Percentile(0.90)) * 1e-9;
      d["latency_p99"] = static_cast<double>(s.latency_ns.Percentile(0.99)) * 1e-9;
      d["latency_max"] = static_cast<double>(s.latency_ns.max) * 1e-9;
      out.append(d);
    }
    return out;
  });
  // The same in the Prometheus text format (what a metrics endpoint serves).
  m.def("metrics_text", [] { return naarpc::RenderPrometheusText(*naarpc::StatsRegistry::Default()); });

  py::class_<Client>(m, "Client")
      .def(py::init<const Idl&, std::vector<std::string>, const std::string&,
                    const std::string&, const std::string&, std::optional<bool>>(),
           py::arg("idl"), py::arg("target"), py::arg("transport"), py::arg("device"),
           py::arg("dialect"), py::arg("memory_windows"))
      .def("memory_windows", &Client::MemoryWindows, py::arg("routine"))
      .def("call", &Client::Call, py::arg("routine"), py::arg("kwargs"), py::arg("deadline"))
      .def("start", &Client::Start, py::arg("routine"), py::arg("kwargs"), py::arg("deadline"),
           py::keep_alive<0, 1>())
      .def("empty", &Client::Empty, py::arg("routine"), py::arg("param"), py::arg("deadline"))
      .def("close", &Client::Close)
      .def("sessions", &Client::sessions)
      .def("naa_counters", &Client::NaaCountersList)
      .def_property_readonly("transport", &Client::transport_name);

  py::class_<StreamingCall>(m, "StreamingCall")
      .def("next", &StreamingCall::Next, py::arg("stream"))
      .def("result", &StreamingCall::Finish)
      .def("cancel", &StreamingCall::Cancel)
      .def_property_readonly("done", &StreamingCall::done)
      .def_property_readonly("streams", &StreamingCall::output_streams);

  py::class_<KernelCall>(m, "KernelCall")
      .def_readonly("routine", &KernelCall::routine)
      .def_readonly("function_code", &KernelCall::function_code)
      .def_readonly("dialect", &KernelCall::dialect)
      .def("set_length", &KernelCall::SetLength, py::arg("param"), py::arg("n"))
      .def("length", &KernelCall::Length, py::arg("param"))
      .def("full", &KernelCall::Full, py::arg("param"))
      .def("__repr__", [](const KernelCall& c) { return "<naarpc kernel call " + c.routine + ">"; });

  py::class_<KernelStream, std::shared_ptr<KernelStream>>(m, "KernelStream")
      .def_property_readonly("name", [](const KernelStream& k) { return k.param->name; })
      .def_property_readonly("is_input", [](const KernelStream& k) { return k.param->is_input(); })
      .def_property_readonly("dtype", [](const KernelStream& k) { return DtypeOf(k.param->type); })
      .def_readonly("chunk_size", &KernelStream::chunk_elements)
      .def_readonly("window", &KernelStream::window)
      .def("__iter__",
           [](py::object self) {
             self.cast<KernelStream&>().Live(true);
             return self;
           })
      .def("__next__",
           [](py::object self) {
             py::object chunk = self.cast<KernelStream&>().Next();
             if (chunk.is_none()) throw py::stop_iteration();
             return chunk;
           })
      .def("write", &KernelStream::Write, py::arg("array"))
      .def("close", &KernelStream::Close)
      .def("slot", &KernelStream::Slot)
      .def("commit", &KernelStream::Commit, py::arg("n"))
      .def("__repr__", [](const KernelStream& k) {
        return "<naarpc " + std::string(k.param->is_input() ? "input" : "output") + " stream '" +
               k.param->name + "' of " + k.full + ">";
      });

  py::class_<Server>(m, "Server")
      .def(py::init<const Idl&, py::dict, const std::string&, int, const std::string&,
                    const std::string&, const std::string&, std::optional<std::string>, bool,
                    double>(),
           py::arg("idl"), py::arg("kernels"), py::arg("address"), py::arg("port"),
           py::arg("transport"), py::arg("device"), py::arg("dialect"), py::arg("service"),
           py::arg("memory_windows"), py::arg("shutdown_grace"))
      .def("stop", &Server::Stop)
      .def_property_readonly("port", &Server::port)
      .def_property_readonly("address", &Server::address)
      .def_property_readonly("running", &Server::running)
      .def_property_readonly("calls", &Server::calls)
      .def_property_readonly("transport", &Server::transport_name)
      .def("describe", &Server::describe);
}
