// Strided parameters sent three ways, in one run (docs/protocol.md 16, seed
// 004): zero-copy (chained RDMA WRITEs whose gather lists name the layout's
// runs in the caller's registered memory), packed by the caller (gather into
// a registered buffer, then one write) and a contiguous parameter of the same
// bytes (one write): a column of a 4096 x 4096 f64 matrix, and faces of a
// 128^3 f64 block (x face: 16384 runs of 8 B; y face: 128 runs of 1 KiB).
// Transport level, one connection, the target driven by its own thread.
// Then the same through the typed stubs (ClientSession::StageGatherInput:
// zero-copy from registered caller memory vs packed by the stub vs a
// contiguous parameter) and a run-size sweep for the zero-copy threshold.
// Prints medians and ratios to the contiguous write; asserts nothing.
//   ./tools/bazel run -c opt //bench:layout_bench -- [--transport verbs] [--iterations N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/layout_bench.naa.h"
#include "naarpc/naa_server.h"
#include "naarpc/strided_view.h"
#include "naarpc/transport.h"
#include "naarpc/transport_factory.h"
#include "naarpc/user_memory.h"
#include "runtime/engine/gather_writes.h"

namespace naarpc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kGuard = std::chrono::seconds(60);  // hang guard only

struct Link {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> sender, target;
  std::thread driver;
  std::atomic<bool> stop{false};
  ~Link() {
    stop.store(true);
    if (driver.joinable()) driver.join();
  }
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "layout_bench: %s\n", what.c_str());
  std::exit(1);
}

void Connect(Link& l, const std::string& transport_name, const std::string& address) {
  auto t = NewTransport(transport_name);
  if (!t.ok()) Die(t.status().ToString());
  l.transport = std::move(*t);
  auto lis = l.transport->Listen(address, 0);
  if (!lis.ok()) Die(lis.status().ToString());
  l.listener = std::move(*lis);
  std::optional<Result<std::unique_ptr<Connection>>> acc;
  std::thread th([&] { acc.emplace(l.listener->Accept(Deadline::After(kGuard))); });
  auto c = l.transport->Connect(address, l.listener->port(), Deadline::After(kGuard));
  th.join();
  if (!c.ok() || !acc->ok()) Die("connect failed");
  l.sender = std::move(*c);
  l.target = std::move(**acc);
}

void StartDriver(Link& l) {
  l.driver = std::thread([&l] {
    Completion c[8];
    while (!l.stop.load()) {
      if (!l.target->PollCompletions(c, Deadline::After(std::chrono::milliseconds(20))).ok()) return;
    }
  });
}

void WaitOne(Connection& c, uint64_t wr_id) {
  Completion done[1];
  auto n = c.PollCompletions(done, Deadline::After(kGuard));
  if (!n.ok() || *n != 1 || done[0].status != CompletionStatus::kSuccess || done[0].wr_id != wr_id)
    Die("write failed: " + (n.ok() ? std::string(CompletionStatusName(done[0].status))
                                   : n.status().ToString()));
}

// Posts requests in batches of `batch` (each batch's last is signaled).
void PostBatched(Connection& c, std::span<const SendRequest> reqs, size_t batch) {
  for (size_t i = 0; i < reqs.size(); i += batch) {
    const size_t n = std::min(batch, reqs.size() - i);
    Status st = c.PostSend(reqs.subspan(i, n));
    if (!st.ok()) Die(st.ToString());
    WaitOne(c, reqs[i + n - 1].wr_id);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  const char* name;
  uint64_t runs, bytes;
  double zero_copy_us, packed_us, contiguous_us;
  size_t requests;
};

Row Measure(Link& l, const char* name, const Layout& layout, std::vector<double>& memory,
            MemoryRegion& mem_mr, MemoryRegion& staging_mr, std::vector<double>& staging,
            MemoryRegion& target_mr, int iterations) {
  const uint32_t max_sge = l.sender->max_send_sge();
  const uint32_t depth = std::max<uint32_t>(l.sender->send_queue_depth(), 2);
  const size_t batch = std::min<size_t>(32, depth / 2);
  GatherWrites plan;  // the stencil: planned once, applied every call
  const uint64_t base = reinterpret_cast<uintptr_t>(memory.data());
  Status st = PlanGatherWrites(layout, sizeof(double), {&base, 1}, mem_mr.lkey(),
                               {.remote_addr = target_mr.remote_addr(), .rkey = target_mr.rkey(),
                                .first_wr_id = 1, .signal_every = static_cast<uint32_t>(batch)},
                               max_sge, &plan);
  if (!st.ok()) Die(st.ToString());
  const uint64_t bytes = plan.bytes;
  SendRequest one;
  one.wr_id = 1 << 20;
  one.opcode = WorkOpcode::kRdmaWrite;
  one.remote_addr = target_mr.remote_addr();
  one.rkey = target_mr.rkey();
  one.local = {reinterpret_cast<uintptr_t>(staging.data()), static_cast<uint32_t>(bytes),
               staging_mr.lkey()};
  StridedView<const double> view(std::span<const double>(memory), layout);
  std::vector<double> zc, packed, contiguous;
  for (int i = 0; i < iterations; ++i) {  // interleaved: the machine's noise hits all three
    auto t0 = Clock::now();
    PostBatched(*l.sender, plan.requests, batch);
    auto t1 = Clock::now();
    view.GatherTo(std::span<double>(staging.data(), bytes / sizeof(double)));
    PostBatched(*l.sender, {&one, 1}, 1);
    auto t2 = Clock::now();
    PostBatched(*l.sender, {&one, 1}, 1);
    auto t3 = Clock::now();
    zc.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    packed.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    contiguous.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
  }
  return {name, plan.sges.size(), bytes, Median(zc), Median(packed), Median(contiguous),
          plan.requests.size()};
}

// ---- Through the typed stubs: a software NAA, three clients.
namespace lb = ::naarpc::testing::layout_bench;

class AckKernels final : public lb::LayoutBenchService {
  static lb::LayoutBenchError Ack(std::span<const double> in, double& ack) {
    ack = in[in.size() - 1];
    return lb::LayoutBenchError::kOk;
  }
  lb::LayoutBenchError Column(const NaaCall&, std::span<const double> col, double& ack) override {
    return Ack(col, ack);
  }
  lb::LayoutBenchError ColumnContiguous(const NaaCall&, std::span<const double> col,
                                        double& ack) override {
    return Ack(col, ack);
  }
  lb::LayoutBenchError Halo(const NaaCall&, std::span<const double> face, double& ack) override {
    return Ack(face, ack);
  }
  lb::LayoutBenchError HaloContiguous(const NaaCall&, std::span<const double> face,
                                      double& ack) override {
    return Ack(face, ack);
  }
  lb::LayoutBenchError Blocks(const NaaCall&, std::span<const double> blocks, double& ack) override {
    return Ack(blocks, ack);
  }
  lb::LayoutBenchError BlocksContiguous(const NaaCall&, std::span<const double> blocks,
                                        double& ack) override {
    return Ack(blocks, ack);
  }
};

struct StubRow {
  const char* name;
  uint64_t runs, bytes;
  double zero_copy_us, packed_us, contiguous_us;
  bool zero_copy_taken;  // the registry counted the zero-copy sends
};

double Since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

void Check(const Status& s) {
  if (!s.ok()) Die(s.ToString());
}

void MeasureStubs(const std::string& transport_name, const std::string& address, int iterations,
                  std::vector<StubRow>& rows) {
  auto t = NewTransport(transport_name);
  if (!t.ok()) Die(t.status().ToString());
  AckKernels kernels;
  auto server = NaaServer::Start(**t, address, 0, kernels);
  if (!server.ok()) Die(server.status().ToString());
  auto registry = std::make_shared<UserMemoryRegistry>();
  codegen::StubOptions zc_options, packed_options;
  zc_options.session.user_memory = registry;
  zc_options.session.zero_copy_min_run_bytes = 0;  // every layout the send queue takes
  zc_options.max_sessions_per_routine = packed_options.max_sessions_per_routine = 1;
  lb::LayoutBenchClient zc(**t, address, (*server)->port(), zc_options);
  lb::LayoutBenchClient packed(**t, address, (*server)->port(), packed_options);

  constexpr size_t kN = 4096, kB = 128;
  std::vector<double> matrix(kN * kN, 1.0), block(kB * kB * kB, 2.0), blocks(16 * 16384, 3.0),
      contiguous(131072, 4.0);
  auto m_reg = registry->Register(std::span<double>(matrix));
  auto b_reg = registry->Register(std::span<double>(block));
  auto s_reg = registry->Register(std::span<double>(blocks));
  if (!m_reg.ok() || !b_reg.ok() || !s_reg.ok()) Die("registering user memory");
  const Layout column = Layout::Strided(kN, 1, kN, 7);
  const Layout face = Layout::SubArray({kB, kB, kB}, {kB, 1, kB}, {0, kB - 1, 0});
  const Layout strided = Layout::Strided(16, 8192, 16384);
  auto view = [](std::vector<double>& m, const Layout& l) {
    return StridedView<const double>(std::span<const double>(m), l);
  };
  const auto contig = [&](size_t n) { return std::span<const double>(contiguous).first(n); };
  double ack = 0;
  struct Case {
    const char* name;
    const Layout* layout;
    std::function<Status(lb::LayoutBenchClient&)> strided_call;
    std::function<Status()> contiguous_call;
  };
  const Case cases[] = {
      {"column of 4096x4096 f64", &column,
       [&](lb::LayoutBenchClient& c) { return c.Column(view(matrix, column), &ack); },
       [&] { return packed.ColumnContiguous(contig(4096), &ack); }},
      {"128^3 f64 block, y face (halo)", &face,
       [&](lb::LayoutBenchClient& c) { return c.Halo(view(block, face), &ack); },
       [&] { return packed.HaloContiguous(contig(16384), &ack); }},
      {"strided 16 x 64 KiB blocks", &strided,
       [&](lb::LayoutBenchClient& c) { return c.Blocks(view(blocks, strided), &ack); },
       [&] { return packed.BlocksContiguous(contig(131072), &ack); }},
  };
  for (const Case& c : cases) {
    // Warm-up: connections, MRSP, the registrations of the user memory.
    Check(c.strided_call(zc));
    Check(c.strided_call(packed));
    Check(c.contiguous_call());
    const uint64_t zc_before = registry->stats().zero_copy_inputs;
    std::vector<double> z, p, q;
    for (int i = 0; i < iterations; ++i) {  // interleaved
      auto t0 = Clock::now();
      Check(c.strided_call(zc));
      z.push_back(Since(t0));
      t0 = Clock::now();
      Check(c.strided_call(packed));
      p.push_back(Since(t0));
      t0 = Clock::now();
      Check(c.contiguous_call());
      q.push_back(Since(t0));
    }
    const bool taken = registry->stats().zero_copy_inputs - zc_before == uint64_t(iterations);
    rows.push_back({c.name, LayoutRuns(*c.layout), LayoutElements(*c.layout) * 8, Median(z),
                    Median(p), Median(q), taken});
  }
}

int Main(int argc, char** argv) {
  std::string transport = "emulated", address = "127.0.0.1";
  int iterations = 30;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--transport" && i + 1 < argc) transport = argv[++i];
    else if (a == "--address" && i + 1 < argc) address = argv[++i];
    else if (a == "--iterations" && i + 1 < argc) iterations = std::atoi(argv[++i]);
    else Die("usage: layout_bench [--transport emulated|verbs] [--address A] [--iterations N]");
  }
  if (const char* a = std::getenv("NAARPC_TEST_ADDRESS"); a && *a && transport == "verbs") address = a;
  Link l;
  Connect(l, transport, address);
  constexpr size_t kN = 4096, kB = 128;
  std::vector<double> matrix(kN * kN, 1.0), block(kB * kB * kB, 2.0), staging(kN * 8),
      target(kN * 8);
  auto mr_matrix = l.sender->RegisterMemory(matrix.data(), matrix.size() * 8, kAccessLocalWrite);
  auto mr_block = l.sender->RegisterMemory(block.data(), block.size() * 8, kAccessLocalWrite);
  auto mr_staging = l.sender->RegisterMemory(staging.data(), staging.size() * 8, kAccessLocalWrite);
  auto mr_target = l.target->RegisterMemory(target.data(), target.size() * 8,
                                            kAccessLocalWrite | kAccessRemoteWrite);
  if (!mr_matrix.ok() || !mr_block.ok() || !mr_staging.ok() || !mr_target.ok()) Die("register");
  StartDriver(l);
  std::vector<Row> rows;
  rows.push_back(Measure(l, "column of 4096x4096 f64", Layout::Strided(kN, 1, kN, 7), matrix,
                         **mr_matrix, **mr_staging, staging, **mr_target, iterations));
  rows.push_back(Measure(l, "128^3 f64 block, x face",
                         Layout::SubArray({kB, kB, kB}, {kB, kB, 1}, {0, 0, kB - 1}), block,
                         **mr_block, **mr_staging, staging, **mr_target, iterations));
  rows.push_back(Measure(l, "128^3 f64 block, y face",
                         Layout::SubArray({kB, kB, kB}, {kB, 1, kB}, {0, kB - 1, 0}), block,
                         **mr_block, **mr_staging, staging, **mr_target, iterations));
  // Run-size sweep (the threshold of ClientOptions::zero_copy_min_run_bytes):
  // 256 KiB in runs of 256 B .. 64 KiB, every other run of the matrix.
  for (uint64_t run : {256u, 1024u, 4096u, 16384u, 65536u}) {
    static std::vector<std::string> names;
    names.push_back("strided, runs of " + std::to_string(run) + " B");
    const uint64_t block_elems = run / 8, count = (256 * 1024) / run;
    rows.push_back(Measure(l, names.back().c_str(), Layout::Strided(count, block_elems, 2 * block_elems),
                           matrix, **mr_matrix, **mr_staging, staging, **mr_target, iterations));
  }
  std::printf("layout_bench: %s transport, max_send_sge %u, send queue depth %u, median of %d\n",
              transport.c_str(), l.sender->max_send_sge(), l.sender->send_queue_depth(),
              iterations);
  std::printf("| parameter | runs | bytes | WRs | zero-copy us | packed by caller us | contiguous us "
              "| zero-copy / contiguous | packed / contiguous |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %llu | %llu | %zu | %.1f | %.1f | %.1f | %.2f | %.2f |\n", r.name,
                static_cast<unsigned long long>(r.runs), static_cast<unsigned long long>(r.bytes),
                r.requests, r.zero_copy_us, r.packed_us, r.contiguous_us,
                r.zero_copy_us / r.contiguous_us, r.packed_us / r.contiguous_us);
  }
  std::vector<StubRow> stub_rows;
  MeasureStubs(transport, address, iterations, stub_rows);
  std::printf("\nlayout_bench: typed stubs, %s transport, one session per client, median of %d\n",
              transport.c_str(), iterations);
  std::printf("| parameter | runs | bytes | zero-copy us | packed by the stub us | contiguous us "
              "| zero-copy / contiguous | packed / contiguous |\n|---|---|---|---|---|---|---|---|\n");
  for (const StubRow& r : stub_rows) {
    std::printf("| %s | %llu | %llu | %.1f%s | %.1f | %.1f | %.2f | %.2f |\n", r.name,
                static_cast<unsigned long long>(r.runs), static_cast<unsigned long long>(r.bytes),
                r.zero_copy_us, r.zero_copy_taken ? "" : " (packed: too many WRs)", r.packed_us,
                r.contiguous_us, r.zero_copy_us / r.contiguous_us, r.packed_us / r.contiguous_us);
  }
  return 0;
}

}  // namespace
}  // namespace naarpc

int main(int argc, char** argv) { return naarpc::Main(argc, argv); }
