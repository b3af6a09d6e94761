// `naarpc bench`'s raw baseline: the transport's own ping-pong
// (bench/transport_pingpong.h) served by a child process on this host.
#ifndef NAARPC_TOOLS_NAARPC_BENCH_RAW_PEER_H_
#define NAARPC_TOOLS_NAARPC_BENCH_RAW_PEER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "naarpc/status.h"

namespace naarpc::cli::bench_internal {

// The ping-pong peer of the raw baseline: a child process with one listener
// (and serving thread) per client slot, on `host` if this host has that
// address, else on this host's address towards it (e.g. the RDMA netdev's),
// else on loopback.
class RawPeer {
 public:
  // Forks the peer (before any transport exists in this process) and waits
  // until it listens; kUnavailable with its error otherwise.
  static Result<std::unique_ptr<RawPeer>> Start(const std::string& transport_name,
                                                const std::string& device, const std::string& host,
                                                int slots);
  // Kills (SIGKILL) and reaps the peer.
  ~RawPeer();

  const std::string& host() const { return host_; }
  uint16_t port(int slot) const { return ports_[slot]; }

 private:
  explicit RawPeer(pid_t pid) : pid_(pid) {}

  [[noreturn]] static void Child(const std::string& transport_name, const std::string& device,
                                 const std::string& host, int slots, int fd);

  const pid_t pid_;
  std::string host_;
  std::vector<uint16_t> ports_;
};

}  // namespace naarpc::cli::bench_internal

#endif  // NAARPC_TOOLS_NAARPC_BENCH_RAW_PEER_H_
