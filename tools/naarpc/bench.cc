// `naarpc bench`: the routine's inputs per size and the run over sizes and
// client counts. Its parts: the timed loop (bench_measure.h), the raw
// baseline's peer (bench_raw_peer.h), the CSV and plots (bench_report.h).
#include "tools/naarpc/bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

#include "bench/transport_pingpong.h"
#include "naarpc/transport_factory.h"
#include "tools/naarpc/bench_measure.h"
#include "tools/naarpc/bench_raw_peer.h"
#include "tools/naarpc/bench_report.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/progress.h"
#include "tools/naarpc/values.h"

namespace naarpc::cli {
namespace {

using bench_internal::Human;
using bench_internal::Measure;
using bench_internal::Point;
using bench_internal::RawPeer;

struct NaarpcClient {
  std::unique_ptr<DynamicCall> call;
  const std::map<std::string, Value>* inputs = nullptr;
  std::chrono::milliseconds deadline{0};
};

Status CallOnce(NaarpcClient& c) {
  // Outputs stay in the registered buffers, as the raw ping-pong's do.
  return c.call->Invoke(*c.inputs, nullptr, Deadline::After(c.deadline));
}

struct RawClient {
  std::unique_ptr<bench::TransportPingPong> pingpong;
};

Status RawOnce(RawClient& c) {
  return c.pingpong->RoundTrip() ? Status::Ok()
                                 : TransportError("raw ping-pong round trip failed (see above)");
}

// The inputs of one call of payload `size` bytes (nullopt: every parameter
// full; 0: variable-length inputs and input streams empty).
Result<std::map<std::string, Value>> InputsFor(const BenchOptions& o,
                                               std::optional<uint64_t> size) {
  std::map<std::string, Value> inputs;
  for (const idl::Param& p : o.routine->params) {
    if (!p.is_input()) continue;
    auto given = o.inputs.find(p.name);
    std::string spec = given == o.inputs.end() ? "random" : given->second;
    if (StreamOf(p) && !size) {
      return InvalidArgumentError("parameter '" + p.name +
                                  "' is a stream: give --sizes (its bytes per call)");
    }
    if ((p.variable || StreamOf(p)) && size) {
      if (spec != "random" && spec != "seq" && spec != "zeros") {
        return InvalidArgumentError("--in " + p.name + "=" + spec +
                                    ": with --sizes, a variable-length input takes a generator "
                                    "(zeros, seq or random; the size sets its length)");
      }
      const uint32_t element = idl::Describe(p.type).size;
      if (*size % element != 0) {  // no silent rounding down to whole elements
        return InvalidArgumentError("--sizes " + Human(*size) + ": not a multiple of " +
                                    o.routine->name + "'s element size " +
                                    std::to_string(element) + " bytes (parameter '" + p.name +
                                    "': " + std::string(idl::Describe(p.type).idl) + ")");
      }
      const uint64_t n = *size / element;
      if (!StreamOf(p) && n > p.count) {
        return InvalidArgumentError("--sizes " + Human(*size) + ": parameter '" + p.name +
                                    "' takes at most " + std::to_string(p.count) + " x " +
                                    std::string(idl::Describe(p.type).idl) + " (" +
                                    std::to_string(p.data_bytes()) + " bytes)");
      }
      spec += ":" + std::to_string(n);
    }
    auto value = ParseValue(p, spec);
    if (!value.ok()) return value.status().WithContext("--in " + p.name);
    inputs[p.name] = std::move(*value);
  }
  return inputs;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  const std::string t(text);
  size_t digits = 0;
  while (digits < t.size() && t[digits] >= '0' && t[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) {
    return InvalidArgumentError("'" + t + "' is not a size (e.g. 64, 4K, 1M, 64M)");
  }
  uint64_t v = std::stoull(t.substr(0, digits));
  std::string unit = t.substr(digits);
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();  // KiB
  int shift = 0;
  if (unit.empty() || unit == "B" || unit == "b") {
    shift = 0;
  } else if (unit == "K" || unit == "k") {
    shift = 10;
  } else if (unit == "M" || unit == "m") {
    shift = 20;
  } else if (unit == "G" || unit == "g") {
    shift = 30;
  } else {
    return InvalidArgumentError("'" + t + "': unknown unit '" + t.substr(digits) +
                                "' (K, M, G: binary)");
  }
  if (v > (uint64_t{1} << 40) >> shift) {
    return InvalidArgumentError("'" + t + "' is more than 1 TiB");
  }
  return v << shift;
}

Status RunBench(const BenchOptions& o) {
  const idl::Routine& r = *o.routine;
  const std::string name = o.service->name + "." + r.name;
  bool has_variable_input = false;
  for (const idl::Param& p : r.params) {
    has_variable_input |= (p.variable || StreamOf(p)) && p.is_input();
  }
  if (!o.sizes.empty() && !has_variable_input) {
    return InvalidArgumentError("--sizes: " + name +
                                " has no variable-length input, so its "
                                "payload is fixed; omit --sizes");
  }
  // Check every size before measuring anything. nullopt: the full size.
  std::vector<std::optional<uint64_t>> sizes(o.sizes.begin(), o.sizes.end());
  std::vector<std::map<std::string, Value>> inputs;
  if (sizes.empty()) sizes.push_back(std::nullopt);
  for (const std::optional<uint64_t>& size : sizes) {
    NAARPC_ASSIGN_OR_RETURN(auto in, InputsFor(o, size));
    inputs.push_back(std::move(in));
  }
  const int max_clients = *std::max_element(o.clients.begin(), o.clients.end());

  // The raw peer first: it forks, and no transport may exist yet.
  std::unique_ptr<RawPeer> raw;
  if (o.baseline) {
    NAARPC_ASSIGN_OR_RETURN(raw, RawPeer::Start(o.transport, o.device, o.host, max_clients));
  }
  NAARPC_ASSIGN_OR_RETURN(auto transport, NewTransport(o.transport, o.device));
  const std::chrono::milliseconds deadline =
      o.call_deadline.count() > 0 ? o.call_deadline : std::chrono::milliseconds(r.deadline_ms);

  std::printf(
      "naarpc bench: %s on %s:%u (transport %s, dialect %s%s), %.3g s per point\n", name.c_str(),
      o.host.c_str(), unsigned{o.port}, std::string(transport->name()).c_str(),
      o.client.dialect == Dialect::kSpec ? "spec" : "reference",
      o.client.memory_windows.value_or(r.memory_windows) ? ", memory windows" : "", o.duration.count() / 1000.0);
  for (const auto& [host, port] : o.more_naas) {
    std::printf("  and on %s:%u (client c calls NAA c mod %zu)\n", host.c_str(), unsigned{port},
                1 + o.more_naas.size());
  }
  if (raw) {
    std::printf(
        "raw baseline: %s transport ping-pong on %s (this host; one WRITE_WITH_IMM of "
        "the call's request bytes each way, no naarpc engine)\n",
        std::string(transport->name()).c_str(), raw->host().c_str());
  }
  std::printf("%-8s %7s | %8s %9s %9s %9s %9s %10s %9s | %9s %9s %6s\n", "size", "clients", "calls",
              "p50 us", "p90 us", "p99 us", "max us", "calls/s", "MB/s", "raw p50", "raw MB/s",
              "p50 x");
  std::fflush(stdout);

  Progress progress("bench " + name,
                    sizes.size() * o.clients.size() * (raw ? 2 : 1) * o.duration.count(),
                    o.progress);
  uint64_t progress_base = 0;
  std::vector<Point> points;
  for (size_t si = 0; si < sizes.size(); ++si) {
    for (int clients : o.clients) {
      const std::string detail = (sizes[si] ? Human(*sizes[si]) + " B, " : "full size, ") +
                                 std::to_string(clients) +
                                 (clients == 1 ? " client" : " clients");
      // naarpc: one session (connection) per client.
      std::vector<std::unique_ptr<NaarpcClient>> calls;
      for (int c = 0; c < clients; ++c) {
        const size_t naa = static_cast<size_t>(c) % (1 + o.more_naas.size());
        auto call = DynamicCall::Open(*transport, naa == 0 ? o.host : o.more_naas[naa - 1].first,
                                      naa == 0 ? o.port : o.more_naas[naa - 1].second,
                                      *o.service, r, o.client, Deadline::After(deadline));
        if (!call.ok()) {
          progress.Finish();
          return call.status();
        }
        auto client = std::make_unique<NaarpcClient>();
        client->call = std::move(*call);
        client->inputs = &inputs[si];
        client->deadline = deadline;
        calls.push_back(std::move(client));
      }
      auto point = Measure<NaarpcClient>(calls, o.duration, progress, progress_base,
                                         "naarpc " + detail, &CallOnce);
      progress_base += o.duration.count();
      if (!point.ok()) {
        progress.Finish();
        return point.status().WithContext(name + " at " + detail);
      }
      const uint64_t sent = calls[0]->call->last_bytes_sent();
      const uint64_t bytes = sent + calls[0]->call->last_bytes_received();
      for (auto& c : calls) c->call->session().Close().IgnoreError();
      Point p = *point;
      p.kind = "naarpc";
      p.size = sizes[si] ? *sizes[si] : sent;
      p.clients = clients;
      p.bytes_per_call = bytes;
      p.mb_per_s = p.calls_per_s * double(bytes) / 1e6;
      points.push_back(p);

      Point q;
      if (raw) {
        std::vector<std::unique_ptr<RawClient>> pingpongs;
        for (int c = 0; c < clients; ++c) {
          auto pp = bench::TransportPingPong::Open(*transport, raw->host(), raw->port(c),
                                                   std::max<uint64_t>(sent, 1));
          if (!pp.ok()) {
            progress.Finish();
            return pp.status().WithContext("raw baseline");
          }
          pingpongs.push_back(std::make_unique<RawClient>(RawClient{std::move(*pp)}));
        }
        auto rp = Measure<RawClient>(pingpongs, o.duration, progress, progress_base,
                                     "raw " + detail, &RawOnce);
        progress_base += o.duration.count();
        if (!rp.ok()) {
          progress.Finish();
          return rp.status().WithContext("raw baseline at " + detail);
        }
        q = *rp;
        q.kind = "raw";
        q.size = p.size;
        q.clients = clients;
        q.bytes_per_call = 2 * std::max<uint64_t>(sent, 1);
        q.mb_per_s = q.calls_per_s * double(q.bytes_per_call) / 1e6;
        points.push_back(q);
      }
      progress.Finish();
      std::printf("%-8s %7d | %8llu %9.1f %9.1f %9.1f %9.1f %10.0f %9.1f |", Human(p.size).c_str(),
                  clients, static_cast<unsigned long long>(p.calls), p.p50, p.p90, p.p99, p.max,
                  p.calls_per_s, p.mb_per_s);
      if (raw) {
        std::printf(" %9.1f %9.1f %6.2f\n", q.p50, q.mb_per_s, p.p50 / q.p50);
      } else {
        std::printf(" %9s %9s %6s\n", "-", "-", "-");
      }
      std::fflush(stdout);
    }
  }
  raw.reset();

  return bench_internal::WriteReports(o, name, points);
}

}  // namespace naarpc::cli
