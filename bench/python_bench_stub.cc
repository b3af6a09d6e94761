// The C++ half of bench/python_bench.py: times calls of PyBench.Echo64 and
// PyBench.Echo64M through their generated stub (the plain form: the inout
// span is copied into the registered buffer and back, as the Python call
// copies its array) against a running NAA, and prints one line per routine:
//   ROUTINE calls=N median_ns=M
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/python_bench.naa.h"
#include "naarpc/transport_factory.h"

namespace {

template <typename Fn>
long long MedianNs(int calls, Fn&& fn) {
  std::vector<long long> ns;
  ns.reserve(calls);
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!fn()) return -1;
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
  }
  std::nth_element(ns.begin(), ns.begin() + ns.size() / 2, ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", transport_name = "emulated", device;
  int port = 0, small_calls = 2000, big_calls = 10;
  CLI::App app{"PyBench calls through the generated C++ stub (bench/python_bench.py)."};
  app.add_option("--host", host);
  app.add_option("--port", port)->required();
  app.add_option("--transport", transport_name);
  app.add_option("--device", device);
  app.add_option("--small-calls", small_calls)->check(CLI::PositiveNumber);
  app.add_option("--big-calls", big_calls)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  auto transport = naarpc::NewTransport(transport_name, device);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  naarpc::testing::pybench::PyBenchClient c(**transport, host, static_cast<uint16_t>(port));
  naarpc::Status failed;
  std::vector<uint8_t> small(64, 7), big(64u << 20, 9);
  auto call_small = [&] {
    naarpc::Status st = c.Echo64(small);
    if (!st.ok()) failed = st;
    return st.ok();
  };
  auto call_big = [&] {
    naarpc::Status st = c.Echo64M(big);
    if (!st.ok()) failed = st;
    return st.ok();
  };
  // Warm-up: connect and MRSP outside the timed calls, as the Python side does.
  if (!call_small() || !call_big()) {
    std::fprintf(stderr, "python_bench_stub: %s\n", failed.ToString().c_str());
    return 1;
  }
  const long long s = MedianNs(small_calls, call_small);
  const long long b = MedianNs(big_calls, call_big);
  if (s < 0 || b < 0) {
    std::fprintf(stderr, "python_bench_stub: %s\n", failed.ToString().c_str());
    return 1;
  }
  std::printf("Echo64 calls=%d median_ns=%lld\n", small_calls, s);
  std::printf("Echo64M calls=%d median_ns=%lld\n", big_calls, b);
  return 0;
}
