// async_bench: K calls in flight through a generated client's completion
// engine (AddAsync, one engine thread, each callback submitting the next
// call) vs. the same K in flight from K threads making blocking calls (Add),
// measured in the same run against the same software NAA (a child process
// serving services/vector). Prints calls/s for both, their ratio, the
// client threads each used, and what a call cost in CPU time: the client's
// and the NAA's processes per call in each mode, and the engine thread's
// time on a CPU and waiting for one (runnable) per call. CPU time per call
// stays readable when other work shares the machine; calls/s does not.
// The two modes alternate in rounds (--rounds), so each ratio compares them
// on the machine in the same state; a row's ratio is the rounds' median.
//
//   bazel run -c opt //bench:async_bench -- [--transport=emulated|verbs]
//       [--address=127.0.0.1] [--inflight 1 4 16 64] [--calls=20000] [--rounds=5]
#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/naa_child.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "services/vector/vector.naa.h"
#include "services/vector/vector_service.h"

namespace {

namespace vec = naarpc::services::vector;
using Clock = std::chrono::steady_clock;
constexpr auto kCallDeadline = std::chrono::seconds(60);

// Threads of this process whose name starts with `prefix`.
int ThreadsNamed(const std::string& prefix) {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name) && name.rfind(prefix, 0) == 0) ++n;
  }
  closedir(dir);
  return n;
}

// CPU time (ns) of a whole process, its exited threads included; -1 if
// unreadable.
int64_t ProcessCpuNs(pid_t pid) {
  clockid_t clock;
  timespec ts{};
  if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) != 0) return -1;
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Time (ns) the thread of this process named `name` ran on a CPU and
// waited runnable for one (/proc/.../schedstat); nullopt if none (or
// several) run by that name.
struct SchedTimes {
  int64_t run_ns = 0, wait_ns = 0;
};
// This process's thread named `name`: its /proc directory (nullopt: none,
// or several, by that name).
std::optional<std::string> NamedTask(const std::string& name) {
  std::optional<std::string> found;
  int matches = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return std::nullopt;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::string task = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(task + "/comm");
    std::string comm_name;
    if (!std::getline(comm, comm_name) || comm_name != name) continue;
    ++matches;
    found = std::move(task);
  }
  closedir(dir);
  return matches == 1 ? found : std::nullopt;
}

std::optional<SchedTimes> ThreadSchedTimes(const std::string& name) {
  const std::optional<std::string> task = NamedTask(name);
  if (!task) return std::nullopt;
  std::ifstream sched(*task + "/schedstat");
  SchedTimes t;
  if (!(sched >> t.run_ns >> t.wait_ns)) return std::nullopt;
  return t;
}

// Context switches of a thread, from its /proc status: it slept
// (voluntary) and it was preempted (nonvoluntary).
struct Switches {
  int64_t slept = 0, preempted = 0;
};
std::optional<Switches> TaskSwitches(const std::string& task) {
  std::ifstream status(task + "/status");
  std::string line;
  Switches s;
  int found = 0;
  while (std::getline(status, line)) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
      s.slept = std::stoll(line.substr(line.find(':') + 1));
      ++found;
    } else if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
      s.preempted = std::stoll(line.substr(line.find(':') + 1));
      ++found;
    }
  }
  return found == 2 ? std::optional(s) : std::nullopt;
}

// Context switches of each live thread of process `pid`, by thread id.
std::map<std::string, int64_t> ProcessSwitchesByThread(pid_t pid) {
  std::map<std::string, int64_t> out;
  const std::string dir_name = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(dir_name.c_str());
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    if (auto s = TaskSwitches(dir_name + "/" + e->d_name)) out[e->d_name] = s->slept + s->preempted;
  }
  closedir(dir);
  return out;
}

// The engine thread's context switches (nullopt: none, or several, by that name).
std::optional<Switches> NamedThreadSwitches(const std::string& name) {
  const std::optional<std::string> task = NamedTask(name);
  return task ? TaskSwitches(*task) : std::nullopt;
}

// Context switches per call over a timed run: the client's process (all
// its threads, exited ones included: getrusage) and the NAA's (its threads
// alive at the end; one that left during the run is missed, which the
// NAA's threads do only after seconds without events); -1: not measured.
struct SwitchesPerCall {
  double client = -1, naa = -1;
};
class SwitchMeter {
 public:
  explicit SwitchMeter(pid_t naa)
      : naa_(naa), client0_(ClientSwitches()), naa0_(ProcessSwitchesByThread(naa)) {}
  SwitchesPerCall PerCall(size_t calls) const {
    SwitchesPerCall r;
    const int64_t client1 = ClientSwitches();
    if (client0_ >= 0 && client1 >= 0) r.client = double(client1 - client0_) / double(calls);
    const auto naa1 = ProcessSwitchesByThread(naa_);
    if (!naa1.empty()) {
      int64_t n = 0;
      for (const auto& [tid, count] : naa1) {
        auto before = naa0_.find(tid);
        n += count - (before == naa0_.end() ? 0 : before->second);
      }
      r.naa = double(n) / double(calls);
    }
    return r;
  }

 private:
  static int64_t ClientSwitches() {
    rusage u{};
    if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
    return int64_t{u.ru_nvcsw} + u.ru_nivcsw;
  }
  pid_t naa_;
  int64_t client0_;
  std::map<std::string, int64_t> naa0_;
};

// CPU time per call (µs) of the client's and the NAA's processes over a
// timed run; -1: not measured.
struct CpuPerCall {
  double client_us = -1, naa_us = -1;
};
class CpuMeter {
 public:
  explicit CpuMeter(pid_t naa)
      : naa_(naa), client0_(ProcessCpuNs(getpid())), naa0_(ProcessCpuNs(naa)) {}
  CpuPerCall PerCall(size_t calls) const {
    const auto per_call = [calls](int64_t before, int64_t after) {
      return before < 0 || after < 0 ? -1.0 : double(after - before) / 1e3 / double(calls);
    };
    return {per_call(client0_, ProcessCpuNs(getpid())), per_call(naa0_, ProcessCpuNs(naa_))};
  }

 private:
  pid_t naa_;
  int64_t client0_, naa0_;
};

struct Slot {
  std::vector<float> a = std::vector<float>(1024, 1.0f);
  std::vector<float> b = std::vector<float>(1024, 2.0f);
  std::vector<float> out = std::vector<float>(1024);
};

// K calls in flight from one thread: each callback submits the slot's next call.
struct EngineRun {
  double calls_per_s = 0;
  int engine_threads = 0, helper_threads = 0;
  bool ok = true;
  CpuPerCall cpu;
  // The engine thread per call: on a CPU, and runnable waiting for one
  // (-1: not read).
  double engine_run_us = -1, engine_wait_us = -1;
  SwitchesPerCall switches;
  // The engine thread's context switches per call: it slept, it was
  // preempted (-1: not read).
  double engine_slept = -1, engine_preempted = -1;
};
// Stub options for K calls in flight: one session each.
naarpc::codegen::StubOptions SessionsFor(size_t k) {
  naarpc::codegen::StubOptions options;
  options.max_sessions_per_routine = k;
  return options;
}

// The engine mode of one K: its client and sessions stay open across the
// rounds (connected once, before the first).
class EngineMode {
 public:
  EngineMode(naarpc::Transport& transport, const std::string& address, uint16_t port, size_t k)
      : slots_(k), client_(transport, address, port, SessionsFor(k)) {}

  // Every session connected (K calls at once); false if a call failed.
  bool WarmUp() {
    std::vector<std::future<naarpc::Status>> warm;
    for (Slot& s : slots_) warm.push_back(client_.AddAsync(s.a, s.b, s.out));
    bool ok = true;
    for (auto& w : warm) {
      const naarpc::Status st = w.get();
      if (!st.ok()) {
        std::fprintf(stderr, "async warm-up call: %s\n", st.ToString().c_str());
        ok = false;
      }
    }
    return ok;
  }

  // `calls` calls, K in flight; returns once every slot's chain has stopped
  // (no callback of this round still runs).
  EngineRun Round(pid_t naa, size_t calls) {
    calls_ = calls;
    submitted_.store(0);
    failed_.store(false);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = 0;
    }
    const std::optional<SchedTimes> sched0 = ThreadSchedTimes("naarpc-engine");
    const std::optional<Switches> switches0 = NamedThreadSwitches("naarpc-engine");
    const SwitchMeter switches(naa);
    const CpuMeter cpu(naa);
    const auto start = Clock::now();
    for (Slot& s : slots_) Next(s);
    const int engine_threads = ThreadsNamed("naarpc-engine");
    const int helper_threads = ThreadsNamed("naarpc-helper");
    {
      std::unique_lock<std::mutex> lock(mu_);
      all_stopped_.wait(lock, [this] { return stopped_ == slots_.size(); });
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EngineRun run;
    run.calls_per_s = double(calls) / seconds;
    run.engine_threads = engine_threads;
    run.helper_threads = helper_threads;
    run.ok = !failed_.load();
    run.cpu = cpu.PerCall(calls);
    run.switches = switches.PerCall(calls);
    if (const std::optional<Switches> switches1 = NamedThreadSwitches("naarpc-engine");
        switches0 && switches1) {
      run.engine_slept = double(switches1->slept - switches0->slept) / double(calls);
      run.engine_preempted = double(switches1->preempted - switches0->preempted) / double(calls);
    }
    if (const std::optional<SchedTimes> sched1 = ThreadSchedTimes("naarpc-engine");
        sched0 && sched1) {
      run.engine_run_us = double(sched1->run_ns - sched0->run_ns) / 1e3 / double(calls);
      run.engine_wait_us = double(sched1->wait_ns - sched0->wait_ns) / 1e3 / double(calls);
    }
    return run;
  }

 private:
  // The slot's next call, submitted from its previous one's callback; once
  // the round's calls are all submitted, the slot's chain stops.
  void Next(Slot& s) {
    if (submitted_.fetch_add(1) >= calls_) {
      std::lock_guard<std::mutex> lock(mu_);
      if (++stopped_ == slots_.size()) all_stopped_.notify_one();
      return;
    }
    client_.AddAsync(s.a, s.b, s.out, [this, &s](naarpc::Status st) {
      if (!st.ok() && !failed_.exchange(true)) {
        std::fprintf(stderr, "async call: %s\n", st.ToString().c_str());
      }
      Next(s);
    }, naarpc::Deadline::After(kCallDeadline));
  }

  size_t calls_ = 0;
  std::atomic<size_t> submitted_{0};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::condition_variable all_stopped_;
  size_t stopped_ = 0;  // guarded by mu_
  std::vector<Slot> slots_;
  // Declared last, destroyed first: its engine thread is joined before the
  // state its callbacks use goes away.
  vec::VectorArithClient client_;
};

// K threads, each making blocking calls.
struct ThreadsRun {
  double calls_per_s = 0;
  bool ok = true;
  CpuPerCall cpu;
  SwitchesPerCall switches;
};
// The threads mode of one K: its client and sessions stay open across the
// rounds (connected once, before the first).
class ThreadsMode {
 public:
  ThreadsMode(naarpc::Transport& transport, const std::string& address, uint16_t port, size_t k)
      : slots_(k), client_(transport, address, port, SessionsFor(k)) {}

  // Every session connected (one call from each of K threads at once).
  bool WarmUp() {
    failed_.store(false);
    std::vector<std::thread> warm;
    for (Slot& s : slots_) warm.emplace_back([this, &s] { Work(s, 1); });
    for (auto& t : warm) t.join();
    return !failed_.load();
  }

  ThreadsRun Round(pid_t naa, size_t calls) {
    failed_.store(false);
    const size_t k = slots_.size();
    const SwitchMeter switches(naa);
    const CpuMeter cpu(naa);
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (size_t i = 0; i < k; ++i) {
      threads.emplace_back([this, i, n = calls / k + (i < calls % k)] { Work(slots_[i], n); });
    }
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ThreadsRun run;
    run.calls_per_s = double(calls) / seconds;
    run.cpu = cpu.PerCall(calls);
    run.switches = switches.PerCall(calls);
    run.ok = !failed_.load();
    return run;
  }

 private:
  void Work(Slot& s, size_t n) {
    for (size_t i = 0; i < n && !failed_.load(std::memory_order_relaxed); ++i) {
      naarpc::Status st = client_.Add(s.a, s.b, s.out, naarpc::Deadline::After(kCallDeadline));
      if (!st.ok() && !failed_.exchange(true)) {
        std::fprintf(stderr, "sync call: %s\n", st.ToString().c_str());
      }
    }
  }

  std::atomic<bool> failed_{false};
  std::vector<Slot> slots_;
  vec::VectorArithClient client_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The mean of a per-call figure over the rounds that measured it (-1: none did).
template <typename Run>
double MeanOf(const std::vector<Run>& runs, double (*get)(const Run&)) {
  double sum = 0;
  int n = 0;
  for (const Run& r : runs) {
    if (get(r) < 0) continue;
    sum += get(r);
    ++n;
  }
  return n == 0 ? -1 : sum / n;
}

// Rounds of equal calls: calls/s is their median, per-call costs their means.
template <typename Run>
Run CombineRounds(const std::vector<Run>& runs) {
  Run out;
  std::vector<double> rates;
  for (const Run& r : runs) {
    rates.push_back(r.calls_per_s);
    out.ok = out.ok && r.ok;
  }
  if (runs.empty()) return out;
  out.calls_per_s = Median(rates);
  out.cpu.client_us = MeanOf<Run>(runs, [](const Run& r) { return r.cpu.client_us; });
  out.cpu.naa_us = MeanOf<Run>(runs, [](const Run& r) { return r.cpu.naa_us; });
  out.switches.client = MeanOf<Run>(runs, [](const Run& r) { return r.switches.client; });
  out.switches.naa = MeanOf<Run>(runs, [](const Run& r) { return r.switches.naa; });
  return out;
}
// ... and the engine thread's own figures.
EngineRun Combine(const std::vector<EngineRun>& runs) {
  EngineRun out = CombineRounds(runs);
  for (const EngineRun& r : runs) {
    out.engine_threads = std::max(out.engine_threads, r.engine_threads);
    out.helper_threads = std::max(out.helper_threads, r.helper_threads);
  }
  using R = EngineRun;
  out.engine_run_us = MeanOf<R>(runs, [](const R& r) { return r.engine_run_us; });
  out.engine_wait_us = MeanOf<R>(runs, [](const R& r) { return r.engine_wait_us; });
  out.engine_slept = MeanOf<R>(runs, [](const R& r) { return r.engine_slept; });
  out.engine_preempted = MeanOf<R>(runs, [](const R& r) { return r.engine_preempted; });
  return out;
}
ThreadsRun Combine(const std::vector<ThreadsRun>& runs) { return CombineRounds(runs); }

// One row per K of what each mode cost per call (-1: not measured).
struct CostRow {
  size_t k;
  CpuPerCall engine, threads;
  double engine_run_us, engine_wait_us;
  SwitchesPerCall engine_switches, threads_switches;
  double engine_slept, engine_preempted;
};

// A table of one figure per call: the engine's client and NAA, the blocking
// threads' client and NAA, and two of the engine thread's; "-" where not
// measured.
void PrintCostTable(const char* title, const char* engine_thread_heading, const char* format,
                    const std::vector<CostRow>& rows,
                    const std::function<std::array<double, 6>(const CostRow&)>& figures) {
  std::printf("\n%s\n", title);
  std::printf("%-9s | %-21s | %-21s | %s\n", "in flight", "engine: client, NAA",
              "threads: client, NAA", engine_thread_heading);
  for (const CostRow& r : rows) {
    std::array<std::string, 6> cells;
    const std::array<double, 6> values = figures(r);
    for (size_t i = 0; i < cells.size(); ++i) {
      char text[32];
      if (values[i] < 0) {
        std::snprintf(text, sizeof text, "%10s", "-");
      } else {
        std::snprintf(text, sizeof text, format, values[i]);
      }
      cells[i] = text;
    }
    std::printf("%-9zu | %s %s | %s %s | %s %s\n", r.k, cells[0].c_str(), cells[1].c_str(),
                cells[2].c_str(), cells[3].c_str(), cells[4].c_str(), cells[5].c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"K calls in flight: a generated client's completion engine vs. K blocking threads"};
  std::string transport_name = "emulated", address = "127.0.0.1";
  std::vector<size_t> inflight = {1, 4, 16, 64};
  size_t calls = 20000;
  app.add_option("--transport", transport_name, "emulated, verbs or auto")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}));
  app.add_option("--address", address, "address the NAA listens on");
  app.add_option("--inflight", inflight, "calls in flight at once (one row each)");
  app.add_option("--calls", calls, "timed calls per row and mode, over all rounds")
      ->check(CLI::PositiveNumber);
  size_t rounds = 5;
  app.add_option("--rounds", rounds,
                 "alternating rounds of engine then threads per row; ratio = median of the "
                 "rounds' ratios")
      ->check(CLI::Range(1, 1000));
  std::string mode = "both";
  app.add_option("--mode", mode, "both, or engine / threads alone (for profiling)")
      ->check(CLI::IsMember({"both", "engine", "threads"}));
  CLI11_PARSE(app, argc, argv);

  // The NAA in a child process, forked before any thread exists.
  using naarpc::bench::NaaChild;
  std::optional<NaaChild> naa = NaaChild::Start(1, [&](const NaaChild::ReportPorts& report) {
    auto transport = naarpc::NewTransport(transport_name);
    if (!transport.ok()) _exit(1);
    vec::VectorArithServiceImpl service;
    // Both modes connect all K sessions of a row at once (warm-up), from one
    // peer: allow that many in their MRSP handshake (the default per-peer
    // cap, 16, would close the rest; this measures calls, not admission).
    naarpc::ServerOptions server_options;
    server_options.max_handshakes_per_peer = std::max<size_t>(
        server_options.max_handshakes_per_peer,
        inflight.empty() ? 0 : *std::max_element(inflight.begin(), inflight.end()));
    auto server = naarpc::NaaServer::Start(**transport, address, 0, service, server_options);
    if (!server.ok()) _exit(1);
    report({(*server)->port()});
    for (;;) pause();  // serving, until killed
  });
  if (!naa) {
    std::fprintf(stderr, "the NAA did not start\n");
    return 1;
  }
  const uint16_t port = naa->port();

  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  std::printf("VectorArith.Add (2 x 4 KiB in, 4 KiB out), %s transport, %zu calls per cell\n",
              transport_name.c_str(), calls);
  std::printf("%-9s | %-16s | %-16s | %-14s | %s\n", "in flight", "engine calls/s",
              "threads calls/s", "engine/threads",
              "client threads: engine (+ idle connect helpers) vs blocking");
  int rc = 0;
  std::vector<CostRow> cost_rows;
  std::vector<std::pair<size_t, std::vector<double>>> round_ratios;
  for (size_t k : inflight) {
    if (k == 0) continue;
    // Alternating rounds, engine then threads, each of calls / rounds: the
    // two modes of one round see the machine in the same state, so the
    // ratio is the median of the rounds' ratios; a round the machine slowed
    // moves one ratio, not the row's.
    const size_t round_calls = std::max<size_t>(1, calls / rounds);
    std::vector<EngineRun> engine_runs;
    std::vector<ThreadsRun> threads_runs;
    std::vector<double> ratios;
    // Both clients connect their K sessions before the first round and keep
    // them throughout; the other mode's sessions stay idle meanwhile.
    std::optional<EngineMode> engine_mode;
    std::optional<ThreadsMode> threads_mode;
    if (mode != "threads") {
      engine_mode.emplace(**transport, address, port, k);
      if (!engine_mode->WarmUp()) rc = 1;
    }
    if (mode != "engine" && rc == 0) {
      threads_mode.emplace(**transport, address, port, k);
      if (!threads_mode->WarmUp()) rc = 1;
    }
    for (size_t r = 0; r < rounds && rc == 0; ++r) {
      EngineRun engine;
      if (engine_mode) engine = engine_mode->Round(naa->pid(), round_calls);
      ThreadsRun threads;
      if (threads_mode) threads = threads_mode->Round(naa->pid(), round_calls);
      if (!engine.ok || !threads.ok) rc = 1;
      engine_runs.push_back(engine);
      threads_runs.push_back(threads);
      if (engine.calls_per_s > 0 && threads.calls_per_s > 0) {
        ratios.push_back(engine.calls_per_s / threads.calls_per_s);
      }
    }
    if (rc != 0) break;
    const EngineRun engine = Combine(engine_runs);
    const ThreadsRun threads = Combine(threads_runs);
    // A mode not run (--mode) and the ratio without it print "-".
    const auto cell = [](bool measured, int width, int decimals, double value) {
      char text[32];
      if (measured) {
        std::snprintf(text, sizeof text, "%*.*f", width, decimals, value);
      } else {
        std::snprintf(text, sizeof text, "%*s", width, "-");
      }
      return std::string(text);
    };
    std::printf("%-9zu | %s | %s | %s | %d (+%d) vs %zu\n", k,
                cell(engine_mode.has_value(), 16, 0, engine.calls_per_s).c_str(),
                cell(threads_mode.has_value(), 16, 0, threads.calls_per_s).c_str(),
                cell(!ratios.empty(), 14, 2, ratios.empty() ? 0.0 : Median(ratios)).c_str(),
                engine.engine_threads, engine.helper_threads, k);
    std::fflush(stdout);
    round_ratios.push_back({k, ratios});
    cost_rows.push_back({k, engine.cpu, threads.cpu, engine.engine_run_us, engine.engine_wait_us,
                        engine.switches, threads.switches, engine.engine_slept,
                        engine.engine_preempted});
  }
  // CPU time per call (process CPU clocks; the engine thread's schedstat).
  PrintCostTable("CPU time per call, us (client and NAA processes; the client's engine thread on a "
                 "CPU and runnable waiting for one)",
                 "engine thread: on CPU, runnable", "%10.1f", cost_rows, [](const CostRow& r) {
                   return std::array{r.engine.client_us,  r.engine.naa_us,
                                     r.threads.client_us, r.threads.naa_us,
                                     r.engine_run_us,     r.engine_wait_us};
                 });
  // Context switches per call (/proc status; the client's from getrusage).
  PrintCostTable("Context switches per call (client and NAA processes; the client's engine thread "
                 "slept and was preempted)",
                 "engine thread: slept, preempted", "%10.2f", cost_rows, [](const CostRow& r) {
                   return std::array{r.engine_switches.client,  r.engine_switches.naa,
                                     r.threads_switches.client, r.threads_switches.naa,
                                     r.engine_slept,            r.engine_preempted};
                 });
  if (rounds > 1) {
    std::printf("\nEngine / threads per round, in the order run (the row's ratio is their median)\n");
    for (const auto& [k, ratios] : round_ratios) {
      std::printf("%-9zu |", k);
      for (double r : ratios) std::printf(" %.2f", r);
      std::printf("\n");
    }
  }
  naa->Stop();
  return rc;
}
