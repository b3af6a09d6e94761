// Streams from Python (docs/streams.md): numpy arrays, iterables and files
// as input streams, output streams collected or read while the call runs.
#ifndef NAARPC_PYTHON_STREAMS_H_
#define NAARPC_PYTHON_STREAMS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "idl/ir.h"
#include "naarpc/impl/codegen_stream.h"
#include "python/errors.h"
#include "python/session.h"
#include "python/values.h"
#include "tools/naarpc/dynamic_call.h"

namespace py = pybind11;

namespace naarpc::python {

using cli::ValueView;

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
    } else if (py::isinstance(value, py::module_::import("io").attr("TextIOBase"))) {
      throw py::type_error(what + " got a text-mode file (" + TypeNameOf(value) +
                           "); open the file in binary mode ('rb')");
    } else if (py::hasattr(value, "readinto")) {
      file_ = value;
    } else if (py::isinstance<py::str>(value)) {
      throw py::type_error(what + " takes a numpy array, an iterable of arrays or a binary file "
                                  "(with readinto()), got str");
    } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      // A list of numbers is one array; a list of arrays (or bytes) is its chunks.
      bool chunks = false;
      for (py::handle item : value) chunks |= py::isinstance<py::array>(item) || IsBytesLike(item);
      iter_ = chunks ? py::iter(value) : py::iter(py::make_tuple(CheckArray(full_, p, value)));
    } else {
      try {
        iter_ = py::iter(value);
      } catch (py::error_already_set&) {
        throw py::type_error(what + " takes a numpy array, an iterable of arrays or a binary file "
                                    "(with readinto()), got " +
                             TypeNameOf(value));
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
        const std::string context = " (item " + std::to_string(items_) + " of the stream)";
        if (py::isinstance<py::str>(item)) {
          throw py::type_error(full_ + ": parameter '" + param_.name + "'" + context +
                               " is a str; a stream takes arrays, bytes or a binary file (a "
                               "text-mode file? open it in binary mode ('rb'))");
        }
        py::array a = CheckArray(full_, param_, item, context);
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
      const std::string what = full_ + ": stream '" + param_.name + "': the file's readinto()";
      if (got.is_none()) {
        throw py::value_error(what + " returned None (a non-blocking file without data); give a "
                                     "blocking file");
      }
      const size_t k = CountArg(got, out.size() - n,
                                what + " must return the number of bytes it read, 0.." +
                                    std::to_string(out.size() - n));
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

// An output stream's PipeSink, whose failure after StreamingCall::Cancel
// is the call's cancellation (CANCELLED), not the stopped pipe's.
template <typename T>
class CancellableSink final : public codegen::StreamSink<T> {
 public:
  CancellableSink(std::shared_ptr<codegen::PipeSink<T>> pipe,
                  std::shared_ptr<std::atomic<bool>> cancelled)
      : pipe_(std::move(pipe)), cancelled_(std::move(cancelled)) {}
  Status Write(std::span<const T> chunk, bool end) override {
    Status s = pipe_->Write(chunk, end);
    if (!s.ok() && cancelled_->load()) return CancelledError("the call was cancelled");
    return s;
  }
  void OnCallEnd() override { pipe_->OnCallEnd(); }

 private:
  std::shared_ptr<codegen::PipeSink<T>> pipe_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
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
        auto cancellable = std::make_shared<CancellableSink<T>>(sink, cancelled);
        bindings->Bind<T>(p.stream->index, *cancellable);
        keep.push_back(sink);
        keep.push_back(cancellable);
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
    if (failed_) RaiseFailure(failure_);  // again, each time
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
          // (Not ended: reading on raises the call's error, CANCELLED.)
          py::error_already_set interrupted;
          streams_->cancelled->store(true);
          o.stop();
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
    if (failed_) RaiseFailure(failure_);
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
    if (!failed_) {
      failed_ = true;
      failure_ = pipe;
    }
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
  bool failed_ = false;  // RaiseFailure ran: every later Next() and result() raise too
  Status failure_;       // its pipe status
  std::thread thread_;
};

}  // namespace naarpc::python

#endif  // NAARPC_PYTHON_STREAMS_H_
