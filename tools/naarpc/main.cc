// naarpc: describe, call, serve and benchmark any NAA from its IDL file at
// run time (no code generation). `naarpc --help`, `naarpc CMD --help`.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "idl/load.h"
#include "naarpc/discovery.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "tools/naarpc/bench.h"
#include "tools/naarpc/stats.h"
#include "tools/naarpc/describe.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/dynamic_naa.h"
#include "tools/naarpc/local_ip.h"
#include "tools/naarpc/progress.h"
#include "tools/naarpc/channel_call.h"
#include "tools/naarpc/target.h"
#include "tools/naarpc/values.h"

namespace naarpc::cli {
namespace {

// Exit statuses (also in --help).
enum Exit : int {
  kExitOk = 0,
  kExitFailure = 1,      // anything else
  kExitUsage = 2,        // bad command line or input values
  kExitIdl = 3,          // the IDL file is missing or invalid
  kExitUnreachable = 4,  // connect, MRSP or transport failure
  kExitDeadline = 5,     // the deadline passed
  kExitNaaStatus = 6,    // the NAA answered with a non-zero status
};

constexpr const char* kExitHelp =
    "Exit status: 0 success, 1 other failure, 2 bad command line or input, 3 IDL file "
    "missing or invalid, 4 NAA unreachable (connect, MRSP, transport), 5 deadline "
    "exceeded, 6 the NAA returned a non-zero status.";

std::string HumanBytes(uint64_t n) {
  char buf[32];
  if (n >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", n / 1048576.0);
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "naarpc: %s\n", message.c_str());
  return code;
}

int ExitFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNaaError:
      return kExitNaaStatus;
    case StatusCode::kDeadlineExceeded:
      return kExitDeadline;
    case StatusCode::kUnavailable:
    case StatusCode::kDisconnected:
    case StatusCode::kTransportError:
    case StatusCode::kMrspError:
    case StatusCode::kNotFound:
    case StatusCode::kProtocolError:
      return kExitUnreachable;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

Result<idl::IdlFile> LoadIdl(const std::string& path) {
  std::vector<idl::Diagnostic> diags;
  auto idl = idl::Load(path, &diags);
  for (const idl::Diagnostic& d : diags) {
    if (!d.is_error() || !idl.ok()) {
      std::fprintf(stderr, "%s\n", d.ToString().c_str());
    }
  }
  return idl;
}

// `transport`: a TransportLabel.
std::string Hint(const Status& s, const Target& t, const std::string& transport) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kNotFound:
      return "is an NAA (e.g. `naarpc serve`) listening on " + HostPort(t.host, t.port) +
             " over the " + transport +
             " transport? (--target, --transport)";
    case StatusCode::kDeadlineExceeded:
      return "raise --deadline (milliseconds), or check the NAA's kernel and its timeout";
    case StatusCode::kMrspError:
      return "the NAA refused the routine's memory regions (see the MRSP error code)";
    case StatusCode::kInvalidArgument:
      if (s.message().find("single_send needs the reference dialect") != std::string::npos) {
        return "the IDL marks this parameter single_send, a feature of the reference dialect: "
               "call with --dialect reference";
      }
      return "";
    default:
      return "";
  }
}

// ---- describe ----------------------------------------------------------------

struct DescribeArgs {
  std::string file, selector;
  bool json = false;
};

int Describe(const DescribeArgs& a) {
  auto idl = LoadIdl(a.file);
  if (!idl.ok()) return kExitIdl;
  auto out = a.json ? DescribeJson(*idl, a.selector) : DescribeText(*idl, a.selector);
  if (!out.ok()) return Fail(kExitUsage, out.status().message());
  std::fputs(out->c_str(), stdout);
  return kExitOk;
}

// ---- call --------------------------------------------------------------------

struct CommonArgs {
  std::string idl, transport = "auto", device, dialect = "spec";
  std::vector<std::string> targets;  // --target, repeatable: a channel over them
  int64_t deadline_ms = 0;  // 0: the routine's default deadline
  // Per-call windows (docs/protocol.md 4.5): --memory-windows /
  // --no-memory-windows; neither: the routine's IDL declaration.
  bool memory_windows = false, no_memory_windows = false;
};

// --dialect and --[no-]memory-windows as ClientOptions.
Result<ClientOptions> ClientOptionsFor(const CommonArgs& c) {
  auto dialect = ParseDialect(c.dialect);
  if (!dialect.ok()) return dialect.status();
  if (c.memory_windows && *dialect != Dialect::kSpec) {
    return InvalidArgumentError(
        "--memory-windows needs --dialect spec (the window keys travel in the spec dialect's "
        "metadata; the reference dialect has none)");
  }
  ClientOptions options;
  options.dialect = *dialect;
  if (c.memory_windows || c.no_memory_windows) options.memory_windows = c.memory_windows;
  return options;
}

// --transport / --device, adjusted for NAA_LOCAL_IP if it is set.
Result<LocalSide> LocalSideFor(const CommonArgs& c) {
  return LocalSideFromEnvironment(c.transport, c.device);
}

struct CallArgs {
  CommonArgs common;
  std::string routine;
  std::vector<std::string> inputs, outputs;
  std::string format = "auto";
  uint64_t repeat = 1;
  bool json = false;
};

// The routine a call names, in its IDL file.
struct CallRoutine {
  idl::IdlFile idl;
  const idl::Service* service = nullptr;
  const idl::Routine* routine = nullptr;
  std::string FullName() const { return service->name + "." + routine->name; }
};

// Inputs: name=SPEC, every input parameter exactly once. kExitOk or the
// exit status of a failure it reported.
int ParseInputs(const CallRoutine& r, const std::vector<std::string>& specs,
                std::map<std::string, Value>* inputs) {
  for (const std::string& in : specs) {
    const size_t eq = in.find('=');
    if (eq == std::string::npos) {
      return Fail(kExitUsage, "--in '" + in + "': write NAME=VALUE (e.g. a='[1,2,3]', a=@a.bin)");
    }
    const std::string name = in.substr(0, eq);
    const idl::Param* p = r.routine->FindParam(name);
    if (p == nullptr || !p->is_input()) {
      std::string names;
      for (const idl::Param& q : r.routine->params) {
        if (q.is_input()) names += (names.empty() ? "" : ", ") + q.name;
      }
      const std::string full = r.FullName();
      return Fail(kExitUsage, "--in " + name + ": " +
                                  (p == nullptr ? full + " has no parameter '" + name + "'"
                                                : "'" + name + "' is an output of " + full) +
                                  " (inputs: " + names + ")");
    }
    if (inputs->count(name)) return Fail(kExitUsage, "--in " + name + " given twice");
    auto v = ParseValue(*p, in.substr(eq + 1));
    if (!v.ok()) return Fail(kExitUsage, "--in " + name + ": " + v.status().message());
    (*inputs)[name] = std::move(*v);
  }
  for (const idl::Param& p : r.routine->params) {
    if (p.is_input() && !inputs->count(p.name)) {
      const std::string type(idl::Describe(p.type).idl);
      const std::string shape = StreamOf(p) ? "stream of " + type + "; e.g. " + p.name + "=seq:1000"
                                            : std::string(p.variable ? "at most " : "") +
                                                  std::to_string(p.count) + " x " + type +
                                                  "; e.g. " + p.name + "=zeros";
      return Fail(kExitUsage, "missing --in " + p.name + "=... (" +
                                  std::string(idl::DirectionName(p.direction)) + ", " + shape +
                                  ", " + p.name + "=@file.bin)");
    }
  }
  return kExitOk;
}

// Outputs: name=FORMAT or name=@FILE. kExitOk or the exit status of a
// failure it reported.
int ParseOutputSpecs(const CallRoutine& r, const std::vector<std::string>& specs,
                     std::map<std::string, std::string>* out_specs) {
  for (const std::string& out : specs) {
    const size_t eq = out.find('=');
    const std::string name = out.substr(0, eq);
    const idl::Param* p = r.routine->FindParam(name);
    if (p == nullptr || !p->is_output()) {
      return Fail(kExitUsage, "--out " + name + ": not an output parameter of " + r.FullName());
    }
    const std::string spec = eq == std::string::npos ? "auto" : out.substr(eq + 1);
    if (spec.empty() || (spec[0] != '@' && !ParseFormat(spec).ok())) {
      return Fail(kExitUsage, "--out " + out + ": auto, json, hex, summary or @FILE");
    }
    (*out_specs)[name] = spec;
  }
  return kExitOk;
}

// A call opened over its targets: the transport it runs on, the first
// target and the transport's label (for hints).
struct OpenedCall {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<ChannelDynamicCall> call;
  Target target;
  std::string transport_label;
};

// Resolves the targets, makes the transport, connects: kExitOk or the exit
// status of a failure it reported.
int OpenCall(const CallRoutine& r, const CommonArgs& common, std::chrono::milliseconds budget,
             OpenedCall* opened) {
  auto targets = ResolveTargets(common.targets, *r.routine);
  if (!targets.ok()) return Fail(kExitUsage, targets.status().message());
  opened->target = targets->front();
  auto client_options = ClientOptionsFor(common);
  if (!client_options.ok()) return Fail(kExitUsage, client_options.status().message());
  auto side = LocalSideFor(common);
  if (!side.ok()) return Fail(kExitUsage, side.status().message());
  auto transport = NewTransport(side->transport, side->device);
  if (!transport.ok()) return Fail(kExitUnreachable, transport.status().ToString());
  opened->transport = std::move(*transport);
  opened->transport_label = TransportLabel(side->transport, opened->transport->name());

  // The first deadline covers connecting, the MRSP and the first call.
  auto call = ChannelDynamicCall::Open(*opened->transport, *targets, *r.service, *r.routine,
                                       *client_options, Deadline::After(budget));
  if (!call.ok()) {
    const std::string hint = Hint(call.status(), opened->target, opened->transport_label);
    return Fail(ExitFor(call.status()),
                call.status().ToString() + (hint.empty() ? "" : "\n  hint: " + hint));
  }
  opened->call = std::move(*call);
  return kExitOk;
}

// A failed call `i` (0-based) of `repeat`: the error on stderr (and as JSON
// on stdout with --json); returns the exit status.
int ReportCallFailure(const CallRoutine& r, const CallArgs& a, const OpenedCall& opened,
                      const Status& s, uint64_t i) {
  std::string msg = s.ToString();
  if (s.code() == StatusCode::kNaaError && s.wire_code()) {
    for (const idl::ErrorCode& e : r.service->errors) {
      if (e.code == *s.wire_code() && !e.doc.empty()) msg += " (" + e.doc + ")";
    }
  }
  if (a.repeat > 1) msg += " [call " + std::to_string(i + 1) + " of " + std::to_string(a.repeat) + "]";
  const std::string hint = Hint(s, opened.target, opened.transport_label);
  if (a.json) {
    // Scripts get the status on stdout too.
    nlohmann::ordered_json j;
    j["routine"] = r.FullName();
    j["status"] = s.wire_code() ? StatusName(*r.service, *s.wire_code())
                                : std::string(StatusCodeName(s.code()));
    j["code"] = s.wire_code() ? nlohmann::ordered_json(*s.wire_code()) : nullptr;
    j["error"] = msg;
    j["calls"] = i;
    std::printf("%s\n", j.dump(2).c_str());
  }
  return Fail(ExitFor(s), msg + (hint.empty() ? "" : "\n  hint: " + hint));
}

// What the calls moved and took.
struct CallTotals {
  uint64_t bytes = 0;
  double secs = 0;
};

// Runs the call a.repeat times (a progress bar on a terminal): kExitOk, or
// the exit status of the first failure, reported.
int RunCalls(const CallRoutine& r, const CallArgs& a, OpenedCall& opened,
             std::chrono::milliseconds budget, const std::map<std::string, Value>& inputs,
             std::map<std::string, Value>* outputs, CallTotals* totals) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<uint64_t> done{0};
  uint64_t request_bytes = 0;
  for (const auto& [name, v] : inputs) request_bytes += v.data.size();
  // The bar (on a terminal, after about a second) also covers one long call.
  auto ticker = std::make_unique<ProgressTicker>(
      r.FullName(), a.repeat, [&done] { return done.load(); },
      [request_bytes] { return HumanBytes(request_bytes) + " per call"; });
  for (uint64_t i = 0; i < a.repeat; ++i) {
    Status s = opened.call->Invoke(inputs, outputs, Deadline::After(budget));
    if (!s.ok()) {
      ticker.reset();
      return ReportCallFailure(r, a, opened, s, i);
    }
    totals->bytes += opened.call->last_bytes_sent() + opened.call->last_bytes_received();
    done = i + 1;
  }
  ticker.reset();
  totals->secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return kExitOk;
}

// The outputs (to stdout or their @FILE), per-NAA counters of a channel, and
// the status line; or all of it as one JSON object with --json.
int PrintResults(const CallRoutine& r, const CallArgs& a, const ChannelDynamicCall& call,
                 Format default_format, const std::map<std::string, std::string>& out_specs,
                 std::map<std::string, Value>& outputs, const CallTotals& totals) {
  nlohmann::ordered_json json;
  if (a.json) {
    json["routine"] = r.FullName();
    json["status"] = "OK";
    json["calls"] = a.repeat;
    json["outputs"] = nlohmann::ordered_json::object();
  }
  for (const idl::Param& p : r.routine->params) {
    if (!p.is_output()) continue;
    const Value& v = outputs[p.name];
    auto it = out_specs.find(p.name);
    const std::string spec = it == out_specs.end() ? "" : it->second;
    if (!spec.empty() && spec[0] == '@') {
      Status w = WriteRaw(spec.substr(1), v);
      if (!w.ok()) return Fail(kExitFailure, "--out " + p.name + ": " + w.message());
      if (!a.json) {
        std::printf("%s: %llu element(s) written to %s\n", p.name.c_str(),
                    static_cast<unsigned long long>(v.count), spec.substr(1).c_str());
      } else {
        json["outputs"][p.name] = {{"file", spec.substr(1)}, {"elements", v.count}};
      }
      continue;
    }
    const Format f = spec.empty() ? default_format : *ParseFormat(spec);
    const std::string text = FormatValue(p, v, f == Format::kAuto && a.json ? Format::kJson : f);
    if (a.json) {
      json["outputs"][p.name] = f == Format::kHex || f == Format::kSummary
                                    ? nlohmann::ordered_json(text)
                                    : nlohmann::ordered_json::parse(text);
    } else {
      std::printf("%s = %s\n", p.name.c_str(), text.c_str());
    }
  }
  if (a.json && call.size() > 1) {
    json["naas"] = nlohmann::ordered_json::array();
    for (const NaaCounters& n : call.Counters()) {
      json["naas"].push_back({{"naa", n.naa.ToString()},
                              {"calls", n.calls},
                              {"errors", n.errors},
                              {"ejected", n.ejected}});
    }
  }
  if (a.json) {
    std::printf("%s\n", json.dump(2).c_str());
    return kExitOk;
  }
  if (call.size() > 1) {
    for (const NaaCounters& n : call.Counters()) {
      std::printf("NAA %s: %llu call(s), %llu error(s)%s\n", n.naa.ToString().c_str(),
                  static_cast<unsigned long long>(n.calls),
                  static_cast<unsigned long long>(n.errors), n.ejected ? ", ejected" : "");
    }
  }
  std::printf("status: OK");
  if (a.repeat > 1) {
    std::printf(" (%llu calls in %.3f s: %.1f us/call, %.1f MB/s)",
                static_cast<unsigned long long>(a.repeat), totals.secs,
                totals.secs * 1e6 / a.repeat, totals.bytes / totals.secs / 1e6);
  }
  std::printf("\n");
  return kExitOk;
}

// naarpc call: parse the values, open the call over its targets, run it,
// print what came back.
int Call(const CallArgs& a) {
  CallRoutine r;
  {
    auto idl = LoadIdl(a.common.idl);
    if (!idl.ok()) return kExitIdl;
    r.idl = std::move(*idl);
  }
  Status found = FindRoutine(r.idl, a.routine, &r.service, &r.routine);
  if (!found.ok()) return Fail(kExitUsage, found.message());
  auto default_format = ParseFormat(a.format);
  if (!default_format.ok()) return Fail(kExitUsage, default_format.status().message());

  std::map<std::string, Value> inputs;
  if (int e = ParseInputs(r, a.inputs, &inputs); e != kExitOk) return e;
  std::map<std::string, std::string> out_specs;
  if (int e = ParseOutputSpecs(r, a.outputs, &out_specs); e != kExitOk) return e;

  const auto budget = std::chrono::milliseconds(a.common.deadline_ms > 0 ? a.common.deadline_ms
                                                                         : r.routine->deadline_ms);
  OpenedCall opened;
  if (int e = OpenCall(r, a.common, budget, &opened); e != kExitOk) return e;
  std::map<std::string, Value> outputs;
  CallTotals totals;
  if (int e = RunCalls(r, a, opened, budget, inputs, &outputs, &totals); e != kExitOk) return e;
  opened.call->Close();
  return PrintResults(r, a, *opened.call, *default_format, out_specs, outputs, totals);
}

// ---- serve -------------------------------------------------------------------

struct ServeArgs {
  std::string idl, service, address = "0.0.0.0", transport = "auto", device, dialect = "any",
                            port_file;
  int port = kDefaultNaaPort;
  std::vector<std::string> kernels;
  size_t max_regions = kDefaultNaaMaxRegions;
  size_t max_connections = ServerOptions{}.max_connections;
  std::string max_bytes_per_connection = "4G";
  int64_t idle_timeout_ms = 0;
  int metrics_port = -1;  // -1: no metrics endpoint
  std::string metrics_address = "0.0.0.0";
};

int Serve(const ServeArgs& a) {
  // Signals are taken synchronously (sigwait), so block them before any
  // thread (transport, server) starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto idl = LoadIdl(a.idl);
  if (!idl.ok()) return kExitIdl;
  std::vector<const idl::Service*> services;
  for (const idl::Service& s : idl->services) {
    if (a.service.empty() || s.name == a.service) services.push_back(&s);
  }
  if (services.empty()) return Fail(kExitUsage, a.idl + " has no service '" + a.service + "'");
  auto naa = DynamicNaa::Create(services, a.kernels);
  if (!naa.ok()) return Fail(kExitUsage, naa.status().message());


  auto transport = NewTransport(a.transport, a.device);
  if (!transport.ok()) return Fail(kExitUnreachable, transport.status().ToString());

  ServerOptions options;
  options.max_regions = a.max_regions;
  // Calls of the other dialect get status 0x04.
  if (a.dialect != "any") options.dialect = a.dialect == "spec" ? Dialect::kSpec : Dialect::kReference;
  options.max_connections = a.max_connections;
  options.idle_timeout = std::chrono::milliseconds(a.idle_timeout_ms);
  auto max_bytes = ParseSize(a.max_bytes_per_connection);
  if (!max_bytes.ok()) {
    return Fail(kExitUsage, "--max-bytes-per-connection " + max_bytes.status().message());
  }
  options.max_bytes_per_connection = *max_bytes;
  if (a.metrics_port >= 0) {
    options.metrics_port = static_cast<uint16_t>(a.metrics_port);
    options.metrics_host = a.metrics_address;
  }
  options.log = [](std::string_view line) {
    std::fprintf(stderr, "naarpc serve: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  auto server =
      NaaServer::Start(**transport, a.address, static_cast<uint16_t>(a.port), **naa, options);
  if (!server.ok()) return Fail(kExitUnreachable, server.status().ToString());
  const uint16_t port = (*server)->port();
  if (!a.port_file.empty()) {
    // Written whole, then renamed (a reader never sees a partial file),
    // before the listening line.
    const std::string tmp = a.port_file + ".tmp";
    { std::ofstream(tmp) << port << "\n"; }
    if (std::rename(tmp.c_str(), a.port_file.c_str()) != 0) {
      return Fail(kExitFailure, "cannot write --port-file " + a.port_file);
    }
  }
  std::printf(
      "naarpc serve: listening on %s (%s, transport %s, dialect %s); Ctrl-C "
      "stops\n%s",
      HostPort(a.address, port).c_str(), idl->path.c_str(),
      std::string((*transport)->name()).c_str(), a.dialect.c_str(), (*naa)->Describe().c_str());
  if ((*server)->metrics_port() != 0) {
    std::printf("naarpc serve: metrics on http://%s/metrics\n",
                HostPort(a.metrics_address, (*server)->metrics_port()).c_str());
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  std::printf("naarpc serve: %llu call(s) on %llu connection(s); shutting down\n",
              static_cast<unsigned long long>((*naa)->calls()),
              static_cast<unsigned long long>((*server)->connections_accepted()));
  std::fflush(stdout);
  (*server)->Shutdown();
  return kExitOk;
}

// ---- bench -------------------------------------------------------------------

struct BenchArgs {
  CommonArgs common;
  std::string routine, sizes, clients = "1", csv, plot;
  std::vector<std::string> inputs;
  double duration_s = 2;
  bool no_baseline = false;
};

template <typename T>
Result<std::vector<T>> SplitList(const std::string& text, const char* what,
                                 Result<T> (*parse)(std::string_view)) {
  std::vector<T> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    auto v = parse(std::string_view(text).substr(start, comma - start));
    if (!v.ok()) return v.status().WithContext(what);
    out.push_back(*v);
    start = comma + 1;
  }
  return out;
}

Result<int> ParseClients(std::string_view s) {
  const std::string t(s);
  char* end = nullptr;
  const long v = std::strtol(t.c_str(), &end, 10);
  if (t.empty() || end != t.c_str() + t.size() || v < 1 || v > 256) {
    return InvalidArgumentError("'" + t + "' is not a client count in 1..256");
  }
  return static_cast<int>(v);
}

int Bench(const BenchArgs& a) {
  auto idl = LoadIdl(a.common.idl);
  if (!idl.ok()) return kExitIdl;
  BenchOptions o;
  Status found = FindRoutine(*idl, a.routine, &o.service, &o.routine);
  if (!found.ok()) return Fail(kExitUsage, found.message());
  if (!a.sizes.empty()) {
    auto sizes = SplitList<uint64_t>(a.sizes, "--sizes", &ParseSize);
    if (!sizes.ok()) return Fail(kExitUsage, sizes.status().message());
    o.sizes = *sizes;
  }
  for (const std::string& in : a.inputs) {
    const size_t eq = in.find('=');
    const idl::Param* p =
        eq == std::string::npos ? nullptr : o.routine->FindParam(in.substr(0, eq));
    if (p == nullptr || !p->is_input()) {
      return Fail(kExitUsage, "--in " + in + ": write NAME=VALUE for an input of " +
                                  o.service->name + "." + o.routine->name);
    }
    o.inputs[p->name] = in.substr(eq + 1);
  }
  auto clients = SplitList<int>(a.clients, "--clients", &ParseClients);
  if (!clients.ok()) return Fail(kExitUsage, clients.status().message());
  o.clients = *clients;
  if (!(a.duration_s > 0 && a.duration_s <= 3600)) {
    return Fail(kExitUsage, "--duration: seconds in (0, 3600]");
  }
  o.duration = std::chrono::milliseconds(std::max<int64_t>(1, a.duration_s * 1000));
  o.csv_path = a.csv;
  o.plot_prefix = a.plot;
  o.baseline = !a.no_baseline;
  o.progress = Progress::StderrIsTerminal();
  o.call_deadline = std::chrono::milliseconds(a.common.deadline_ms);
  auto targets = ResolveTargets(a.common.targets, *o.routine);
  if (!targets.ok()) return Fail(kExitUsage, targets.status().message());
  const Target* target = &targets->front();
  o.host = target->host;
  o.port = target->port;
  for (size_t i = 1; i < targets->size(); ++i) {
    o.more_naas.emplace_back((*targets)[i].host, (*targets)[i].port);
  }
  auto client_options = ClientOptionsFor(a.common);
  if (!client_options.ok()) return Fail(kExitUsage, client_options.status().message());
  o.client = *client_options;
  auto side = LocalSideFor(a.common);
  if (!side.ok()) return Fail(kExitUsage, side.status().message());
  o.transport = side->transport;
  o.device = side->device;
  Status s = RunBench(o);
  if (!s.ok()) {
    // RunBench's transport is gone: resolve "auto" again for the hint.
    std::string resolved;
    if (o.transport == "auto") {
      auto transport = NewTransport(o.transport, o.device);
      if (transport.ok()) resolved = (*transport)->name();
    }
    const std::string hint = Hint(s, *target, TransportLabel(o.transport, resolved));
    return Fail(ExitFor(s), s.ToString() + (hint.empty() ? "" : "\n  hint: " + hint));
  }
  return kExitOk;
}

void AddCommon(CLI::App* cmd, CommonArgs& c) {
  cmd->add_option("--idl", c.idl, "the IDL file (*.naa.yaml)")->required();
  cmd->add_option("--target", c.targets,
                  "the NAA: HOST[:PORT] or [IPv6][:PORT] (port default 12345); default: the "
                  "NAA_SPEC entries for the routine's function code. Repeat it for a channel "
                  "over several NAAs (docs/channel.md)")
      ->allow_extra_args(false);  // one value per --target: the routine follows
  cmd->add_option("--transport", c.transport, "emulated | verbs | auto")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}))
      ->capture_default_str();
  cmd->add_option("--device", c.device, "RDMA device (verbs), e.g. mlx5_0, rxe0");
  cmd->add_option("--dialect", c.dialect,
                  "wire dialect: spec (NAAICE API document) | reference (NAAICE reference "
                  "library)")
      ->check(CLI::IsMember({"spec", "reference"}))
      ->capture_default_str();
  cmd->add_flag("--memory-windows", c.memory_windows,
               "bind a memory window over the results before each call and invalidate it "
               "before returning, so the NAA can write them only during the call "
               "(docs/protocol.md 4.5; spec dialect only); default: the routine's IDL "
               "declaration (memory_windows: required)");
  cmd->add_flag("--no-memory-windows", c.no_memory_windows,
                "results keep connection-long keys even if the IDL declares "
                "memory_windows: required (an NAA without windows)")
      ->excludes("--memory-windows");
  cmd->add_option("--deadline", c.deadline_ms,
                  "milliseconds per call (the first includes connecting and the MRSP); "
                  "default: the routine's deadline_ms")
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}));
}

}  // namespace

int Main(int argc, char** argv) {
  // Under `bazel run`, paths on the command line are the user's.
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY"); wd != nullptr && *wd != '\0') {
    if (chdir(wd) != 0) return Fail(kExitFailure, std::string("cannot enter ") + wd);
  }
  CLI::App app{
      "naarpc: describe, call, serve and benchmark network-attached accelerators from "
      "their IDL files (*.naa.yaml), without generating code."};
  app.footer(kExitHelp);
  app.require_subcommand(1);

  DescribeArgs describe;
  CLI::App* d = app.add_subcommand("describe",
                                   "services, routines, function codes, parameters, "
                                   "internal regions, errors and timeouts of an IDL");
  d->add_option("file", describe.file, "the IDL file")->required();
  d->add_option("selector", describe.selector, "Service or Service.Routine");
  d->add_flag("--json", describe.json, "JSON (format naarpc-describe/1) for scripts");

  CallArgs call;
  CLI::App* c = app.add_subcommand("call", "call one routine with inputs from the command line");
  AddCommon(c, call.common);
  c->add_option("routine", call.routine, "Service.Routine (or Routine)")->required();
  c->add_option("--in", call.inputs,
                "NAME=VALUE for every input: a JSON array ('[1,2,3]'; a number for size 1), "
                "@FILE (raw little-endian elements), hex:0a0b.., zeros[:N], random[:N], "
                "seq[:N] (N elements; default the size, or the maximum)");
  c->add_option("--out", call.outputs,
                "NAME=FORMAT (auto, json, hex, summary) or NAME=@FILE (raw elements)");
  c->add_option("--format", call.format,
                "default output format: auto (JSON up to 64 "
                "elements, else a summary), json, hex, summary")
      ->capture_default_str();
  c->add_option("--repeat", call.repeat,
                "call N times on one connection (prints the last "
                "outputs and the rate)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  c->add_flag("--json", call.json, "print the status and outputs as JSON");

  ServeArgs serve;
  CLI::App* s =
      app.add_subcommand("serve", "a software NAA for any IDL file with built-in test kernels");
  s->add_option("--idl", serve.idl, "the IDL file")->required();
  s->add_option("--service", serve.service, "serve only this service (default: all)");
  s->add_option("--kernel", serve.kernels,
                "[Routine=|Service.Routine=]KERNEL, repeatable; KERNEL: echo (outputs = "
                "inputs), increment (+1 per element), zeros, sleep:MS (then echo), "
                "fail:CODE|NAME; default echo");
  s->add_option("--address", serve.address, "address to listen on")->capture_default_str();
  s->add_option("--port", serve.port, "port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  s->add_option("--port-file", serve.port_file, "write the port to this file once listening");
  s->add_option("--transport", serve.transport, "emulated | verbs | auto")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}))
      ->capture_default_str();
  s->add_option("--device", serve.device, "RDMA device (verbs)");
  s->add_option("--dialect", serve.dialect, "accept spec | reference | any")
      ->check(CLI::IsMember({"spec", "reference", "any"}))
      ->capture_default_str();
  s->add_option("--max-regions", serve.max_regions,
                "regions per connection (MRSP error 0x03 "
                "beyond)")
      ->check(CLI::Range(1, 255))
      ->capture_default_str();
  s->add_option("--max-connections", serve.max_connections,
                "concurrent connections (more are refused)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  s->add_option("--max-bytes-per-connection", serve.max_bytes_per_connection,
                "region bytes one connection may register, e.g. 64M, 4G (MRSP error beyond)")
      ->capture_default_str();
  s->add_option("--metrics-port", serve.metrics_port,
                "serve per-routine statistics in the Prometheus text format on "
                "http://ADDRESS:PORT/metrics (0: any free port; docs/operating.md)")
      ->check(CLI::Range(0, 65535));
  s->add_option("--metrics-address", serve.metrics_address,
                "address of the metrics endpoint")
      ->capture_default_str();
  s->add_option("--idle-timeout", serve.idle_timeout_ms,
                "milliseconds: close connections idle this long (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}))
      ->capture_default_str();

  BenchArgs bench;
  CLI::App* b = app.add_subcommand(
      "bench",
      "latency percentiles and throughput per payload size and client count, next to "
      "the raw transport; CSV and PNG plots");
  AddCommon(b, bench.common);
  b->add_option("routine", bench.routine, "Service.Routine (or Routine)")->required();
  b->add_option("--sizes", bench.sizes,
                "payload bytes per call, e.g. 64,4K,1M,64M (sets the element count of the "
                "variable-length inputs); default: the routine's full size");
  b->add_option("--clients", bench.clients, "client counts, e.g. 1,2,4,8")->capture_default_str();
  b->add_option("--in", bench.inputs,
                "NAME=VALUE for an input, as for call (default random); with --sizes a "
                "variable-length input takes zeros, seq or random");
  b->add_option("--duration", bench.duration_s, "seconds per (size, clients) point")
      ->capture_default_str();
  b->add_option("--csv", bench.csv, "write the results as CSV");
  b->add_option("--plot", bench.plot,
                "write PREFIX_latency.png, PREFIX_throughput.png, PREFIX_scaling.png (gnuplot)");
  b->add_flag("--no-baseline", bench.no_baseline,
              "skip the raw transport ping-pong (measured by default on this host, in a child "
              "process)");

  StatsArgs stats;
  CLI::App* st = app.add_subcommand(
      "stats", "per-routine statistics of an NAA's metrics endpoint (serve --metrics-port), as a table");
  st->add_option("--target", stats.target, "HOST:PORT of the metrics endpoint")->required();
  st->add_option("--side", stats.side, "host | naa | all")
      ->check(CLI::IsMember({"host", "naa", "all"}))
      ->capture_default_str();
  st->add_flag("--raw", stats.raw, "print the exposition text as it came");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (*d) return Describe(describe);
  if (*c) return Call(call);
  if (*s) return Serve(serve);
  if (*b) return Bench(bench);
  if (*st) return Stats(stats);
  return kExitUsage;
}

}  // namespace naarpc::cli

int main(int argc, char** argv) { return naarpc::cli::Main(argc, argv); }
