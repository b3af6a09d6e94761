// call_bench's peers, each in a child process (bench/naa_child.h) pinned to
// the server CPU: the naarpc NAA (for --stats-ab two, with statistics and
// interceptors off and on) and its baselines (a raw TCP echo server, the
// transport's own ping-pong).
#ifndef NAARPC_BENCH_CALL_BENCH_PEERS_H_
#define NAARPC_BENCH_CALL_BENCH_PEERS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/call_bench.h"
#include "bench/naa_child.h"
#include "naarpc/interceptor.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport.h"

namespace naarpc::bench::call_bench {

// Pins this thread to `cpu` (-1: leaves it).
void Pin(int cpu);

// The transport by name; verbs with --poll-spin-us / --predictive-wake when given.
Result<std::unique_ptr<Transport>> MakeTransport(const Options& o);

// One interceptor that does nothing (its hooks still run on every call).
std::shared_ptr<InterceptorChain> NoopChain();

// naarpc NAAs serving kIdentity, one per entry of `options` (port i: the
// i-th's).
std::optional<NaaChild> StartNaas(const Options& o, int cpu,
                                  const std::vector<ServerOptions>& options);
// The transport's ping-pong server (bench/transport_pingpong.h; one port).
std::optional<NaaChild> StartPingPong(const Options& o, int cpu);
// A TCP echo server on loopback (one port). Protocol: an 8-byte size, then
// ping-pongs of that size.
// Its sockets wait with TuneSocket's `wait_ms`.
std::optional<NaaChild> StartTcpEcho(int cpu, int wait_ms);

// The TCP client's side: whole buffers, TCP_NODELAY.
bool WriteAll(int fd, const char* p, size_t n);
bool ReadAll(int fd, char* p, size_t n);
// TCP_NODELAY; with `wait_ms` > 0, each blocking receive waits at most
// that long (SO_RCVTIMEO) and ReadAll then waits again. False (errno set)
// if a setsockopt failed.
bool TuneSocket(int fd, int wait_ms);

}  // namespace naarpc::bench::call_bench

#endif  // NAARPC_BENCH_CALL_BENCH_PEERS_H_
