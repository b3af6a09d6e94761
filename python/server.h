// naarpc.serve's C++ half: an NAA whose kernels are Python functions, their
// calls and streams as Python sees them.
#ifndef NAARPC_PYTHON_SERVER_H_
#define NAARPC_PYTHON_SERVER_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "naarpc/impl/codegen_stream.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "python/errors.h"
#include "python/values.h"
#include "tools/naarpc/describe.h"
#include "tools/naarpc/dynamic_naa.h"
#include "tools/naarpc/target.h"

namespace py = pybind11;

namespace naarpc::python {

// ---- serving ------------------------------------------------------------------

// The `call` argument of a Python kernel.
struct KernelCall {
  cli::KernelArgs* args = nullptr;  // null once the kernel has returned
  std::string routine;
  int function_code = 0;
  std::string dialect;

  cli::KernelArgs& live() {
    if (args == nullptr) {
      throw py::value_error("this call of " + routine + " has finished (a kernel's call and "
                            "arrays are valid only while it runs)");
    }
    return *args;
  }
  const idl::Param& param(const std::string& name) {
    const idl::Param* p = live().routine->FindParam(name);
    if (p == nullptr) throw py::key_error(routine + " has no parameter '" + name + "'");
    return *p;
  }
  void SetLength(const std::string& name, uint64_t n) {
    const idl::Param& p = param(name);
    if (!p.is_output() || !p.variable) {
      throw py::value_error(routine + ": '" + name +
                            "' is not a variable-length output; its length is fixed");
    }
    if (n > p.count) {
      throw py::value_error(routine + ": '" + name + "' holds at most " + std::to_string(p.count) +
                            " elements, not " + std::to_string(n));
    }
    live().counts[p.index] = n;
  }
  uint64_t Length(const std::string& name) { return live().counts[param(name).index]; }
  // The whole capacity of an output (its maximum if variable-length).
  py::array Full(py::object self, const std::string& name) {
    const idl::Param& p = param(name);
    if (!p.is_output()) throw py::value_error(routine + ": '" + name + "' is an input");
    std::span<std::byte> d = live().data[p.index];
    return Array1D(DtypeOf(p.type), static_cast<py::ssize_t>(p.count), d.data(), self);
  }
};

// A stream parameter as a Python kernel sees it (`serve`): the generated
// skeleton's codegen::StreamReader / StreamWriter, typed by element size,
// with numpy at the edge. An input stream is an iterator of read-only
// arrays viewing each chunk in place in the NAA's ring (valid until the
// next chunk is asked for); an output stream takes write(array) and
// close(), or slot() (a writable array over the next chunk's slot) and
// commit(n). Every wait releases the GIL. Valid while the kernel runs.
struct KernelStream {
  const idl::Param* param = nullptr;
  std::string full;
  size_t chunk_elements = 0;
  uint32_t window = 0;
  bool live = true;
  std::shared_ptr<void> holder;  // the StreamReader<T> / StreamWriter<T>
  std::function<Result<std::span<const std::byte>>()> next;  // input
  std::function<Result<std::span<std::byte>>()> next_slot;   // output
  std::function<Status(size_t)> commit;                      // output, elements
  std::function<Status(std::span<const std::byte>)> write;   // output
  std::function<Status()> close;                             // output
  std::function<Status()> error;
  std::function<bool()> malformed;

  static std::unique_ptr<KernelStream> Make(const std::string& full, const idl::Param& p,
                                            NaaStream& stream) {
    auto k = std::make_unique<KernelStream>();
    k->param = &p;
    k->full = full;
    k->window = stream.window();
    WithElement(idl::Describe(p.type).size, [&](auto tag) {
      using T = decltype(tag);
      k->chunk_elements = stream.chunk_size() / sizeof(T);
      if (p.is_input()) {
        auto r = std::make_shared<codegen::StreamReader<T>>(stream);
        k->holder = r;
        k->next = [r]() -> Result<std::span<const std::byte>> {
          NAARPC_ASSIGN_OR_RETURN(std::span<const T> chunk, r->Next());
          return std::as_bytes(chunk);
        };
        k->error = [r] { return r->error(); };
        k->malformed = [r] { return r->malformed(); };
      } else {
        auto w = std::make_shared<codegen::StreamWriter<T>>(stream);
        k->holder = w;
        k->next_slot = [w]() -> Result<std::span<std::byte>> {
          NAARPC_ASSIGN_OR_RETURN(std::span<T> slot, w->NextSlot());
          return std::as_writable_bytes(slot);
        };
        k->commit = [w](size_t n) { return w->Commit(n); };
        k->write = [w](std::span<const std::byte> bytes) {
          return w->Write(std::span<const T>(reinterpret_cast<const T*>(bytes.data()),
                                             bytes.size() / sizeof(T)));
        };
        k->close = [w] { return w->Close(); };
        k->error = [w] { return w->error(); };
        k->malformed = [] { return false; };
      }
    });
    return k;
  }

  void Live(bool want_input) const {
    if (!live) {
      throw py::value_error("stream '" + param->name + "' of this call of " + full +
                            " has finished (a kernel's streams are valid only while it runs)");
    }
    if (want_input != param->is_input()) {
      throw py::type_error(full + ": stream '" + param->name + "' is an " +
                           (param->is_input() ? "input stream: iterate over it"
                                              : "output stream: write() to it"));
    }
  }

  // The next chunk (a read-only view in place); None at the end.
  py::object Next(py::object self) {
    Live(true);
    Result<std::span<const std::byte>> chunk = InternalError("");
    {
      py::gil_scoped_release release;
      chunk = next();
    }
    if (!chunk.ok()) Throw(chunk.status().WithContext(full + ": stream '" + param->name + "'"));
    if (chunk->empty()) return py::none();
    const size_t elem = idl::Describe(param->type).size;
    py::array a = Array1D(DtypeOf(param->type), static_cast<py::ssize_t>(chunk->size() / elem),
                          const_cast<std::byte*>(chunk->data()), self);
    a.attr("setflags")(py::arg("write") = false);
    return a;
  }

  void Write(py::object value) {
    Live(false);
    const py::dtype want = DtypeOf(param->type);
    const std::string what = full + ": output stream '" + param->name + "'";
    if (!py::isinstance<py::array>(value)) {
      value = py::module_::import("numpy").attr("asarray")(value);
    }
    py::array a = py::reinterpret_borrow<py::array>(value);
    if (!a.dtype().equal(want)) {
      throw py::type_error(what + " takes dtype " + DtypeText(want) + " (" + TypeName(*param) +
                           "), got dtype " + DtypeText(a.dtype()));
    }
    if (a.ndim() != 1) {
      throw py::value_error(what + " takes 1-D arrays, got shape " + ShapeText(a));
    }
    a = py::module_::import("numpy").attr("ascontiguousarray")(a).cast<py::array>();
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(a.data()),
                                           static_cast<size_t>(a.nbytes()));
    Status s;
    {
      py::gil_scoped_release release;
      s = write(bytes);
    }
    if (!s.ok()) Throw(s.WithContext(what));
  }

  void Close() {
    Live(false);
    Status s;
    {
      py::gil_scoped_release release;
      s = close();
    }
    if (!s.ok()) Throw(s.WithContext(full + ": output stream '" + param->name + "'"));
  }

  // A writable array over the next chunk's slot (chunk_elements long).
  py::array Slot(py::object self) {
    Live(false);
    Result<std::span<std::byte>> slot = InternalError("");
    {
      py::gil_scoped_release release;
      slot = next_slot();
    }
    if (!slot.ok()) Throw(slot.status().WithContext(full + ": output stream '" + param->name + "'"));
    return Array1D(DtypeOf(param->type), static_cast<py::ssize_t>(chunk_elements), slot->data(),
                   self);
  }

  void Commit(size_t n) {
    Live(false);
    if (n > chunk_elements) {
      throw py::value_error(full + ": output stream '" + param->name + "': commit(" +
                            std::to_string(n) + ") beyond the chunk size " +
                            std::to_string(chunk_elements));
    }
    Status s;
    {
      py::gil_scoped_release release;
      s = commit(n);
    }
    if (!s.ok()) Throw(s.WithContext(full + ": output stream '" + param->name + "'"));
  }
};

class Server {
 public:
  Server(const Idl& idl, py::dict kernels, const std::string& address, int port,
         const std::string& transport, const std::string& device, const std::string& dialect,
         std::optional<std::string> service_name, bool memory_windows)
      : idl_(idl.file), dialect_(dialect), memory_windows_(memory_windows) {
    if (dialect_ != "spec" && dialect_ != "reference" && dialect_ != "any") {
      throw py::value_error("dialect '" + dialect_ + "': spec, reference or any");
    }
    if (port < 0 || port > 65535) throw py::value_error("port " + std::to_string(port) +
                                                        " is not in 0..65535");
    std::vector<const idl::Service*> services;
    for (const idl::Service& s : idl_->services) {
      if (!service_name || s.name == *service_name) services.push_back(&s);
    }
    if (services.empty()) {
      throw py::value_error(idl_->path + " has no service '" + service_name.value_or("") + "'");
    }
    // Routines without a kernel answer "unknown function" (0x03); strings
    // name a built-in kernel of `naarpc serve` (echo, fail:NAME, ...).
    std::vector<std::string> specs = {"fail:3"};
    std::vector<std::pair<std::string, py::object>> functions;
    for (auto [key, value] : kernels) {
      const std::string routine = py::cast<std::string>(key);
      if (py::isinstance<py::str>(value)) {
        specs.push_back(routine + "=" + py::cast<std::string>(value));
      } else if (PyCallable_Check(value.ptr())) {
        functions.emplace_back(routine, py::reinterpret_borrow<py::object>(value));
      } else {
        throw py::type_error("kernel for '" + routine +
                             "' must be a function or a built-in kernel name, got " +
                             py::str(value.get_type().attr("__name__")).cast<std::string>());
      }
    }
    auto naa = cli::DynamicNaa::Create(services, specs);
    if (!naa.ok()) throw py::value_error(naa.status().message());
    naa_ = std::move(*naa);
    for (auto& [routine, fn] : functions) {
      auto holder = std::make_shared<py::object>(fn);
      Status set = naa_->SetKernel(
          routine,
          [holder](cli::KernelArgs& args) { return RunPython(*holder, args); },
          "python " + py::str(py::getattr(fn, "__qualname__", fn)).cast<std::string>());
      if (!set.ok()) {
        if (set.code() == StatusCode::kNotFound) throw py::key_error(set.message());
        throw py::value_error(set.message());
      }
      holders_.push_back(holder);
    }
    auto made = NewTransport(transport, device);
    if (!made.ok()) Throw(made.status());
    transport_ = std::move(*made);
    ServerOptions options;
    // Calls of the other dialect get status 0x04.
    if (dialect_ != "any") options.dialect = dialect_ == "spec" ? Dialect::kSpec : Dialect::kReference;
    options.memory_windows = memory_windows_;  // accept per-call windows (MRSP 0x01)
    options.log = [](std::string_view line) {
      std::fprintf(stderr, "naarpc serve: %.*s\n", static_cast<int>(line.size()), line.data());
    };
    Result<std::unique_ptr<NaaServer>> started = InvalidArgumentError("");
    {
      py::gil_scoped_release release;
      started = NaaServer::Start(*transport_, address, static_cast<uint16_t>(port), *naa_,
                                 options);
    }
    if (!started.ok()) Throw(started.status());
    server_ = std::move(*started);
    address_ = address;
  }

  ~Server() {
    // Kernels need the GIL to finish: shut down without it.
    if (server_) {
      py::gil_scoped_release release;
      server_->Shutdown();
      server_.reset();
    }
  }

  void Stop() {
    if (!server_) return;
    {
      py::gil_scoped_release release;
      server_->Shutdown();
    }
    server_.reset();
  }

  int port() const { return port_ ? port_ : (server_ ? server_->port() : 0); }
  bool running() const { return server_ != nullptr; }
  uint64_t calls() const { return naa_->calls(); }
  std::string describe() const { return naa_->Describe(); }
  std::string transport_name() const { return std::string(transport_->name()); }
  std::string address() const { return address_; }

 private:
  static uint8_t RunPython(const py::object& fn, cli::KernelArgs& args) {
    py::gil_scoped_acquire gil;
    const idl::Routine& r = *args.routine;
    const std::string full = args.service->name + "." + r.name;
    py::object call_obj = py::cast(KernelCall{&args, full, args.call->function_code,
                                              args.call->dialect == Dialect::kSpec ? "spec"
                                                                                   : "reference"});
    py::list arrays;
    std::vector<std::shared_ptr<KernelStream>> streams;
    for (const idl::Param& p : r.params) {
      if (p.is_stream()) {
        streams.push_back(KernelStream::Make(full, p, *args.streams[p.index]));
        arrays.append(py::cast(streams.back()));
        continue;
      }
      const std::span<std::byte> d = args.data[p.index];
      const auto n = static_cast<py::ssize_t>(args.counts[p.index]);
      py::array a = Array1D(DtypeOf(p.type), n, d.data(), call_obj);
      if (!p.is_output()) a.attr("setflags")(py::arg("write") = false);
      arrays.append(a);
    }
    uint8_t status = kNaaStatusKernelFailed;
    try {
      py::object ret = fn(call_obj, *arrays);
      status = StatusOfReturn(ret, *args.service, full, args.call->failure_detail);
    } catch (py::error_already_set& e) {
      py::object exc = e.value();
      py::object code = py::getattr(exc, "status_code", py::none());
      if (!code.is_none() && py::isinstance<py::int_>(code)) {
        const int c = code.cast<int>();
        status = (c >= 1 && c <= 0x7f) ? static_cast<uint8_t>(c) : kNaaStatusKernelFailed;
      }
      args.call->failure_detail = full + ": the kernel raised " + std::string(e.what());
    } catch (std::exception& e) {
      args.call->failure_detail = full + ": the kernel raised " + std::string(e.what());
    }
    call_obj.cast<KernelCall&>().args = nullptr;
    for (auto& k : streams) k->live = false;
    // A stream's error fails the call whatever the kernel returned, as in a
    // generated skeleton: 0x04 if an input chunk was not whole elements.
    for (auto& k : streams) {
      const Status e = k->error();
      if (e.ok()) continue;
      args.call->failure_detail = full + ": stream '" + k->param->name + "': " + e.ToString();
      return k->malformed() ? kNaaStatusBadRegionLayout : kNaaStatusKernelFailed;
    }
    return status;
  }

  // None / 0: success; an int: that status; a str: an error name of the IDL.
  static uint8_t StatusOfReturn(const py::object& ret, const idl::Service& service,
                                const std::string& full, std::string& detail) {
    if (ret.is_none()) return kNaaStatusSuccess;
    if (py::isinstance<py::bool_>(ret)) {
      detail = full + ": the kernel returned a bool; return None, a status or an error name";
      return kNaaStatusKernelFailed;
    }
    if (py::isinstance<py::int_>(ret)) {
      const long long c = ret.cast<long long>();
      if (c >= 0 && c <= 0x7f) return static_cast<uint8_t>(c);
      detail = full + ": the kernel returned status " + std::to_string(c) + ", not 0..0x7f";
      return kNaaStatusKernelFailed;
    }
    if (py::isinstance<py::str>(ret)) {
      const std::string name = ret.cast<std::string>();
      for (const idl::ErrorCode& e : service.errors) {
        if (e.name == name) return e.code;
      }
      detail = full + ": the kernel returned '" + name + "', not an error name of " + service.name;
      return kNaaStatusKernelFailed;
    }
    // Anything else (e.g. the array np.add(..., out=out) returns): success.
    return kNaaStatusSuccess;
  }


  std::shared_ptr<const idl::IdlFile> idl_;
  std::string dialect_, address_;
  bool memory_windows_ = true;
  int port_ = 0;
  std::vector<std::shared_ptr<py::object>> holders_;
  std::unique_ptr<cli::DynamicNaa> naa_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<NaaServer> server_;  // first to go
};

}  // namespace naarpc::python

#endif  // NAARPC_PYTHON_SERVER_H_
