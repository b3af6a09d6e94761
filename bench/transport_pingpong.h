// The "raw transport" baseline of call_bench: the same Transport (emulated
// or verbs) without naarpc's engine. One round trip = one WRITE_WITH_IMM of
// N bytes to the peer, which answers with one WRITE_WITH_IMM of N bytes:
// the minimum a naarpc call puts on the wire, minus MRSP, state machine,
// layouts and statuses.
#ifndef NAARPC_BENCH_TRANSPORT_PINGPONG_H_
#define NAARPC_BENCH_TRANSPORT_PINGPONG_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "naarpc/status.h"
#include "runtime/engine/send_queue_budget.h"
#include "naarpc/transport.h"

namespace naarpc::bench {

// Serves ping-pong connections on `listener`, one after the other, until the
// process is killed. Each connection: the host's SEND {size, addr, rkey},
// the answer SEND {addr, rkey}, then echoes.
[[noreturn]] void ServeTransportPingPong(Listener& listener);

class TransportPingPong {
 public:
  // Connects and exchanges buffer addresses for `bytes`-byte round trips.
  static Result<std::unique_ptr<TransportPingPong>> Open(Transport& transport,
                                                         const std::string& host, uint16_t port,
                                                         size_t bytes);
  // One round trip; false (with a message on stderr) on failure.
  bool RoundTrip();

 private:
  TransportPingPong() = default;
  std::unique_ptr<Connection> conn_;
  std::vector<std::byte> buffer_;
  std::unique_ptr<MemoryRegion> mr_;
  SendQueueBudget budget_;
  uint64_t peer_addr_ = 0;
  uint32_t peer_rkey_ = 0;
  uint64_t next_id_ = 1;      // the oldest posted receive's id
  uint64_t last_posted_ = 0;  // the newest posted receive's id
};

}  // namespace naarpc::bench

#endif  // NAARPC_BENCH_TRANSPORT_PINGPONG_H_
