#include "tools/naarpc/call_command.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "naarpc/discovery.h"
#include "naarpc/transport_factory.h"
#include "tools/naarpc/channel_call.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/progress.h"
#include "tools/naarpc/target.h"
#include "tools/naarpc/values.h"

namespace naarpc::cli {
namespace {

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

}  // namespace

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

}  // namespace naarpc::cli
