// NaaServer: the software-NAA side. Listens, accepts connections (a few
// engine threads drive all of them, docs/server.md), answers the MRSP (allocating the requested
// regions, checking limits and NAA addresses), and for every call runs the
// NaaHandler and writes the return region(s) back with the status immediate.
// Serves clients of both wire dialects.
#ifndef NAARPC_NAA_SERVER_H_
#define NAARPC_NAA_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "naarpc/deadline.h"
#include "naarpc/interceptor.h"
#include "naarpc/protocol.h"
#include "naarpc/stats_registry.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"

namespace naarpc {

// A parameter region as the NAA sees it during one call.
struct NaaRegion {
  std::span<std::byte> data;  // the NAA-side buffer (whole region)
  uint8_t flags = 0;          // flags from the MRSP request
  bool is_input = false;      // written by the host for this call
  bool is_output = false;     // written back to the host after the call
  // Bytes of `data` to write back (outputs); defaults to the whole region.
  uint64_t reply_length = 0;
};

// One stream of a call, as its kernel sees it (docs/protocol.md 15). Valid
// during Handle() only; one thread at a time. Errors (the host left, broke
// the protocol, the call was abandoned after a kernel timeout) are
// returned by every later operation; the kernel should then return.
class NaaStream {
 public:
  virtual ~NaaStream() = default;
  virtual bool is_input() const = 0;
  virtual size_t chunk_size() const = 0;
  virtual uint32_t window() const = 0;
  // Input: the next chunk, in place in the NAA's ring (valid until the next
  // Next() or the end of Handle()); an empty span at the end of the stream
  // and after it. Hands the previous chunk's slot back to the host. Waits
  // for the host's data.
  virtual Result<std::span<const std::byte>> Next() = 0;
  // Output: the slot for the next chunk (chunk_size() bytes), waiting for
  // the host to free one; then Commit sends its first `bytes`. Fewer than
  // chunk_size() bytes (0 included) end the stream.
  virtual Result<std::span<std::byte>> NextSlot() = 0;
  virtual Status Commit(size_t bytes) = 0;
  // Output, by copy: appends `data` (full chunks leave as they fill);
  // Close() sends the rest and ends the stream (Handle() returning ends it
  // too).
  virtual Status Write(std::span<const std::byte> data) = 0;
  virtual Status Close() = 0;
  // The stream has ended (input: its end was read; output: it was ended).
  virtual bool ended() const = 0;
};

struct NaaCall {
  uint8_t function_code = 0;
  Dialect dialect = Dialect::kSpec;
  uint32_t user_bits = 0;
  uint64_t call_index = 0;               // 0 for the first call on a connection
  std::span<NaaRegion> params;           // parameter regions, in MRSP order
  std::span<std::span<std::byte>> internal;  // internal regions, in MRSP order
  std::span<NaaStream* const> streams;       // in stream order (docs/protocol.md 15)
  // Why the call failed, set by a handler that returns a non-zero status;
  // the NAA logs it (the host sees only the status).
  std::string failure_detail;
  // For a handler whose kernel may keep views of `params`, `internal` or a
  // stream's chunks past Handle() (the Python module's): call it before
  // Handle() returns; the memory of this connection's regions and streams
  // then stays allocated (counted against the server's memory limits) until
  // the returned handle is gone, after the connection ended too. Later calls
  // of the connection reuse that memory. Set by NaaServer.
  std::function<std::shared_ptr<const void>()> retain_memory;
};

class NaaHandler {
 public:
  virtual ~NaaHandler() = default;
  // Runs the routine; returns the NAA status (0 success, 0x10..0x7f
  // application errors). Exceptions become kNaaStatusKernelFailed.
  // Called concurrently for different connections.
  virtual uint8_t Handle(NaaCall& call) = 0;
  // Kernel time limit for `function_code`; zero = none (the kernel then runs
  // on the engine thread that took the call, and Shutdown waits for it). On expiry the
  // host gets kNaaStatusKernelTimeout and the connection is closed: no later
  // call can land in memory the kernel still uses. The kernel runs on by
  // itself and keeps that memory until it returns; Shutdown waits for it
  // at most ServerOptions::shutdown_grace.
  // If the limit cannot be enforced (the watchdog's thread cannot start),
  // the kernel is not run and the host gets kNaaStatusKernelFailed.
  virtual std::chrono::milliseconds KernelTimeout(uint8_t function_code) const {
    (void)function_code;
    return std::chrono::milliseconds::zero();
  }
  // The routine's name for statistics, interceptors and logs (generated
  // services: "Service.Routine"); empty: "function_<code>".
  virtual std::string_view RoutineName(uint8_t function_code) const {
    (void)function_code;
    return {};
  }
};

struct ServerOptions {
  size_t max_regions = kDefaultNaaMaxRegions;  // MRSP error 0x03 beyond
  // Serves calls of this wire dialect only: a call in the other one gets
  // status 0x04 (a region layout it does not serve), and the log says why.
  // Default: both, each connection in the dialect its host's MRSP chose.
  std::optional<Dialect> dialect;
  // Size of the emulated NAA address space that requested NAA addresses
  // refer to: address >= size -> 0x02, address + size > size -> 0x01.
  uint64_t naa_memory_size = uint64_t{1} << 36;
  // Total bytes the NAA may allocate for one connection (-> 0x01).
  uint64_t max_bytes_per_connection = uint64_t{4} << 30;
  // Total bytes for all connections together (-> 0x01 for the request that
  // would pass it, unless idle sessions of a peer holding more bytes than
  // the requester's peer would can be reclaimed to make room); freed when a
  // connection ends. 0 = half the physical memory.
  uint64_t max_total_bytes = 0;
  // Connections served at once (no thread each: see engine_threads; each
  // costs descriptors and its MRSP buffer, docs/server.md). When all are
  // taken, a new
  // connection takes the least recently used idle session (between calls)
  // of the peer holding the most connections, if that peer holds more than
  // the newcomer's would; otherwise it is closed right after the transport
  // accepted it, and logged (docs/server.md, "What one peer can hold").
  size_t max_connections = 4096;
  // Threads that wait for events of every connection and run the calls
  // (0 = one per core). A thread about to run a call when no other waits
  // for events starts one more, up to max_threads: a kernel that blocks or
  // runs long holds up no other connection while fewer than max_threads
  // calls run at once; beyond that, calls wait for a thread. Threads that
  // stay with a busy connection between its calls count too; those beyond
  // engine_threads leave after 5 s without events (docs/server.md).
  size_t engine_threads = 0;
  size_t max_threads = 64;
  // Per peer (host address): connections (0 = max_connections), connections
  // still in their MRSP handshake (more are closed at once), and reserved
  // bytes (0 = max_total_bytes).
  size_t max_connections_per_peer = 0;
  size_t max_handshakes_per_peer = 128;
  uint64_t max_bytes_per_peer = 0;
  // A connection without a call for this long (after the MRSP or its last
  // call) is closed; zero = never. Hosts keep idle sessions open on purpose
  // (generated clients pool them), so it is off by default.
  std::chrono::milliseconds idle_timeout{0};
  // Log lines per second, across the server; more are counted and the count
  // is reported with the next line that passes. 0 = unlimited.
  size_t max_log_lines_per_second = 50;
  std::chrono::milliseconds mrsp_timeout{10'000};
  // A connection that sends no call for this long after the MRSP (or after
  // its last call) is logged once, naming its peer; zero = never.
  std::chrono::milliseconds idle_log_after{60'000};
  // How long Shutdown waits for kernels that overran their time limit (and
  // were left running) to return. Past it, Shutdown returns and logs how
  // many still run: the handler must then outlive them.
  std::chrono::milliseconds shutdown_grace{10'000};
  // Hosts split parameters larger than this into several wire regions; the
  // NAA joins them back into one parameter. Only tests lower it (matching
  // ClientOptions::max_region_size).
  uint64_t split_region_size = kMaxRegionSize;
  // Accepts a spec-dialect host's request for per-call memory windows
  // (MRSP capability 0x01, docs/protocol.md 3.6, 4.5): results are then
  // written with the window key each call's metadata carries. false: the
  // capability is not echoed (the host then refuses the session).
  bool memory_windows = true;
  // Receives one line per connection-level event worth knowing (a client
  // that broke the protocol, a disconnect mid-call, a refused call or
  // handshake; docs/server.md, "Log"). Default: naarpc's log
  // (naarpc/log.h, component "server"; stderr unless its sink is replaced).
  // Lines pass NAARPC_LOG's filter for "server" either way.
  std::function<void(std::string_view)> log;
  // Per-routine statistics (naarpc/call_stats.h): side "naa", peer the
  // host's address; nullptr: none kept.
  std::shared_ptr<StatsRegistry> stats = StatsRegistry::Default();
  // Interceptors of every call (naarpc/interceptor.h); nullptr or empty:
  // none, and no cost.
  std::shared_ptr<InterceptorChain> interceptors;
  // Serves `stats` in the Prometheus text format on
  // http://metrics_host:metrics_port/metrics (docs/operating.md); 0: an
  // ephemeral port (NaaServer::metrics_port()). Unset: no endpoint.
  std::optional<uint16_t> metrics_port;
  std::string metrics_host = "0.0.0.0";
};

class NaaServer {
 public:
  ~NaaServer();  // Shutdown()
  NaaServer(const NaaServer&) = delete;
  NaaServer& operator=(const NaaServer&) = delete;

  // REQUIRES: transport and handler outlive the server.
  static Result<std::unique_ptr<NaaServer>> Start(Transport& transport,
                                                  const std::string& host,
                                                  uint16_t port,
                                                  NaaHandler& handler,
                                                  const ServerOptions& options = {});

  uint16_t port() const;
  // The metrics endpoint's port; 0 if there is none.
  uint16_t metrics_port() const;
  // Connections served so far / currently open.
  uint64_t connections_accepted() const;
  size_t connections_open() const;
  // Waits until at most `n` connections are open; false if the deadline
  // passed first (draining, tests).
  bool WaitForOpenConnectionsAtMost(size_t n, Deadline deadline);

  // Stops accepting, disconnects every connection at once (a call in flight
  // fails at its host with kDisconnected), waits for running kernels (those
  // that overran their time limit at most ServerOptions::shutdown_grace),
  // joins all threads.
  void Shutdown();

 private:
  class Impl;
  explicit NaaServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace naarpc

#endif  // NAARPC_NAA_SERVER_H_
