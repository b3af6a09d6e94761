// An MPI job that offloads to NAAs: every rank computes the dot product of
// its block of two long vectors on the NAAs its NAA_SPEC names (a channel
// over all of them: VectorArith.Dot, declared idempotent, so a call that
// meets a failed NAA runs again on another), then MPI_Reduce adds the
// ranks' sums and rank 0 checks the total against the exact value.
//
//   mpirun -np 4 -x NAA_SPEC ./mpi_dot --transport emulated
//   srun --licenses=naa:2 -n 4 ./mpi_dot              (docs/slurm.md)
//
// Exit status 0 only if every round's total is exact.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <fstream>
#include <vector>

#include "naarpc/channel.h"
#include "naarpc/transport_factory.h"
#include "services/vector/vector.naa.h"

namespace {

using naarpc::services::vector::VectorArithChannelClient;
using naarpc::services::vector::VectorArithClient;

// Exact in double: small integers, sums far below 2^53.
double X(uint64_t i) { return static_cast<double>(i % 7); }
double Y(uint64_t i) { return static_cast<double>(1 + i % 5); }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  CLI::App app{"MPI dot product offloaded to the NAAs of NAA_SPEC (VectorArith.Dot)"};
  uint64_t elements = 1 << 20;
  uint64_t chunk = 65536;
  int rounds = 1;
  std::string transport_name = "auto", policy = "round-robin", pause_fifo;
  int pause_after = 0;
  int64_t attempt_ms = 0;
  app.add_option("--elements", elements, "elements per rank")->capture_default_str();
  app.add_option("--chunk", chunk, "elements per call (at most 65536)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{65536}))
      ->capture_default_str();
  app.add_option("--rounds", rounds, "times the whole product is computed")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--transport", transport_name, "emulated | verbs | auto")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}))
      ->capture_default_str();
  app.add_option("--policy", policy, "round-robin | least-outstanding")
      ->check(CLI::IsMember({"round-robin", "least-outstanding"}))
      ->capture_default_str();
  app.add_option("--attempt-timeout-ms", attempt_ms,
                 "bound of one attempt (0: the call's deadline)");
  app.add_option("--pause-after", pause_after,
                 "after this round, wait for a line on --pause-fifo (tests: kill an NAA then)");
  app.add_option("--pause-fifo", pause_fifo, "a named pipe rank 0 reads a line from");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    MPI_Finalize();
    return code;
  }

  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "mpi_dot: rank %d: %s\n", rank, what.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  };

  naarpc::ChannelOptions options;
  options.policy = policy == "round-robin" ? naarpc::BalancePolicy::kRoundRobin
                                           : naarpc::BalancePolicy::kLeastOutstanding;
  options.attempt_timeout = std::chrono::milliseconds(attempt_ms);
  const uint8_t codes[] = {VectorArithClient::kDotFunctionCode};
  auto channel = naarpc::Channel::FromEnvironment(codes, options);
  if (!channel.ok()) return fail(channel.status().ToString());
  if (rank == 0) {
    std::printf("mpi_dot: %d ranks; NAA_SPEC=%s\n", ranks, std::getenv("NAA_SPEC"));
    std::fflush(stdout);
  }
  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) return fail(transport.status().ToString());
  naarpc::codegen::StubOptions stub;
  stub.max_sessions_per_routine = 4;  // calls in flight per NAA
  VectorArithChannelClient client(**transport, *channel, stub);

  // This rank's block: global indices [rank * elements, (rank + 1) * elements).
  const uint64_t first = static_cast<uint64_t>(rank) * elements;
  std::vector<double> x(elements), y(elements);
  for (uint64_t i = 0; i < elements; ++i) x[i] = X(first + i), y[i] = Y(first + i);
  const uint64_t calls = (elements + chunk - 1) / chunk;

  int exit_code = 0;
  for (int round = 1; round <= rounds; ++round) {
    std::vector<double> partial(calls, 0.0);
    std::vector<std::future<naarpc::Status>> pending;
    for (uint64_t c = 0; c < calls; ++c) {
      const uint64_t off = c * chunk, n = std::min(chunk, elements - off);
      pending.push_back(client.DotAsync(std::span<const double>(x).subspan(off, n),
                                        std::span<const double>(y).subspan(off, n), &partial[c]));
    }
    double local = 0;
    for (uint64_t c = 0; c < calls; ++c) {
      naarpc::Status s = pending[c].get();
      if (!s.ok()) return fail("round " + std::to_string(round) + ", call " + std::to_string(c) +
                               ": " + s.ToString());
      local += partial[c];
    }
    double total = 0;
    MPI_Reduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double expected = 0;
      for (uint64_t i = 0; i < elements * static_cast<uint64_t>(ranks); ++i) expected += X(i) * Y(i);
      const bool ok = total == expected;
      std::printf("mpi_dot: round %d: %d ranks x %llu elements: dot = %.0f (expected %.0f) %s\n",
                  round, ranks, static_cast<unsigned long long>(elements), total, expected,
                  ok ? "OK" : "WRONG");
      std::fflush(stdout);
      if (!ok) exit_code = 1;
    }
    if (round == pause_after && !pause_fifo.empty()) {
      if (rank == 0) {
        std::printf("mpi_dot: paused after round %d: waiting for a line on %s\n", round,
                    pause_fifo.c_str());
        std::fflush(stdout);
        std::ifstream fifo(pause_fifo);  // blocks until a writer opens it
        std::string line;
        std::getline(fifo, line);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }

  // Each rank's view of the NAAs, gathered at rank 0: calls, failures.
  const std::vector<naarpc::NaaCounters> counters = (*channel)->Counters();
  std::string mine;
  for (const naarpc::NaaCounters& n : counters) {
    mine += "mpi_dot: rank " + std::to_string(rank) + ": NAA " + n.naa.ToString() + ": " +
            std::to_string(n.calls) + " call(s), " + std::to_string(n.failures) +
            " failure(s)" + (n.ejected ? ", ejected" : "") + "\n";
  }
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(ranks), offsets(ranks);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < ranks; ++r) offsets[r] = total, total += lens[r];
    all.resize(total);
  }
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  uint64_t failures = 0;
  for (const naarpc::NaaCounters& n : counters) failures += n.failures;
  uint64_t all_failures = 0;
  MPI_Reduce(&failures, &all_failures, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::fputs(all.c_str(), stdout);
    std::printf("mpi_dot: %llu failed attempt(s) retried on another NAA; %s\n",
                static_cast<unsigned long long>(all_failures),
                exit_code == 0 ? "every result exact" : "WRONG results");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return exit_code;
}
