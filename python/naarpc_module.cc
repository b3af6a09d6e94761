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

#include <atomic>
#include <chrono>
#include <functional>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "idl/load.h"
#include "naarpc/channel.h"
#include "naarpc/comm_state.h"
#include "naarpc/impl/codegen_stream.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "naarpc/stats_registry.h"
#include "naarpc/transport_factory.h"
#include "tools/naarpc/describe.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/dynamic_naa.h"
#include "tools/naarpc/target.h"

namespace py = pybind11;

namespace naarpc::python {
namespace {

using cli::DynamicCall;
using cli::ValueView;

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

[[noreturn]] void Throw(const Status& s, const idl::Service* service = nullptr) {
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

// ---- element types ------------------------------------------------------------

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
py::array Array1D(const py::dtype& dt, py::ssize_t n, void* ptr = nullptr,
                  py::handle base = py::handle()) {
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

  bool broken() const {
    return call == nullptr || call->session().state() == CommState::kError ||
           call->session().state() == CommState::kDisconnected;
  }
  // Where parameter `p`'s elements start in the registered buffer.
  std::byte* slot(const idl::Param& p) const {
    return call->session().buffer(p.index).data() + p.data_offset();
  }
};

// Python arguments as C-contiguous 1-D arrays of the IDL type; errors name
// the parameter, expected vs actual.
// `context` follows the parameter's name in errors (" (chunk 3 of the stream)").
py::array CheckArray(const std::string& full, const idl::Param& p, py::object value,
                     const std::string& context = "") {
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

// ---- streams (docs/streams.md) -------------------------------------------------
// The generated code's stream machinery (naarpc/impl/codegen_stream.h) with Python
// at its ends: an input stream's chunks come from a numpy array, an iterable
// of arrays or a file's readinto() through a GeneratorSource; output streams
// go to a CallbackSink (collected) or a PipeSink (an iterator of chunks);
// StreamBindings binds them to the call, typed by element size so that its
// whole-element and alignment checks apply.

// Calls `f` with a value of the unsigned type of `size` bytes.
template <typename F>
decltype(auto) WithElement(size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

// The first Python exception a stream's source raised on the call's thread;
// the call fails and the caller gets that exception.
struct PyErrors {
  std::mutex mu;
  std::shared_ptr<py::error_already_set> first;
  void Set(py::error_already_set e) {
    std::lock_guard<std::mutex> g(mu);
    if (!first) first = std::make_shared<py::error_already_set>(std::move(e));
  }
  // Raises it (GIL held).
  void RaiseIfAny() {
    std::shared_ptr<py::error_already_set> e;
    {
      std::lock_guard<std::mutex> g(mu);
      e = first;
    }
    if (e) throw py::error_already_set(*e);
  }
  bool any() {
    std::lock_guard<std::mutex> g(mu);
    return first != nullptr;
  }
};

// One input stream's Python side: a numpy array (or anything CheckArray
// converts) streamed whole, an iterable whose items are such arrays
// (chunks of any length; the stream's chunks are cut from them), or a file
// read with readinto() straight into the registered chunks. Only the
// current item is held, so a generator streams more than fits in memory.
class StreamInput {
 public:
  StreamInput(std::string full, const idl::Param& p, py::object value,
              std::shared_ptr<PyErrors> errors, std::shared_ptr<std::atomic<bool>> cancelled)
      : full_(std::move(full)), param_(p), errors_(std::move(errors)),
        cancelled_(std::move(cancelled)), elem_(idl::Describe(p.type).size) {
    const std::string what = full_ + ": stream '" + p.name + "'";
    if (py::isinstance<py::array>(value)) {
      iter_ = py::iter(py::make_tuple(CheckArray(full_, p, value)));
    } else if (py::isinstance<py::bytes>(value) || py::isinstance<py::bytearray>(value) ||
               py::isinstance<py::memoryview>(value)) {
      py::object a = py::module_::import("numpy").attr("frombuffer")(value, py::dtype("<u1"));
      iter_ = py::iter(py::make_tuple(CheckArray(full_, p, a)));
    } else if (py::hasattr(value, "readinto")) {
      file_ = value;
    } else if (py::isinstance<py::str>(value)) {
      throw py::type_error(what + " takes a numpy array, an iterable of arrays or a binary file "
                                  "(with readinto()), got str");
    } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      // A list of numbers is one array; a list of arrays is its chunks.
      bool chunks = false;
      for (py::handle item : value) chunks |= py::isinstance<py::array>(item);
      iter_ = chunks ? py::iter(value) : py::iter(py::make_tuple(CheckArray(full_, p, value)));
    } else {
      try {
        iter_ = py::iter(value);
      } catch (py::error_already_set&) {
        throw py::type_error(what + " takes a numpy array, an iterable of arrays or a binary file "
                                    "(with readinto()), got " +
                             py::str(value.get_type().attr("__name__")).cast<std::string>());
      }
    }
  }
  ~StreamInput() {
    py::gil_scoped_acquire gil;  // the Python objects go with the GIL
    pending_ = py::object();
    iter_ = py::object();
    file_ = py::object();
  }

  // Fills `out` (whole elements) with the stream's next bytes; fewer ends
  // the stream. Runs on the call's thread, which holds no GIL.
  Result<size_t> Fill(std::span<std::byte> out) {
    if (cancelled_->load()) {
      return CancelledError(full_ + ": stream '" + param_.name + "': the call was cancelled");
    }
    py::gil_scoped_acquire gil;
    try {
      return file_ ? FillFromFile(out) : FillFromIterator(out);
    } catch (py::error_already_set& e) {
      errors_->Set(std::move(e));
    } catch (py::builtin_exception& e) {  // CheckArray's TypeError/ValueError
      e.set_error();
      errors_->Set(py::error_already_set());
    }
    return CancelledError(full_ + ": stream '" + param_.name + "': its Python source raised");
  }

 private:
  size_t FillFromIterator(std::span<std::byte> out) {
    size_t n = 0;
    while (n < out.size()) {
      if (offset_ == size_) {
        if (done_) break;
        py::object item = py::reinterpret_steal<py::object>(PyIter_Next(iter_.ptr()));
        if (!item) {
          if (PyErr_Occurred()) throw py::error_already_set();
          done_ = true;
          pending_ = py::object();
          break;
        }
        ++items_;
        py::array a = CheckArray(full_, param_, item,
                                 " (item " + std::to_string(items_) + " of the stream)");
        pending_ = a;
        data_ = static_cast<const std::byte*>(a.data());
        size_ = static_cast<size_t>(a.nbytes());
        offset_ = 0;
        continue;
      }
      const size_t k = std::min(out.size() - n, size_ - offset_);
      std::memcpy(out.data() + n, data_ + offset_, k);
      n += k;
      offset_ += k;
    }
    return n;
  }

  size_t FillFromFile(std::span<std::byte> out) {
    size_t n = 0;
    while (n < out.size() && !done_) {
      py::memoryview view = py::memoryview::from_memory(out.data() + n, out.size() - n, false);
      py::object got = file_.attr("readinto")(view);
      view.attr("release")();
      if (got.is_none()) {
        throw py::value_error(full_ + ": stream '" + param_.name +
                              "': the file's readinto() returned None (a non-blocking file "
                              "without data); give a blocking file");
      }
      const auto k = got.cast<size_t>();
      if (k == 0) done_ = true;
      n += k;
    }
    if (n % elem_ != 0) {
      throw py::value_error(full_ + ": stream '" + param_.name + "': the file ends inside an " +
                            TypeName(param_) + " element (" + std::to_string(n % elem_) +
                            " of " + std::to_string(elem_) + " bytes)");
    }
    return n;
  }

  const std::string full_;
  const idl::Param& param_;
  std::shared_ptr<PyErrors> errors_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  const size_t elem_;
  py::object iter_, file_, pending_;
  const std::byte* data_ = nullptr;  // pending_'s bytes
  size_t size_ = 0, offset_ = 0;
  uint64_t items_ = 0;
  bool done_ = false;
};

// One output stream: collected in memory (the plain call form) or read
// chunk by chunk through a PipeSink (the .stream() form).
struct StreamOutput {
  const idl::Param* param = nullptr;
  std::vector<std::byte> collected;  // collected form
  // Iterator form: PipeSink::Next and Stop.
  std::function<Result<std::span<const std::byte>>()> next;
  std::function<void()> stop;
  // Hands the chunk read last back and waits until `until` at most for
  // what next() returns without waiting; false if `until` came first.
  std::function<bool(Deadline)> wait;
  bool ended = false;
};

// The streams of one call: the Python sources, the sinks and their bindings.
// Destroyed with the GIL held (the sources hold Python objects).
struct CallStreams {
  std::shared_ptr<PyErrors> errors = std::make_shared<PyErrors>();
  // Set by StreamingCall::Cancel: the input streams end the call with
  // kCancelled at their next chunk.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::shared_ptr<StreamInput>> inputs;
  std::vector<std::unique_ptr<StreamOutput>> outputs;  // in IDL order
  std::vector<std::shared_ptr<void>> keep;             // the typed sources and sinks
  std::unique_ptr<codegen::StreamBindings> bindings = std::make_unique<codegen::StreamBindings>();

  CallStreams() {
    // A cancelled call ends between its waits (StreamHandler::Check), also
    // when no chunk is moving (an NAA that stalls).
    bindings->SetCheck([cancelled = cancelled]() -> Status {
      return cancelled->load() ? CancelledError("the call was cancelled") : Status::Ok();
    });
  }

  void AddInput(const std::string& full, const idl::Param& p, py::object value) {
    auto in = std::make_shared<StreamInput>(full, p, value, errors, cancelled);
    inputs.push_back(in);
    WithElement(idl::Describe(p.type).size, [&](auto tag) {
      using T = decltype(tag);
      auto source = std::make_shared<codegen::GeneratorSource<T>>(
          [in](std::span<T> chunk) -> Result<size_t> {
            NAARPC_ASSIGN_OR_RETURN(const size_t bytes, in->Fill(std::as_writable_bytes(chunk)));
            return bytes / sizeof(T);
          });
      bindings->Bind<T>(p.stream->index, *source);
      keep.push_back(source);
    });
  }
  // `pipe`: read by the caller while the call runs (waits end at `deadline`);
  // else collected.
  void AddOutput(const idl::Param& p, bool pipe, Deadline deadline) {
    auto out = std::make_unique<StreamOutput>();
    out->param = &p;
    StreamOutput* o = out.get();
    WithElement(idl::Describe(p.type).size, [&](auto tag) {
      using T = decltype(tag);
      if (pipe) {
        auto sink = std::make_shared<codegen::PipeSink<T>>(deadline);
        o->next = [sink]() -> Result<std::span<const std::byte>> {
          NAARPC_ASSIGN_OR_RETURN(std::span<const T> chunk, sink->Next());
          return std::as_bytes(chunk);
        };
        o->stop = [sink] { sink->Stop(); };
        o->wait = [sink](Deadline until) { return sink->WaitForNextUntil(until); };
        bindings->Bind<T>(p.stream->index, *sink);
        keep.push_back(sink);
      } else {
        auto sink = std::make_shared<codegen::CallbackSink<T>>(
            [o](std::span<const T> chunk, bool) -> Status {
              const auto bytes = std::as_bytes(chunk);
              o->collected.insert(o->collected.end(), bytes.begin(), bytes.end());
              return Status::Ok();
            });
        bindings->Bind<T>(p.stream->index, *sink);
        keep.push_back(sink);
      }
    });
    outputs.push_back(std::move(out));
  }
};

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

// The interpreter's main thread (where Python runs signal handlers).
unsigned long& MainThreadId() {
  static unsigned long id = 0;
  return id;
}

// A call whose output streams are read while it runs (`c.S.R.stream(...)`,
// docs/python.md): the call runs on its own thread; each output stream is a
// PipeSink the caller reads chunk by chunk (each chunk copied into a new
// array, the slot handed back to the NAA at the next read), so a stream of
// any length passes with one chunk in Python's hands at a time.
class StreamingCall {
 public:
  using GiveFn = std::function<void(const std::shared_ptr<Session>&)>;

  StreamingCall(const idl::Service& service, const idl::Routine& routine, Deadline deadline,
                std::vector<py::array> arrays, std::map<std::string, ValueView> inputs,
                std::unique_ptr<CallStreams> streams, std::shared_ptr<Session> session,
                GiveFn give)
      : service_(service),
        routine_(routine),
        full_(service.name + "." + routine.name),
        deadline_(deadline),
        arrays_(std::move(arrays)),
        inputs_(std::move(inputs)),
        streams_(std::move(streams)),
        session_(std::move(session)),
        give_(std::move(give)) {
    thread_ = std::thread([this] {
      {
        std::lock_guard<std::mutex> g(session_->mu);
        status_ = session_->call->Invoke(inputs_, *streams_->bindings, deadline_);
      }
      streams_->bindings.reset();  // the pipes' readers learn that the call ended
    });
  }
  StreamingCall(const StreamingCall&) = delete;
  StreamingCall& operator=(const StreamingCall&) = delete;

  ~StreamingCall() {
    Cancel();
    py::gil_scoped_release release;
    Join();
  }

  std::vector<std::string> output_streams() const {
    std::vector<std::string> names;
    for (const auto& o : streams_->outputs) names.push_back(o->param->name);
    return names;
  }

  // The next chunk of output stream `name` (a new array), or None at its end.
  py::object Next(const std::string& name) {
    StreamOutput& o = Output(name);
    if (o.ended) return py::none();
    // On the main thread, Ctrl-C is let through between 50 ms waits: the
    // stream is stopped (the call fails at its next chunk) and the
    // KeyboardInterrupt raised.
    if (PyThread_get_thread_ident() == MainThreadId()) {
      for (;;) {
        bool ready;
        {
          py::gil_scoped_release release;
          ready = o.wait(Deadline::At(Deadline::CoarseNow() + kStreamCheckInterval));
        }
        if (ready) break;
        if (PyErr_CheckSignals() != 0) {
          py::error_already_set interrupted;
          streams_->cancelled->store(true);
          o.stop();
          o.ended = true;
          throw interrupted;
        }
      }
    }
    Result<std::span<const std::byte>> chunk = InternalError("");
    {
      py::gil_scoped_release release;
      chunk = o.next();
    }
    if (!chunk.ok()) {
      o.ended = true;
      RaiseFailure(chunk.status());
    }
    if (chunk->empty()) {
      o.ended = true;
      return py::none();
    }
    const size_t elem = idl::Describe(o.param->type).size;
    py::array a = Array1D(DtypeOf(o.param->type), static_cast<py::ssize_t>(chunk->size() / elem));
    std::memcpy(a.mutable_data(), chunk->data(), chunk->size());
    return a;
  }

  // Waits for the call's end (chunks not read yet are read and dropped)
  // and returns its other outputs; raises the call's error.
  py::dict Finish() {
    if (result_) return *result_;
    Status drained;
    {
      py::gil_scoped_release release;
      for (auto& o : streams_->outputs) {
        while (!o->ended) {
          Result<std::span<const std::byte>> chunk = o->next();
          if (!chunk.ok()) {
            drained = chunk.status();
            o->ended = true;
          } else if (chunk->empty()) {
            o->ended = true;
          }
        }
      }
      Join();
    }
    if (!status_.ok() || !drained.ok()) RaiseFailure(drained);
    py::dict result;
    for (const idl::Param& p : routine_.params) {
      if (!p.is_output() || p.is_stream()) continue;
      auto view = session_->call->Output(p);
      if (!view.ok()) Throw(view.status(), &service_);
      py::array out = Array1D(DtypeOf(p.type), static_cast<py::ssize_t>(view->count));
      if (!view->data.empty()) std::memcpy(out.mutable_data(), view->data.data(), view->data.size());
      result[py::str(p.name)] = out;
    }
    if (session_) {
      give_(session_);
      session_.reset();
    }
    result_ = result;
    return result;
  }

  // Stops the call: it fails at its next output chunk or input chunk (its
  // connection is closed, not reused). No effect once the call has ended.
  void Cancel() {
    if (done_.load()) return;
    streams_->cancelled->store(true);
    for (auto& o : streams_->outputs) o->stop();
  }

  bool done() const { return done_.load(); }

 private:
  StreamOutput& Output(const std::string& name) {
    for (auto& o : streams_->outputs) {
      if (o->param->name == name) return *o;
    }
    throw py::key_error(full_ + " has no output stream '" + name + "'");
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
    done_.store(true);
  }

  // The call failed (or a pipe did): the Python source's exception, else
  // the call's status, else the pipe's. GIL held.
  [[noreturn]] void RaiseFailure(const Status& pipe) {
    {
      py::gil_scoped_release release;
      streams_->cancelled->store(true);
      for (auto& o : streams_->outputs) {
        if (!o->ended) o->stop();
      }
      Join();
    }
    session_.reset();  // dropped: a failed stream leaves the connection undefined
    streams_->errors->RaiseIfAny();
    if (!status_.ok()) Throw(status_, &service_);
    Throw(pipe.ok() ? InternalError(full_ + ": the stream failed") : pipe, &service_);
  }

  const idl::Service& service_;
  const idl::Routine& routine_;
  const std::string full_;
  const Deadline deadline_;
  std::vector<py::array> arrays_;  // the non-stream inputs' memory
  std::map<std::string, ValueView> inputs_;
  std::unique_ptr<CallStreams> streams_;
  std::shared_ptr<Session> session_;
  GiveFn give_;
  Status status_;  // the call's, once done
  std::atomic<bool> done_{false};
  std::optional<py::dict> result_;
  std::thread thread_;
};


// Runs a call (no streams) on this thread, which holds no GIL, waiting for
// it on the connection in slices of at most 50 ms (ClientSession::WaitCall:
// one blocking receive per answer, as a C++ stub's call): between them it
// takes the GIL and runs Python's signal handlers (PyErr_CheckSignals). If
// one raises (Ctrl-C: KeyboardInterrupt) the call is abandoned (its
// connection closed, so the NAA's late answer cannot land) and the
// exception is kept in `*raised`.
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

class Client {
 public:
  // `targets`: each "HOST[:PORT]"; several: a channel over them; none:
  // NAA_SPEC (every entry of a routine's function code).
  Client(const Idl& idl, std::vector<std::string> targets, const std::string& transport,
         const std::string& device, const std::string& dialect)
      : idl_holder_(idl), shared_(std::make_shared<Shared>()), targets_(std::move(targets)) {
    shared_->idl = idl.file;
    auto d = cli::ParseDialect(dialect, "dialect");
    if (!d.ok()) throw py::value_error(d.status().message());
    shared_->options.dialect = *d;
    if (transport != "emulated" && transport != "verbs" && transport != "auto") {
      throw py::value_error("transport '" + transport + "': emulated, verbs or auto");
    }
    // A bad target is refused now, not at the first call.
    for (const std::string& t : targets_) {
      auto parsed = cli::ParseTarget(t, "target");
      if (!parsed.ok()) throw py::value_error(parsed.status().message());
    }
    auto side = cli::LocalSideFromEnvironment(transport, device);
    if (!side.ok()) throw py::value_error(side.status().message());
    auto made = NewTransport(side->transport, side->device);
    if (!made.ok()) Throw(made.status());
    shared_->transport = std::move(*made);
    shared_->transport_label = cli::TransportLabel(transport, shared_->transport->name());
  }

  std::string transport_name() const { return shared_->transport_label; }

  // Runs routine `name`: `kwargs` holds numpy arrays (or values numpy
  // converts) by parameter name: every input, and optionally an array per
  // output that its result is written to. Returns {output name: array}.
  py::dict Call(const std::string& name, py::dict kwargs, std::optional<double> deadline_s) {
    const idl::Routine* routine = nullptr;
    const idl::Service* service = idl().service_of(name, &routine);
    const std::string full = service->name + "." + routine->name;
    const Deadline deadline = DeadlineFor(*routine, deadline_s, full);

    // Arguments: checked before anything is sent.
    struct Arg {
      const idl::Param* param;
      py::array array;  // C-contiguous, IDL dtype
      bool given_output = false;
    };
    std::vector<Arg> args;
    CallStreams streams;
    std::set<std::string> given;
    for (auto [key, value] : kwargs) {
      const std::string pname = py::cast<std::string>(key);
      const idl::Param* p = &ParamOf(*routine, full, pname);
      given.insert(pname);
      if (p->is_stream() && p->is_input()) {
        streams.AddInput(full, *p, py::reinterpret_borrow<py::object>(value));
        continue;
      }
      args.push_back({p, CheckArray(full, *p, py::reinterpret_borrow<py::object>(value)),
                      !p->is_input()});
    }
    for (const idl::Param& p : routine->params) {
      if (p.is_stream() && p.is_output()) streams.AddOutput(p, false, deadline);
      if (!p.is_input()) continue;
      if (!given.count(p.name)) {
        throw py::type_error(full + "() missing input '" + p.name + "' (" +
                             std::string(idl::DirectionName(p.direction)) + ", " + Shape(p) + ")");
      }
    }

    // The session: one that an output array (else an input array) views, or
    // an idle one of the pool, or a new one.
    std::shared_ptr<Session> session;
    for (int pass = 0; pass < 2 && session == nullptr; ++pass) {
      for (const Arg& a : args) {
        if ((pass == 0) != a.param->is_output()) continue;
        if (auto s = PinnedSessionOf(a.array, *a.param, *routine)) {
          session = s;
          break;
        }
      }
    }
    std::map<std::string, ValueView> inputs;
    for (const Arg& a : args) {
      if (!a.param->is_input()) continue;
      inputs[a.param->name] =
          ValueView{static_cast<uint64_t>(a.array.size()),
                    std::span<const std::byte>(static_cast<const std::byte*>(a.array.data()),
                                               static_cast<size_t>(a.array.nbytes()))};
    }

    const bool has_streams = routine->has_streams();
    // Ctrl-C reaches Python in the main thread only: there the call waits in
    // slices and checks for it.
    const bool main_thread = PyThread_get_thread_ident() == MainThreadId();
    std::shared_ptr<py::error_already_set> interrupt;
    std::unique_lock<std::mutex> lock;
    Status status;
    {
      py::gil_scoped_release release;
      // Not an empty() array's session: the NAA of each attempt is the
      // channel's pick; an attempt that failed may go to another NAA.
      std::shared_ptr<Channel> channel;
      std::optional<Channel::Attempts> attempts;
      if (session == nullptr) {
        auto c = ChannelFor(*routine);
        if (c.ok()) {
          channel = *c;
          attempts.emplace(*channel, full, routine->idempotent, std::nullopt, deadline);
        } else {
          status = c.status();
        }
      }
      for (bool again = attempts.has_value(); again;) {
        again = false;
        auto naa = attempts->Next();
        if (!naa.ok()) {
          status = naa.status();
          break;
        }
        auto taken = Take(*service, *routine, *channel, *naa, attempts->attempt_deadline());
        if (!taken.ok()) {
          again = attempts->End(taken.status(), &status);
          continue;
        }
        session = *taken;
        status = RunOn(*session, lock, inputs, streams, has_streams, main_thread,
                       attempts->attempt_deadline(), full, &interrupt);
        Status final;
        const bool retry = attempts->End(status, &final);
        again = retry && !has_streams;  // a stream's data is spent: not sent again
        if (again) {
          lock.unlock();
          Give(session);
          session = nullptr;
        } else if (!status.ok() && !retry) {
          status = final;
        }
      }
      if (session != nullptr && !attempts) {
        status = RunOn(*session, lock, inputs, streams, has_streams, main_thread, deadline, full,
                       &interrupt);
      }
      streams.bindings.reset();  // the call has ended: its sources and sinks learn it
    }
    if (!status.ok()) {
      if (session != nullptr) {
        lock.unlock();
        // A stream that failed mid-call leaves the connection's streams
        // undefined: that session is dropped (closed), not reused.
        if (!has_streams) Give(session);
      }
      streams.errors->RaiseIfAny();  // the Python source's own exception
      if (interrupt) throw py::error_already_set(*interrupt);  // KeyboardInterrupt
      Throw(status, service);
    }

    // Outputs, while the session is still ours.
    py::dict result;
    for (const idl::Param& p : routine->params) {
      if (!p.is_output()) continue;
      if (p.is_stream()) {
        for (const auto& o : streams.outputs) {
          if (o->param != &p) continue;
          const size_t elem = idl::Describe(p.type).size;
          py::array out =
              Array1D(DtypeOf(p.type), static_cast<py::ssize_t>(o->collected.size() / elem));
          if (!o->collected.empty()) {
            std::memcpy(out.mutable_data(), o->collected.data(), o->collected.size());
          }
          result[py::str(p.name)] = out;
        }
        continue;
      }
      auto view = session->call->Output(p);
      if (!view.ok()) {
        lock.unlock();
        Give(session);
        Throw(view.status(), service);
      }
      // Written into the caller's array: an output's (out=...), or an inout's
      // if it is the registered buffer (from empty(): in place, no copy). An
      // inout given a plain array gets a new one; its input is not touched.
      const Arg* given = nullptr;
      for (const Arg& a : args) {
        if (a.param == &p &&
            (!p.is_input() || a.array.data() == static_cast<const void*>(view->data.data()))) {
          given = &a;
        }
      }
      const auto count = static_cast<py::ssize_t>(view->count);
      if (given != nullptr) {
        py::array target = given->array;
        const bool in_place = target.data() == static_cast<const void*>(view->data.data());
        if (count > target.size()) {
          lock.unlock();
          Give(session);
          throw py::value_error(full + ": output '" + p.name + "' has " +
                                std::to_string(count) + " elements, its array only " +
                                std::to_string(target.size()));
        }
        if (!in_place && !view->data.empty()) {
          std::memcpy(target.mutable_data(), view->data.data(), view->data.size());
        }
        // The caller's own array (a view of its first elements if the output
        // is variable-length and shorter).
        result[py::str(p.name)] =
            count == target.size() ? py::object(target)
                                   : target[py::slice(0, count, 1)].cast<py::object>();
        continue;
      }
      py::array out = Array1D(DtypeOf(p.type), count);
      if (!view->data.empty()) std::memcpy(out.mutable_data(), view->data.data(), view->data.size());
      result[py::str(p.name)] = out;
    }
    lock.unlock();
    Give(session);
    return result;
  }

  // Runs one call on `session` (locked into `lock`), waiting as Call()
  // describes (Ctrl-C in the main thread, streams). REQUIRES: no GIL.
  static Status RunOn(Session& session, std::unique_lock<std::mutex>& lock,
                      const std::map<std::string, ValueView>& inputs, CallStreams& streams,
                      bool has_streams, bool main_thread, Deadline deadline,
                      const std::string& full, std::shared_ptr<py::error_already_set>* interrupt) {
    lock = std::unique_lock<std::mutex>(session.mu);
    if (session.broken()) {
      return UnavailableError(full +
                              ": the connection of this c.empty() array's session has "
                              "failed; take a new array with empty()");
    }
    if (has_streams) {
      if (main_thread) {
        // Ctrl-C ends the call between the stream's waits (its session is
        // dropped after, as after any failed stream).
        std::shared_ptr<PyErrors> errors = streams.errors;
        const std::string what = full;
        streams.bindings->SetCheck([errors, what]() -> Status {
          py::gil_scoped_acquire gil;  // (the call's own cancel flag is never set here)
          if (PyErr_CheckSignals() == 0) return Status::Ok();
          errors->Set(py::error_already_set());
          return CancelledError(what + ": interrupted");
        });
      }
      return session.call->Invoke(inputs, *streams.bindings, deadline);
    }
    if (main_thread) return RunInterruptible(*session.call, inputs, deadline, interrupt);
    return session.call->Invoke(inputs, nullptr, deadline);
  }

  // Starts routine `name` on its own thread and returns at once: its output
  // streams are read while it runs (StreamingCall). Inputs as for Call();
  // outputs take no arrays.
  std::unique_ptr<StreamingCall> Start(const std::string& name, py::dict kwargs,
                                       std::optional<double> deadline_s) {
    const idl::Routine* routine = nullptr;
    const idl::Service* service = idl().service_of(name, &routine);
    const std::string full = service->name + "." + routine->name;
    const Deadline deadline = DeadlineFor(*routine, deadline_s, full);
    auto streams = std::make_unique<CallStreams>();
    std::vector<py::array> arrays;
    std::map<std::string, ValueView> inputs;
    for (auto [key, value] : kwargs) {
      const std::string pname = py::cast<std::string>(key);
      const idl::Param* p = &ParamOf(*routine, full, pname);
      if (!p->is_input()) {
        throw py::type_error(full + ".stream(): parameter '" + pname + "' is an output (" +
                             std::string(idl::DirectionName(p->direction)) +
                             "); this form returns the outputs, it takes no array for them");
      }
      if (p->is_stream()) {
        streams->AddInput(full, *p, py::reinterpret_borrow<py::object>(value));
        continue;
      }
      py::array a = CheckArray(full, *p, py::reinterpret_borrow<py::object>(value));
      inputs[pname] = ValueView{static_cast<uint64_t>(a.size()),
                                std::span<const std::byte>(static_cast<const std::byte*>(a.data()),
                                                           static_cast<size_t>(a.nbytes()))};
      arrays.push_back(a);
    }
    for (const idl::Param& p : routine->params) {
      if (p.is_stream() && p.is_output()) streams->AddOutput(p, true, deadline);
      if (!p.is_input() || kwargs.contains(py::str(p.name))) continue;
      throw py::type_error(full + "() missing input '" + p.name + "' (" +
                           std::string(idl::DirectionName(p.direction)) + ", " + Shape(p) + ")");
    }
    Result<std::shared_ptr<Session>> taken = InvalidArgumentError("");
    {
      py::gil_scoped_release release;
      taken = Pick(*service, *routine, deadline, /*fresh=*/false);
    }
    if (!taken.ok()) Throw(taken.status(), service);
    return std::make_unique<StreamingCall>(
        *service, *routine, deadline, std::move(arrays), std::move(inputs), std::move(streams),
        *taken, [this](const std::shared_ptr<Session>& s) { Give(s); });
  }

  // A registered array for parameter `param_name` of routine `name`: the
  // session buffer a call fills (outputs) or sends from (inputs) without a
  // copy. Its session is opened now (connect + MRSP within `deadline_s`).
  py::array Empty(const std::string& name, const std::string& param_name,
                  std::optional<double> deadline_s) {
    const idl::Routine* routine = nullptr;
    const idl::Service* service = idl().service_of(name, &routine);
    const std::string full = service->name + "." + routine->name;
    const idl::Param* p = routine->FindParam(param_name);
    if (p == nullptr) {
      throw py::key_error(full + " has no parameter '" + param_name + "'");
    }
    if (p->is_stream()) {
      throw py::value_error(full + ": '" + param_name +
                            "' is a stream; its data has no buffer to take an array of");
    }
    const Deadline deadline = DeadlineFor(*routine, deadline_s, full);
    // A pinned session of the routine whose slot for this parameter is not
    // handed out yet, else a new one.
    std::shared_ptr<Session> session;
    {
      std::lock_guard<std::mutex> g(pool_mu_);
      for (auto& [s, handed] : pinned_[routine]) {
        if (!handed.count(p->index) && !s->broken()) {
          session = s;
          handed.insert(p->index);
          break;
        }
      }
    }
    if (session == nullptr) {
      Result<std::shared_ptr<Session>> opened = InvalidArgumentError("");
      {
        py::gil_scoped_release release;
        opened = Pick(*service, *routine, deadline, /*fresh=*/true);
      }
      if (!opened.ok()) Throw(opened.status(), service);
      session = *opened;
      session->pinned = true;
      std::lock_guard<std::mutex> g(pool_mu_);
      pinned_[routine].push_back({session, {p->index}});
    }
    // The array keeps its session (and so the memory) alive.
    auto* keep = new std::shared_ptr<Session>(session);
    py::capsule base(keep, [](void* v) { delete static_cast<std::shared_ptr<Session>*>(v); });
    return Array1D(DtypeOf(p->type), static_cast<py::ssize_t>(p->count), session->slot(*p), base);
  }

  void Close() {
    std::vector<std::shared_ptr<Session>> all;
    {
      std::lock_guard<std::mutex> g(pool_mu_);
      for (auto& [r, list] : idle_) all.insert(all.end(), list.begin(), list.end());
      for (auto& [r, list] : pinned_) {
        for (auto& [s, handed] : list) all.push_back(s);
      }
      idle_.clear();
      pinned_.clear();
      closed_ = true;
    }
    py::gil_scoped_release release;
    for (auto& s : all) {
      std::lock_guard<std::mutex> g(s->mu);
      if (s->call) s->call->session().Close().IgnoreError();
    }
  }

  // Per NAA of the channels of the routines called so far (their sum over
  // routines that have different channels): Channel::Counters().
  py::list NaaCountersList() {
    std::map<std::string, naarpc::NaaCounters> by_naa;
    std::vector<std::string> order;
    {
      std::lock_guard<std::mutex> g(pool_mu_);
      for (auto& [key, channel] : channel_by_naas_) {
        for (const naarpc::NaaCounters& c : channel->Counters()) {
          const std::string name = c.naa.ToString();
          auto [it, fresh] = by_naa.try_emplace(name, c);
          if (fresh) {
            order.push_back(name);
            continue;
          }
          it->second.calls += c.calls;
          it->second.errors += c.errors;
          it->second.failures += c.failures;
          it->second.in_flight += c.in_flight;
          it->second.ejections += c.ejections;
          it->second.ejected = it->second.ejected || c.ejected;
        }
      }
    }
    py::list out;
    for (const std::string& name : order) {
      const naarpc::NaaCounters& c = by_naa[name];
      py::dict d;
      d["naa"] = name;
      d["calls"] = c.calls;
      d["errors"] = c.errors;
      d["failures"] = c.failures;
      d["in_flight"] = c.in_flight;
      d["ejections"] = c.ejections;
      d["ejected"] = c.ejected;
      out.append(d);
    }
    return out;
  }

  // Sessions open now (idle in the pool and pinned by arrays), for tests.
  size_t sessions() {
    std::lock_guard<std::mutex> g(pool_mu_);
    size_t n = 0;
    for (auto& [r, list] : idle_) n += list.size();
    for (auto& [r, list] : pinned_) n += list.size();
    return n;
  }

 private:
  const Idl& idl() const { return idl_holder_; }

  Deadline DeadlineFor(const idl::Routine& r, std::optional<double> deadline_s,
                       const std::string& full) {
    if (!deadline_s) return Deadline::After(std::chrono::milliseconds(r.deadline_ms));
    if (!(*deadline_s > 0) || *deadline_s > 1e7) {
      throw py::value_error(full + ": deadline must be a number of seconds > 0, got " +
                            std::to_string(*deadline_s));
    }
    return Deadline::After(std::chrono::microseconds(static_cast<int64_t>(*deadline_s * 1e6)));
  }

  // The pinned session whose buffer for `p` the array starts at.
  std::shared_ptr<Session> PinnedSessionOf(const py::array& a, const idl::Param& p,
                                           const idl::Routine& r) {
    if (p.is_stream()) return nullptr;
    std::lock_guard<std::mutex> g(pool_mu_);
    auto it = pinned_.find(&r);
    if (it == pinned_.end()) return nullptr;
    for (auto& [s, handed] : it->second) {
      if (s->call && s->slot(p) == a.data()) return s;
    }
    return nullptr;
  }

  // The channel over the routine's NAAs (the targets, or its NAA_SPEC
  // entries); routines with the same NAAs share one.
  Result<std::shared_ptr<Channel>> ChannelFor(const idl::Routine& routine) {
    std::lock_guard<std::mutex> g(pool_mu_);
    if (auto it = channel_of_.find(&routine); it != channel_of_.end()) return it->second;
    NAARPC_ASSIGN_OR_RETURN(std::vector<cli::Target> targets,
                            cli::ResolveTargets(targets_, routine, "target"));
    std::vector<NaaAddress> naas;
    std::string key;
    for (const cli::Target& t : targets) {
      naas.push_back({t.host, t.port});
      key += HostPort(t.host, t.port) + ",";
    }
    std::shared_ptr<Channel>& c = channel_by_naas_[key];
    if (c == nullptr) {
      NAARPC_ASSIGN_OR_RETURN(c, Channel::Create(std::move(naas)));
    }
    return channel_of_[&routine] = c;
  }

  // A session on the NAA the routine's channel picks (an attempt that
  // ends once it is open: the call on it is not retried). `fresh`: a new
  // one, not an idle one.
  Result<std::shared_ptr<Session>> Pick(const idl::Service& service, const idl::Routine& routine,
                                        Deadline deadline, bool fresh) {
    NAARPC_ASSIGN_OR_RETURN(std::shared_ptr<Channel> channel, ChannelFor(routine));
    Channel::Attempts attempts(*channel, service.name + "." + routine.name, routine.idempotent,
                               std::nullopt, deadline);
    for (;;) {
      NAARPC_ASSIGN_OR_RETURN(size_t naa, attempts.Next());
      auto s = fresh ? Open(service, routine, *channel, naa, deadline)
                     : Take(service, routine, *channel, naa, deadline);
      Status final;
      if (!attempts.End(s.ok() ? Status::Ok() : s.status(), &final)) {
        if (!final.ok()) return final;
        return s;
      }
    }
  }

  Result<std::shared_ptr<Session>> Open(const idl::Service& service, const idl::Routine& routine,
                                        const Channel& channel, size_t naa, Deadline deadline) {
    {
      std::lock_guard<std::mutex> g(pool_mu_);
      if (closed_) return FailedPreconditionError("the client is closed");
    }
    const NaaAddress a = channel.naa(naa);
    const cli::Target target{a.host, a.port};
    ClientOptions options = shared_->options;
    options.retry_refused_connect =
        options.retry_refused_connect && channel.retry_refused_connect();
    auto call = DynamicCall::Open(*shared_->transport, target.host, target.port, service,
                                  routine, options, deadline);
    if (!call.ok()) {
      Status s = call.status();
      if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kNotFound) {
        return Status(s.code(), s.message() + " (is an NAA listening on " +
                                    HostPort(target.host, target.port) + " over the " +
                                    shared_->transport_label + " transport?)");
      }
      return s;
    }
    auto s = std::make_shared<Session>();
    s->shared = shared_;
    s->service = &service;
    s->routine = &routine;
    s->call = std::move(*call);
    s->naa = naa;
    return s;
  }

  Result<std::shared_ptr<Session>> Take(const idl::Service& service, const idl::Routine& routine,
                                        const Channel& channel, size_t naa, Deadline deadline) {
    {
      std::lock_guard<std::mutex> g(pool_mu_);
      auto& list = idle_[{&routine, naa}];
      while (!list.empty()) {
        auto s = list.back();
        list.pop_back();
        if (!s->broken() && !s->call->session().PeerGone()) return s;
      }
    }
    return Open(service, routine, channel, naa, deadline);
  }

  void Give(const std::shared_ptr<Session>& s) {
    if (s->pinned) return;
    std::lock_guard<std::mutex> g(pool_mu_);
    if (closed_ || s->broken()) return;  // dropped: the next call opens a new one
    idle_[{s->routine, s->naa}].push_back(s);
  }

  Idl idl_holder_;
  std::shared_ptr<Shared> shared_;
  const std::vector<std::string> targets_;
  std::mutex pool_mu_;
  bool closed_ = false;
  std::map<const idl::Routine*, std::shared_ptr<Channel>> channel_of_;
  std::map<std::string, std::shared_ptr<Channel>> channel_by_naas_;  // "host:port," each
  std::map<std::pair<const idl::Routine*, size_t>, std::vector<std::shared_ptr<Session>>> idle_;
  std::map<const idl::Routine*,
           std::vector<std::pair<std::shared_ptr<Session>, std::set<size_t>>>>
      pinned_;
};

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
         std::optional<std::string> service_name)
      : idl_(idl.file), dialect_(dialect) {
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
  int port_ = 0;
  std::vector<std::shared_ptr<py::object>> holders_;
  std::unique_ptr<cli::DynamicNaa> naa_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<NaaServer> server_;  // first to go
};

}  // namespace
}  // namespace naarpc::python

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
                    const std::string&, const std::string&>(),
           py::arg("idl"), py::arg("target"), py::arg("transport"), py::arg("device"),
           py::arg("dialect"))
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
      .def(
          "full",
          [](py::object self, const std::string& name) {
            return self.cast<KernelCall&>().Full(self, name);
          },
          py::arg("param"))
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
             py::object chunk = self.cast<KernelStream&>().Next(self);
             if (chunk.is_none()) throw py::stop_iteration();
             return chunk;
           })
      .def("write", &KernelStream::Write, py::arg("array"))
      .def("close", &KernelStream::Close)
      .def(
          "slot", [](py::object self) { return self.cast<KernelStream&>().Slot(self); })
      .def("commit", &KernelStream::Commit, py::arg("n"))
      .def("__repr__", [](const KernelStream& k) {
        return "<naarpc " + std::string(k.param->is_input() ? "input" : "output") + " stream '" +
               k.param->name + "' of " + k.full + ">";
      });

  py::class_<Server>(m, "Server")
      .def(py::init<const Idl&, py::dict, const std::string&, int, const std::string&,
                    const std::string&, const std::string&, std::optional<std::string>>(),
           py::arg("idl"), py::arg("kernels"), py::arg("address"), py::arg("port"),
           py::arg("transport"), py::arg("device"), py::arg("dialect"), py::arg("service"))
      .def("stop", &Server::Stop)
      .def_property_readonly("port", &Server::port)
      .def_property_readonly("address", &Server::address)
      .def_property_readonly("running", &Server::running)
      .def_property_readonly("calls", &Server::calls)
      .def_property_readonly("transport", &Server::transport_name)
      .def("describe", &Server::describe);
}
