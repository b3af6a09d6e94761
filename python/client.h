// naarpc.Client's C++ half: a pool of sessions per routine over a channel of
// NAAs, calls with numpy arrays, zero-copy arrays over registered buffers.
#ifndef NAARPC_PYTHON_CLIENT_H_
#define NAARPC_PYTHON_CLIENT_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "naarpc/channel.h"
#include "naarpc/transport_factory.h"
#include "python/errors.h"
#include "python/session.h"
#include "python/streams.h"
#include "python/values.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/target.h"

namespace py = pybind11;

namespace naarpc::python {

using cli::DynamicCall;
using cli::ValueView;

class Client {
 public:
  // `targets`: each "HOST[:PORT]"; several: a channel over them; none:
  // NAA_SPEC (every entry of a routine's function code). `memory_windows`:
  // ClientOptions::memory_windows (nullopt: each routine's IDL declaration).
  Client(const Idl& idl, std::vector<std::string> targets, const std::string& transport,
         const std::string& device, const std::string& dialect,
         std::optional<bool> memory_windows)
      : idl_holder_(idl), shared_(std::make_shared<Shared>()), targets_(std::move(targets)) {
    shared_->idl = idl.file;
    auto d = cli::ParseDialect(dialect, "dialect");
    if (!d.ok()) throw py::value_error(d.status().message());
    shared_->options.dialect = *d;
    shared_->options.memory_windows = memory_windows;
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

  // Whether the calls of routine `name` bind per-call memory windows: the
  // client's memory_windows, else the IDL's declaration. A session that asks
  // for them opens only if the device and the NAA provide them (MRSP
  // capability 0x01), so a call that succeeded ran with them.
  bool MemoryWindows(const std::string& name) const {
    const idl::Routine* routine = nullptr;
    idl_holder_.service_of(name, &routine);
    return shared_->options.memory_windows.value_or(routine->memory_windows);
  }

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
      bool from_empty = false;  // an empty() array over this parameter's buffer
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

    // The session: one that an output array (else an input array) views,
    // if the call is given every empty() array of it (else the call would
    // write into one it was not given: its arrays are copied instead, as
    // plain ones); or an idle one of the pool, or a new one.
    std::shared_ptr<Session> session;
    for (int pass = 0; pass < 2; ++pass) {
      for (Arg& a : args) {
        if ((pass == 0) != a.param->is_output()) continue;
        auto s = PinnedSessionOf(a.array, *a.param, *routine);
        if (s == nullptr) continue;
        a.from_empty = true;
        if (session == nullptr && GivenEveryArray(*s, args)) session = s;
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
        if (a.param == &p && (!p.is_input() || a.from_empty)) given = &a;
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
    // A pinned session of the routine without a live array for this
    // parameter, else a new one.
    std::shared_ptr<Session> session;
    {
      std::lock_guard<std::mutex> g(pool_mu_);
      for (auto& s : pinned_[routine]) {
        if (s->handed[p->index].load() == 0 && !s->broken()) {
          session = s;
          s->handed[p->index].fetch_add(1);
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
      session->handed[p->index].fetch_add(1);
      std::lock_guard<std::mutex> g(pool_mu_);
      pinned_[routine].push_back(session);
    }
    // The array keeps its session (and so the memory) alive; when it goes,
    // the slot is free for calls and empty() again.
    struct Keep {
      std::shared_ptr<Session> session;
      size_t index;
      ~Keep() { session->handed[index].fetch_sub(1); }
    };
    auto* keep = new Keep{session, p->index};
    py::capsule base(keep, [](void* v) { delete static_cast<Keep*>(v); });
    return Array1D(DtypeOf(p->type), static_cast<py::ssize_t>(p->count), session->slot(*p), base);
  }

  void Close() {
    std::vector<std::shared_ptr<Session>> all;
    {
      std::lock_guard<std::mutex> g(pool_mu_);
      for (auto& [r, list] : idle_) all.insert(all.end(), list.begin(), list.end());
      for (auto& [r, list] : pinned_) all.insert(all.end(), list.begin(), list.end());
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
    for (auto& s : it->second) {
      if (s->call && s->slot(p) == a.data()) return s;
    }
    return nullptr;
  }

  // Whether `args` hold, for every parameter with a live empty() array of
  // `s`, that very array (its buffer).
  template <typename Args>
  static bool GivenEveryArray(const Session& s, const Args& args) {
    for (const idl::Param& p : s.routine->params) {
      if (p.is_stream() || s.handed[p.index].load() == 0) continue;
      bool given = false;
      for (const auto& a : args) {
        given = given || (a.param == &p && a.array.data() == static_cast<const void*>(s.slot(p)));
      }
      if (!given) return false;
    }
    return true;
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
    s->handed = std::vector<std::atomic<uint32_t>>(routine.params.size());
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
  std::map<const idl::Routine*, std::vector<std::shared_ptr<Session>>> pinned_;
};

}  // namespace naarpc::python

#endif  // NAARPC_PYTHON_CLIENT_H_
