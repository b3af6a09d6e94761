// A benchmark's peer (a software NAA, a ping-pong server) in a child
// process, so that it does not share the client's CPU time or locks: forked
// before the benchmark starts a thread or a transport, it sends the ports it
// listens on back through a pipe and is stopped (SIGTERM, so that a tool such
// as valgrind running it can write its report) and reaped when its handle
// goes, or dies with the benchmark (PR_SET_PDEATHSIG, SIGKILL).
#ifndef NAARPC_BENCH_NAA_CHILD_H_
#define NAARPC_BENCH_NAA_CHILD_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace naarpc::bench {

class NaaChild {
 public:
  // In the child: sends the ports to the parent (once, `port_count` of them).
  using ReportPorts = std::function<void(const std::vector<uint16_t>& ports)>;

  // Forks a child that runs `serve(report)`: `serve` starts listening, calls
  // `report` with its ports and serves on, without returning (its servers
  // live in its scope), until killed. A child that fails before it reports
  // prints why to stderr and exits (or returns): Start then reaps it and
  // returns nullopt.
  static std::optional<NaaChild> Start(size_t port_count,
                                       const std::function<void(const ReportPorts&)>& serve);

  NaaChild(NaaChild&& other) noexcept;
  NaaChild& operator=(NaaChild&& other) noexcept;
  NaaChild(const NaaChild&) = delete;
  NaaChild& operator=(const NaaChild&) = delete;
  ~NaaChild() { Stop(); }

  // The i-th reported port.
  uint16_t port(size_t i = 0) const { return ports_[i]; }
  // The child's process id (-1 once killed), e.g. to read /proc/PID.
  pid_t pid() const { return pid_; }
  // Stops the child now: SIGTERM, SIGKILL if it has not exited
  // kStopGrace later, then reaps it; later calls do nothing.
  void Stop();
  // Kills (SIGKILL) and reaps the child now, e.g. to measure a failover;
  // later calls do nothing.
  void Kill();

 private:
  static constexpr std::chrono::seconds kStopGrace{10};  // valgrind may take seconds to write

  void End(int signal);

  NaaChild(pid_t pid, std::vector<uint16_t> ports) : pid_(pid), ports_(std::move(ports)) {}

  pid_t pid_ = -1;
  std::vector<uint16_t> ports_;
};

}  // namespace naarpc::bench

#endif  // NAARPC_BENCH_NAA_CHILD_H_
