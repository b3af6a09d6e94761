// naarpc.serve's C++ half: an NAA whose kernels are Python functions, their
// calls and streams as Python sees them.
#ifndef NAARPC_PYTHON_SERVER_H_
#define NAARPC_PYTHON_SERVER_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
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
  py::object keeper;  // the base of the call's arrays (RunPython); none once it returned

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
  void SetLength(const std::string& name, py::handle n) {
    const idl::Param& p = param(name);
    if (!p.is_output() || !p.variable) {
      throw py::value_error(routine + ": '" + name +
                            "' is not a variable-length output; its length is fixed");
    }
    live().counts[p.index] = CountArg(n, p.count,
                                      routine + ": set_length('" + name + "', n): '" + name +
                                          "' holds 0.." + std::to_string(p.count) + " elements");
  }
  uint64_t Length(const std::string& name) { return live().counts[param(name).index]; }
  // The whole capacity of an output (its maximum if variable-length).
  py::array Full(const std::string& name) {
    const idl::Param& p = param(name);
    if (!p.is_output()) throw py::value_error(routine + ": '" + name + "' is an input");
    std::span<std::byte> d = live().data[p.index];
    return Array1D(DtypeOf(p.type), static_cast<py::ssize_t>(p.count), d.data(), keeper);
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
  py::object keeper;             // the base of its arrays (KernelCall::keeper)
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
  py::object Next() {
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
                          const_cast<std::byte*>(chunk->data()), keeper);
    a.attr("setflags")(py::arg("write") = false);
    return a;
  }

  void Write(py::object value) {
    Live(false);
    const py::dtype want = DtypeOf(param->type);
    const std::string what = full + ": output stream '" + param->name + "'";
    if (IsBytesLike(value)) {
      value = py::module_::import("numpy").attr("frombuffer")(value, py::dtype("<u1"));
    } else if (!py::isinstance<py::array>(value)) {
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
  py::array Slot() {
    Live(false);
    Result<std::span<std::byte>> slot = InternalError("");
    {
      py::gil_scoped_release release;
      slot = next_slot();
    }
    if (!slot.ok()) Throw(slot.status().WithContext(full + ": output stream '" + param->name + "'"));
    return Array1D(DtypeOf(param->type), static_cast<py::ssize_t>(chunk_elements), slot->data(),
                   keeper);
  }

  void Commit(py::handle count) {
    Live(false);
    const uint64_t n = CountArg(count, chunk_elements,
                                full + ": output stream '" + param->name +
                                    "': commit(n): n is 0..chunk_size (" +
                                    std::to_string(chunk_elements) + ")");
    Status s;
    {
      py::gil_scoped_release release;
      s = commit(n);
    }
    if (!s.ok()) Throw(s.WithContext(full + ": output stream '" + param->name + "'"));
  }
};

// What a served NAA's kernels use: the IDL, the DynamicNaa with the Python
// functions, and the count of kernels running per function code. A kernel
// that overran its time limit runs on after NaaServer::Shutdown gave up
// waiting for it (ServerOptions::shutdown_grace) and returns into this: the
// Server then keeps it for good (it is never freed).
struct Served final : NaaHandler {
  std::shared_ptr<const idl::IdlFile> idl;
  std::unique_ptr<cli::DynamicNaa> naa;
  std::unique_ptr<Transport> transport;
  std::array<std::atomic<uint32_t>, 128> running{};  // by function code

  uint8_t Handle(NaaCall& call) override {
    std::atomic<uint32_t>& count = running[call.function_code & 0x7f];
    count.fetch_add(1);
    const uint8_t status = naa->Handle(call);
    count.fetch_sub(1);  // the last use of this object by the call
    return status;
  }
  std::chrono::milliseconds KernelTimeout(uint8_t code) const override {
    return naa->KernelTimeout(code);
  }
  std::string_view RoutineName(uint8_t code) const override { return naa->RoutineName(code); }

  // "VectorArith.Dot, ..." for the kernels running now; empty if none.
  std::string RunningNames() const {
    std::string names;
    for (size_t code = 0; code < running.size(); ++code) {
      const uint32_t n = running[code].load();
      if (n == 0) continue;
      std::string name(naa->RoutineName(static_cast<uint8_t>(code)));
      if (name.empty()) name = "function " + std::to_string(code);
      names += (names.empty() ? "" : ", ") + name + (n > 1 ? " (" + std::to_string(n) + ")" : "");
    }
    return names;
  }
};

class Server {
 public:
  Server(const Idl& idl, py::dict kernels, const std::string& address, int port,
         const std::string& transport, const std::string& device, const std::string& dialect,
         std::optional<std::string> service_name, bool memory_windows, double shutdown_grace_s)
      : served_(std::make_shared<Served>()), dialect_(dialect), memory_windows_(memory_windows) {
    served_->idl = idl.file;
    const idl::IdlFile& file = *served_->idl;
    if (dialect_ != "spec" && dialect_ != "reference" && dialect_ != "any") {
      throw py::value_error("dialect '" + dialect_ + "': spec, reference or any");
    }
    if (port < 0 || port > 65535) throw py::value_error("port " + std::to_string(port) +
                                                        " is not in 0..65535");
    if (!(shutdown_grace_s >= 0 && shutdown_grace_s <= 86400)) {
      throw py::value_error("shutdown_grace must be 0..86400 seconds, got " +
                            py::repr(py::float_(shutdown_grace_s)).cast<std::string>());
    }
    std::vector<const idl::Service*> services;
    for (const idl::Service& s : file.services) {
      if (!service_name || s.name == *service_name) services.push_back(&s);
    }
    if (services.empty()) {
      throw py::value_error(file.path + " has no service '" + service_name.value_or("") + "'");
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
    served_->naa = std::move(*naa);
    for (auto& [routine, fn] : functions) {
      // Freed with the DynamicNaa, with the GIL (~Server) or never (Served).
      auto holder = std::make_shared<py::object>(fn);
      Status set = served_->naa->SetKernel(
          routine,
          [holder](cli::KernelArgs& args) { return RunPython(*holder, args); },
          "python " + py::str(py::getattr(fn, "__qualname__", fn)).cast<std::string>());
      if (!set.ok()) {
        if (set.code() == StatusCode::kNotFound) throw py::key_error(set.message());
        throw py::value_error(set.message());
      }
    }
    auto made = NewTransport(transport, device);
    if (!made.ok()) Throw(made.status());
    served_->transport = std::move(*made);
    transport_name_ = std::string(served_->transport->name());
    ServerOptions options;
    // Calls of the other dialect get status 0x04.
    if (dialect_ != "any") options.dialect = dialect_ == "spec" ? Dialect::kSpec : Dialect::kReference;
    options.memory_windows = memory_windows_;  // accept per-call windows (MRSP 0x01)
    options.shutdown_grace =
        std::chrono::milliseconds(static_cast<int64_t>(std::ceil(shutdown_grace_s * 1000)));
    shutdown_grace_s_ = shutdown_grace_s;
    options.log = [](std::string_view line) { Log(line); };
    Result<std::unique_ptr<NaaServer>> started = InvalidArgumentError("");
    {
      py::gil_scoped_release release;
      started = NaaServer::Start(*served_->transport, address, static_cast<uint16_t>(port),
                                 *served_, options);
    }
    if (!started.ok()) Throw(started.status());
    server_ = std::move(*started);
    address_ = address;
  }

  ~Server() { Stop(); }

  // Stops listening, ends every connection, waits for the running kernels:
  // for those past their time limit at most the shutdown grace. Kernels still
  // running then are left to return on their threads.
  void Stop() {
    if (server_) {
      // Kernels need the GIL to finish: shut down without it.
      py::gil_scoped_release release;
      server_->Shutdown();
      server_.reset();
    }
    if (kept_for_kernels_) return;
    const std::string running = served_->RunningNames();
    if (running.empty()) return;
    char grace[32];
    std::snprintf(grace, sizeof grace, "%g", shutdown_grace_s_);
    Log("stopped with the kernel of " + running +
        " still running (past its time limit and the shutdown grace of " + grace +
        " s): it returns on its own thread; this server's kernels and IDL stay in memory for it");
    new std::shared_ptr<Served>(served_);  // never freed: those kernels return into it
    kept_for_kernels_ = true;
  }

  int port() const { return port_ ? port_ : (server_ ? server_->port() : 0); }
  bool running() const { return server_ != nullptr; }
  uint64_t calls() const { return served_->naa->calls(); }
  std::string describe() const { return served_->naa->Describe(); }
  std::string transport_name() const { return transport_name_; }
  std::string address() const { return address_; }

 private:
  static void Log(std::string_view line) {
    std::fprintf(stderr, "naarpc serve: %.*s\n", static_cast<int>(line.size()), line.data());
  }

  // The base object of the arrays a kernel is given: it keeps the
  // connection's memory (NaaCall::retain_memory) if the kernel kept one of
  // them, so reading it later never touches freed memory.
  static py::capsule NewKeeper() {
    auto* memory = new std::shared_ptr<const void>();
    return py::capsule(memory,
                       [](void* m) { delete static_cast<std::shared_ptr<const void>*>(m); });
  }

  static uint8_t RunPython(const py::object& fn, cli::KernelArgs& args) {
    py::gil_scoped_acquire gil;
    const idl::Routine& r = *args.routine;
    const std::string full = args.service->name + "." + r.name;
    py::capsule keeper = NewKeeper();
    py::object call_obj = py::cast(KernelCall{&args, full, args.call->function_code,
                                              args.call->dialect == Dialect::kSpec ? "spec"
                                                                                   : "reference",
                                              keeper});
    py::list arrays;
    std::vector<std::shared_ptr<KernelStream>> streams;
    for (const idl::Param& p : r.params) {
      if (p.is_stream()) {
        streams.push_back(KernelStream::Make(full, p, *args.streams[p.index]));
        streams.back()->keeper = keeper;
        arrays.append(py::cast(streams.back()));
        continue;
      }
      const std::span<std::byte> d = args.data[p.index];
      const auto n = static_cast<py::ssize_t>(args.counts[p.index]);
      py::array a = Array1D(DtypeOf(p.type), n, d.data(), keeper);
      if (!p.is_output()) a.attr("setflags")(py::arg("write") = false);
      arrays.append(a);
    }
    uint8_t status = kNaaStatusKernelFailed;
    try {
      py::object ret = fn(call_obj, *arrays);
      status = StatusOfReturn(ret, args, full);
    } catch (py::error_already_set& e) {
      args.call->failure_detail = full + ": the kernel raised " + std::string(e.what());
      py::object code = py::getattr(e.value(), "status_code", py::none());
      if (!code.is_none()) {
        const std::optional<uint8_t> c = StatusNumber(code);
        if (c && *c != kNaaStatusSuccess) {
          status = *c;
        } else {
          args.call->failure_detail += " (its status_code " + py::repr(code).cast<std::string>() +
                                       " is not a status 0x01..0x7f; answering 0x05)";
        }
      }
    } catch (std::exception& e) {
      args.call->failure_detail = full + ": the kernel raised " + std::string(e.what());
    }
    KernelCall& kc = call_obj.cast<KernelCall&>();
    kc.args = nullptr;
    kc.keeper = py::object();
    for (auto& k : streams) {
      k->live = false;
      k->keeper = py::object();
    }
    // Arrays the kernel kept (or views of them) hold the keeper: their
    // memory stays (stale, once later calls reuse it); the parameters' own
    // arrays become read-only, so no late write lands in a later call.
    bool kept = false;
    for (py::handle a : arrays) {
      if (!py::isinstance<py::array>(a) || Py_REFCNT(a.ptr()) <= 1) continue;
      kept = true;
      a.attr("setflags")(py::arg("write") = false);
    }
    arrays = py::list();
    kept = kept || Py_REFCNT(keeper.ptr()) > 1;
    if (kept && args.call->retain_memory) {
      *static_cast<std::shared_ptr<const void>*>(keeper.get_pointer()) =
          args.call->retain_memory();
    }
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

  // An int or a numpy integer, not a bool.
  static bool IsInteger(py::handle v) {
    static auto* integer = new py::object(py::module_::import("numpy").attr("integer"));
    return !py::isinstance<py::bool_>(v) &&
           (py::isinstance<py::int_>(v) || py::isinstance(v, *integer));
  }

  // An integer (IsInteger) as a status 0..0x7f; nullopt if it is not one.
  static std::optional<uint8_t> StatusNumber(py::handle v) {
    if (!IsInteger(v)) return std::nullopt;
    py::int_ i(py::reinterpret_borrow<py::object>(v));
    int overflow = 0;
    const long long c = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow != 0 || c < 0 || c > kNaaStatusLastApplication) return std::nullopt;
    return static_cast<uint8_t>(c);
  }

  // None (or an array over one of the outputs, as np.add(a, b, out=out)
  // returns it): success; a status number (int or numpy integer); an error
  // name of the IDL. Anything else fails the call (0x05), naming its type.
  static uint8_t StatusOfReturn(const py::object& ret, cli::KernelArgs& args,
                                const std::string& full) {
    if (ret.is_none()) return kNaaStatusSuccess;
    const idl::Service& service = *args.service;
    std::string& detail = args.call->failure_detail;
    const std::string type = py::str(ret.get_type().attr("__name__")).cast<std::string>();
    const std::string expected = "; a kernel returns None (success), an error name of " +
                                 service.name + " or a status number 0..0x7f";
    if (py::isinstance<py::array>(ret)) {
      const auto* at = static_cast<const std::byte*>(py::reinterpret_borrow<py::array>(ret).data());
      for (const idl::Param& p : args.routine->params) {
        const std::span<std::byte> d = args.data[p.index];
        if (p.is_output() && !d.empty() && at >= d.data() && at < d.data() + d.size()) {
          return kNaaStatusSuccess;
        }
      }
    }
    if (const std::optional<uint8_t> c = StatusNumber(ret)) return *c;
    if (IsInteger(ret)) {
      detail = full + ": the kernel returned status " + py::repr(ret).cast<std::string>() +
               ", not 0..0x7f" + expected;
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
    if (py::hasattr(ret, "send") && py::hasattr(ret, "close") &&
        (py::hasattr(ret, "gi_frame") || py::hasattr(ret, "cr_frame"))) {
      ret.attr("close")();  // never ran; closed so Python does not warn
      detail = full + ": the kernel returned a " + type +
               " object: its body never ran (a kernel is a plain function, not a generator or "
               "async function)";
      return kNaaStatusKernelFailed;
    }
    detail = full + ": the kernel returned a " + type + " (" +
             py::repr(ret).cast<std::string>().substr(0, 60) + ")" + expected;
    return kNaaStatusKernelFailed;
  }

  std::shared_ptr<Served> served_;
  bool kept_for_kernels_ = false;  // Stop() left kernels running: served_ is never freed
  std::string dialect_, address_, transport_name_;
  bool memory_windows_ = true;
  double shutdown_grace_s_ = 10;
  int port_ = 0;
  std::unique_ptr<NaaServer> server_;  // first to go
};

}  // namespace naarpc::python

#endif  // NAARPC_PYTHON_SERVER_H_
