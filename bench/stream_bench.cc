// stream_bench: a stream far larger than the NAA's memory (docs/protocol.md
// 15) against the two ways to move the same bytes without streams, measured
// in one run on one transport:
//
//   stream  one call streams --bytes through a ring of --window chunks of
//           --chunk bytes into a software NAA whose memory budget is
//           --naa-budget (ServerOptions::max_total_bytes); its kernel reads
//           every chunk in place (XOR of 8-byte words);
//   calls   plain calls with one --chunk-byte input each, the same kernel,
//           until the same bytes have gone (what a user without streams does);
//   raw     the transport alone: WRITE_WITH_IMMs of --chunk bytes into a
//           ring of --window slots, the receiver reposting receives, with at
//           most --window writes in flight (no engine, no credits, no
//           flow control beyond the sender's own completions).
//
// Every row does the same application work: the host copies one --chunk
// source buffer into each chunk (a user's data) and the receiving side
// reads every byte (XOR of 8-byte words), so the ratios measure what the
// engine adds. Host and NAA run in this process: the peak RSS
// line covers both sides.
//
//   bazel run -c opt //bench:stream_bench -- [--transport=emulated|verbs]
//       [--address=127.0.0.1] [--bytes=16G] [--chunk=4M] [--window=4]
//       [--naa-budget=64M]
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "naarpc/stream.h"
#include "naarpc/transport_factory.h"

namespace naarpc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kStreamCode = 1;
constexpr uint8_t kCallCode = 2;

uint64_t Xor(std::span<const std::byte> data) {
  uint64_t x = 0;
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, data.data() + i, 8);
    x ^= w;
  }
  for (; i < data.size(); ++i) x ^= static_cast<uint64_t>(data[i]) << (8 * (i % 8));
  return x;
}

// The NAA's kernels: code 1 reads stream 0, code 2 reads parameter 0; both
// write the XOR and the byte count to the output parameter.
class Kernels final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    uint64_t x = 0, bytes = 0;
    if (call.function_code == kStreamCode) {
      for (;;) {
        auto chunk = call.streams[0]->Next();
        if (!chunk.ok()) return kNaaStatusKernelFailed;
        if (chunk->empty()) break;
        x ^= Xor(*chunk);
        bytes += chunk->size();
      }
    } else {
      x = Xor(call.params[0].data);
      bytes = call.params[0].data.size();
    }
    std::memcpy(call.params[1].data.data(), &x, 8);
    std::memcpy(call.params[1].data.data() + 8, &bytes, 8);
    return kNaaStatusSuccess;
  }
};

class Source final : public StreamHandler {
 public:
  Source(const std::vector<std::byte>& chunk, uint64_t total) : chunk_(chunk), left_(total) {}
  Result<size_t> Produce(size_t, std::span<std::byte> slot) override {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(slot.size(), left_));
    std::memcpy(slot.data(), chunk_.data(), n);
    left_ -= n;
    return n;
  }
  Status Consume(size_t, std::span<const std::byte>, bool) override {
    return InvalidArgumentError("no output streams here");
  }

 private:
  const std::vector<std::byte>& chunk_;
  uint64_t left_;
};

uint64_t ParseSize(const std::string& s) {
  size_t pos = 0;
  const double v = std::stod(s, &pos);
  uint64_t mult = 1;
  if (pos < s.size()) {
    switch (s[pos]) {
      case 'K': case 'k': mult = uint64_t{1} << 10; break;
      case 'M': case 'm': mult = uint64_t{1} << 20; break;
      case 'G': case 'g': mult = uint64_t{1} << 30; break;
      default: throw CLI::ValidationError("size", "unknown unit in " + s);
    }
  }
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}

struct Row {
  const char* name;
  uint64_t bytes = 0;
  double seconds = 0;
  double gib_per_s() const { return static_cast<double>(bytes) / seconds / double(1u << 30); }
};

// The transport alone (see the file comment).
Result<Row> RawStream(Transport& t, const std::string& address, const std::vector<std::byte>& src,
                      uint64_t total, uint32_t chunk, uint32_t window) {
  NAARPC_ASSIGN_OR_RETURN(auto listener, t.Listen(address, 0));
  std::unique_ptr<Connection> server;
  Status accepted;
  std::thread acceptor([&] {
    auto s = listener->Accept(Deadline::After(std::chrono::seconds(30)));
    if (s.ok()) server = std::move(*s);
    accepted = s.status();
  });
  auto client = t.Connect(address, listener->port(), Deadline::After(std::chrono::seconds(30)));
  acceptor.join();
  NAARPC_RETURN_IF_ERROR(client.status());
  NAARPC_RETURN_IF_ERROR(accepted);
  std::vector<std::byte> ring(uint64_t{chunk} * window), src_ring(ring.size());
  NAARPC_ASSIGN_OR_RETURN(auto ring_mr, server->RegisterMemory(ring.data(), ring.size(),
                                                               kAccessLocalWrite | kAccessRemoteWrite));
  NAARPC_ASSIGN_OR_RETURN(auto src_mr,
                          (*client)->RegisterMemory(src_ring.data(), src_ring.size(), 0));
  const uint64_t chunks = (total + chunk - 1) / chunk;
  for (uint32_t i = 0; i < window; ++i) {
    NAARPC_RETURN_IF_ERROR(server->PostRecv(i, {ring_mr->remote_addr(), 0, ring_mr->lkey()}));
  }
  std::atomic<bool> receiver_failed{false}, receiver_done{false};
  uint64_t sink = 0;
  std::thread receiver([&] {
    uint64_t got = 0;
    Completion c[16];
    while (got < chunks) {
      auto n = server->PollCompletions(c, Deadline::After(std::chrono::seconds(30)));
      if (!n.ok() || *n == 0) {
        receiver_failed = true;
        return;
      }
      for (size_t i = 0; i < *n; ++i) {
        const uint64_t slot = (got % window) * chunk;
        sink ^= Xor(std::span<const std::byte>(ring.data() + slot, c[i].byte_len));
        ++got;
        if (!server->PostRecv(got, {ring_mr->remote_addr(), 0, ring_mr->lkey()}).ok()) {
          receiver_failed = true;
          return;
        }
      }
    }
    receiver_done = true;
  });
  // The receiver ends by itself once every chunk is in, or on an error; on
  // an early return here the connections' teardown ends it.
  struct Join {
    std::thread& t;
    Connection& server;
    ~Join() {
      if (t.joinable()) {
        server.Disconnect().IgnoreError();
        t.join();
      }
    }
  } join{receiver, *server};
  const auto start = Clock::now();
  uint64_t posted = 0, done = 0;
  Completion c[16];
  // Until every chunk is posted; the receiver's count ends the measurement
  // (the last acknowledgements need a target that polls, which it stops
  // doing once it has everything).
  while (posted < chunks && !receiver_failed) {
    while (posted < chunks && posted - done < window) {
      const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(chunk, total - posted * chunk));
      const uint64_t slot = (posted % window) * chunk;
      std::memcpy(src_ring.data() + slot, src.data(), len);
      SendRequest w;
      w.wr_id = posted;
      w.opcode = WorkOpcode::kRdmaWriteWithImm;
      w.local = {src_mr->remote_addr() + slot, len, src_mr->lkey()};
      w.remote_addr = ring_mr->remote_addr() + (posted % window) * chunk;
      w.rkey = ring_mr->rkey();
      w.imm_data = len;
      NAARPC_RETURN_IF_ERROR((*client)->PostSend({&w, 1}));
      ++posted;
    }
    if (posted == chunks) break;
    auto n = (*client)->PollCompletions(c, Deadline::After(std::chrono::seconds(30)));
    NAARPC_RETURN_IF_ERROR(n.status());
    if (*n == 0) return DeadlineExceededError("raw stream: no completion in 30 s");
    done += *n;
  }
  // The emulated transport sends queued bytes only while the sender polls.
  while (!receiver_done && !receiver_failed) {
    NAARPC_RETURN_IF_ERROR(
        (*client)->PollCompletions(c, Deadline::After(std::chrono::milliseconds(10))).status());
  }
  receiver.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (receiver_failed) return TransportError("raw stream: the receiver failed");
  if (sink == 1) std::printf(" ");  // keeps the reads
  return Row{"raw", total, seconds};
}

int Main(int argc, char** argv) {
  CLI::App app{"naarpc stream benchmark: one streaming call vs. plain calls vs. the transport"};
  std::string transport_name = "emulated", address = "127.0.0.1";
  std::string bytes_s = "16G", chunk_s = "4M", budget_s = "64M";
  uint32_t window = 4;
  app.add_option("--transport", transport_name, "emulated or verbs")
      ->check(CLI::IsMember({"emulated", "verbs"}));
  app.add_option("--address", address, "address the NAA listens on");
  app.add_option("--bytes", bytes_s, "bytes to stream (K, M, G suffixes)");
  app.add_option("--chunk", chunk_s, "chunk size (at most 8M)");
  app.add_option("--window", window, "chunks in flight")->check(CLI::Range(1, 62));
  app.add_option("--naa-budget", budget_s, "the NAA's memory budget (max_total_bytes)");
  CLI11_PARSE(app, argc, argv);
  const uint64_t total = ParseSize(bytes_s), budget = ParseSize(budget_s);
  const uint32_t chunk = static_cast<uint32_t>(ParseSize(chunk_s));

  auto transport = NewTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "stream_bench: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  Kernels kernels;
  ServerOptions so;
  so.max_total_bytes = budget;
  so.max_bytes_per_connection = budget;
  auto server = NaaServer::Start(**transport, address, 0, kernels, so);
  if (!server.ok()) {
    std::fprintf(stderr, "stream_bench: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::vector<std::byte> src(chunk);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(static_cast<uint8_t>(i * 131));
  auto fail = [](const char* what, const Status& s) {
    std::fprintf(stderr, "stream_bench: %s: %s\n", what, s.ToString().c_str());
    return 1;
  };

  // Streaming.
  std::vector<RegionSpec> layout(3);
  layout[0] = {.name = "unused", .direction = Direction::kIn, .size = 8};
  layout[1] = {.name = "result", .direction = Direction::kOut, .size = 16};
  layout[2].name = "data";
  layout[2].direction = Direction::kIn;
  layout[2].stream = {.chunk_size = chunk, .window = window};
  auto session = ClientSession::Open(**transport, address, (*server)->port(), layout);
  if (!session.ok()) return fail("opening the streaming session", session.status());
  Source source(src, total);
  CallOptions opts;
  opts.streams = &source;
  auto start = Clock::now();
  Status st = (*session)->Call(kStreamCode, Deadline::Infinite(), opts);
  const Row stream{"stream", total, std::chrono::duration<double>(Clock::now() - start).count()};
  if (!st.ok()) return fail("streaming", st);
  uint64_t got = 0;
  std::memcpy(&got, (*session)->buffer(1).data() + 8, 8);
  if (got != total) return fail("streaming", InternalError("the kernel saw a different byte count"));
  (*session)->Close().IgnoreError();
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;

  // Plain calls of one chunk each.
  std::vector<RegionSpec> plain(2);
  plain[0] = {.name = "data", .direction = Direction::kIn, .size = chunk};
  plain[1] = {.name = "result", .direction = Direction::kOut, .size = 16};
  auto calls_session = ClientSession::Open(**transport, address, (*server)->port(), plain);
  if (!calls_session.ok()) return fail("opening the plain session", calls_session.status());
  start = Clock::now();
  for (uint64_t sent = 0; sent < total; sent += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, total - sent);
    std::memcpy((*calls_session)->buffer(0).data(), src.data(), n);
    const uint64_t lengths[2] = {n, 0};
    CallOptions co;
    co.send_lengths = lengths;
    st = (*calls_session)->Call(kCallCode, Deadline::Infinite(), co);
    if (!st.ok()) return fail("plain call", st);
  }
  const Row calls{"calls", total, std::chrono::duration<double>(Clock::now() - start).count()};
  (*calls_session)->Close().IgnoreError();

  auto raw = RawStream(**transport, address, src, total, chunk, window);
  if (!raw.ok()) return fail("raw stream", raw.status());
  (*server)->Shutdown();

  std::printf("stream_bench: %s transport, %.2f GiB in chunks of %u bytes, window %u, NAA budget "
              "%.0f MiB\n\n",
              transport_name.c_str(), double(total) / double(1u << 30), chunk, window,
              double(budget) / double(1u << 20));
  std::printf("| row | seconds | GiB/s |\n|---|---|---|\n");
  for (const Row& r : {stream, calls, *raw}) {
    std::printf("| %s | %.2f | %.3f |\n", r.name, r.seconds, r.gib_per_s());
  }
  std::printf("\nstream / calls: %.2fx (target >= 0.9)\n", stream.gib_per_s() / calls.gib_per_s());
  std::printf("stream / raw:   %.2fx (target >= 0.8)\n", stream.gib_per_s() / raw->gib_per_s());
  std::printf("peak RSS of host + NAA after the stream: %.1f MiB (rings: 2 x %.1f MiB)\n",
              peak_rss_mib, double(uint64_t{chunk} * window) / double(1u << 20));
  return 0;
}

}  // namespace
}  // namespace naarpc

int main(int argc, char** argv) { return naarpc::Main(argc, argv); }
