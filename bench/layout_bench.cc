// Strided parameters sent three ways, in one run (docs/protocol.md 16, seed
// 004): zero-copy (chained RDMA WRITEs whose gather lists name the layout's
// runs in the caller's registered memory), packed by the caller (gather into
// a registered buffer, then one write) and a contiguous parameter of the same
// bytes (one write): a column of a 4096 x 4096 f64 matrix, and faces of a
// 128^3 f64 block (x face: 16384 runs of 8 B; y face: 128 runs of 1 KiB).
// Transport level, one connection, the target driven by its own thread.
// Prints medians and ratios to the contiguous write; asserts nothing.
//   ./tools/bazel run -c opt //bench:layout_bench -- [--transport verbs] [--iterations N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/strided_view.h"
#include "naarpc/transport.h"
#include "naarpc/transport_factory.h"
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
  return 0;
}

}  // namespace
}  // namespace naarpc

int main(int argc, char** argv) { return naarpc::Main(argc, argv); }
