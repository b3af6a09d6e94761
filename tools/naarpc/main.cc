// naarpc: describe, call, serve and benchmark any NAA from its IDL file at
// run time (no code generation). `naarpc --help`, `naarpc CMD --help`.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "naarpc/discovery.h"
#include "naarpc/transport_factory.h"
#include "tools/naarpc/bench.h"
#include "tools/naarpc/call_command.h"
#include "tools/naarpc/cli_common.h"
#include "tools/naarpc/describe.h"
#include "tools/naarpc/progress.h"
#include "tools/naarpc/serve_command.h"
#include "tools/naarpc/stats.h"
#include "tools/naarpc/target.h"

namespace naarpc::cli {
namespace {

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
  o.duration = std::chrono::milliseconds(std::llround(a.duration_s * 1000));  // DurationSeconds
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

// An integer option in lo..hi. CLI11's Range alone words "1.5" or "abc" as
// "not in range"; `noun` says what the integer counts ("number of
// milliseconds").
CLI::Validator IntegerIn(int64_t lo, int64_t hi, const std::string& noun) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        int64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ptr != s.data() + s.size() || r.ec == std::errc::invalid_argument) {
          return "expected an integer " + noun + " (" + range + "), got '" + s + "'";
        }
        if (r.ec == std::errc::result_out_of_range || v < lo || v > hi) {
          return s + " is out of the range " + range + " (" + noun + ")";
        }
        s = std::to_string(v);  // "-0" as "0" for the unsigned options
        return std::string();
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

// --duration: seconds in (0, 3600], whole milliseconds (the timer's unit).
CLI::Validator DurationSeconds() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);  // 1e999: infinity, out of range
        if (s.empty() || end != s.c_str() + s.size() || std::isnan(d)) {
          return "expected a number of seconds in (0, 3600], got '" + s + "'";
        }
        if (!(d > 0 && d <= 3600)) return s + " is out of the range (0, 3600] (seconds)";
        if (std::fabs(d * 1000 - std::round(d * 1000)) > 1e-6) {
          return s + " is not a whole number of milliseconds";
        }
        return std::string();
      },
      "FLOAT in (0 - 3600]");
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
      ->check(IntegerIn(1, 86'400'000, "number of milliseconds"));
}

// Edits (insertions, deletions, substitutions) from a to b.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<const CLI::App*> Subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// "describe, call, serve, bench, stats".
std::string SubcommandNames(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : Subcommands(app)) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// "unknown subcommand 'descibe'; did you mean 'describe'? (subcommands: ...)".
std::string UnknownSubcommand(const CLI::App& app, const std::string& word) {
  const std::string names = SubcommandNames(app);
  std::string closest;
  size_t best = 3;  // suggest at most 2 edits away, or a prefix ("stat", "benchmark")
  for (const CLI::App* sub : Subcommands(app)) {
    const std::string& name = sub->get_name();
    const size_t d = name.starts_with(word) || word.starts_with(name) ? 1 : EditDistance(word, name);
    if (d < best) {
      best = d;
      closest = name;
    }
  }
  if (word.starts_with("-")) {
    return "unknown option '" + word + "': a subcommand comes first (" + names +
           "; naarpc --help)";
  }
  return "unknown subcommand '" + word + "'" +
         (closest.empty() ? "" : "; did you mean '" + closest + "'?") + " (subcommands: " +
         names + "; naarpc --help)";
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
      ->check(IntegerIn(1, int64_t{1} << 40, "number of calls"));
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
      ->check(IntegerIn(0, 65535, "port number"))
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
      ->check(IntegerIn(1, 255, "number of regions"))
      ->capture_default_str();
  s->add_option("--max-connections", serve.max_connections,
                "concurrent connections (more are refused)")
      ->check(IntegerIn(1, 65536, "number of connections"))
      ->capture_default_str();
  s->add_option("--max-bytes-per-connection", serve.max_bytes_per_connection,
                "region bytes one connection may register, e.g. 64M, 4G (MRSP error beyond)")
      ->capture_default_str();
  s->add_option("--metrics-port", serve.metrics_port,
                "serve per-routine statistics in the Prometheus text format on "
                "http://ADDRESS:PORT/metrics (0: any free port; docs/operating.md)")
      ->check(IntegerIn(0, 65535, "port number"));
  s->add_option("--metrics-address", serve.metrics_address,
                "address of the metrics endpoint")
      ->capture_default_str();
  s->add_option("--idle-timeout", serve.idle_timeout_ms,
                "milliseconds: close connections idle this long (0: never)")
      ->check(IntegerIn(0, 86'400'000, "number of milliseconds"))
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
      ->check(DurationSeconds())
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
    // No subcommand, and words left over: CLI11 would say only "A subcommand
    // is required".
    if (app.get_subcommands().empty() && !app.remaining().empty()) {
      return Fail(kExitUsage, UnknownSubcommand(app, app.remaining().front()));
    }
    if (app.get_subcommands().empty() && dynamic_cast<const CLI::RequiredError*>(&e)) {
      return Fail(kExitUsage, "a subcommand is required: " + SubcommandNames(app) +
                                  " (naarpc --help)");
    }
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
