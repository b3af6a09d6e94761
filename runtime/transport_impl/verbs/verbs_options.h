// Options and wait statistics of the verbs transport (verbs_transport.h).
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_OPTIONS_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace naarpc {

struct VerbsOptions {
  // The RDMA device to use (e.g. "mlx5_0", "rxe0"); empty = the device the
  // address routes to. When set, listening on "any" binds to the device's
  // first IPv4 address, connections originate from it, and an address served
  // by another device is refused with a message naming both.
  std::string device;
  // The local address connections originate from (NAA_LOCAL_IP; an address
  // of an RDMA device); empty = the device's (above) or the route's.
  std::string source_address;
  // Busy-poll the CQ for up to this long before sleeping on the completion
  // channel (bounded spin for latency; 0 = always event-driven). Only spins
  // while work is outstanding on the connection (a posted receive counts, so
  // an idle connection spins this long per wait: 0.1% of a CPU for the NAA's
  // 200 ms stop checks); reads the clock once per 32 polls (SpinBudget), as
  // clock reads are slow in some VMs. 200 us: on Soft-RoCE 50 us let more
  // 64 B calls fall asleep (p99 ~180-240 us against ~130-170 us at 200 us).
  std::chrono::microseconds poll_spin{200};
  // Hybrid polling for waits longer than the spin (runtime/transport_impl/verbs/wake_predictor.h):
  // the first sleep after a post is timed; once two such waits are known, the
  // next one sleeps until a margin (1/8 of the wait, 0.1-1 ms) before the
  // shortest of the last four, then spins through the expected completion
  // for at most 4 margins before sleeping again. A stream of large calls then
  // mostly pays no wake-up (on Soft-RoCE in a TCG guest a sleeping side costs
  // 0.5-1 ms per 1 MiB call, and a fat tail) for about one margin of CPU per
  // wait, at most 4 ms. A peer that goes quiet costs one bounded spin. Waits
  // under 0.3 ms are left to poll_spin.
  bool predictive_wake = true;
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_inline_data = 64;
  // Connect retries when the server is not yet listening (REJECTED).
  int connect_retries = 20;
  std::chrono::milliseconds connect_retry_delay{100};
  // IB-encoded RNR NAK timer this side asks a sender to wait when no receive
  // is posted (12 = 0.64 ms, 18 = 5.12 ms, 31 = 491.52 ms, 0 = 655 ms);
  // applied after establishment. naarpc posts every receive before the peer
  // may send (the NAA its MRSP receive before accepting, Listener::
  // SetAcceptHook; data receives ahead of the calls), so an RNR NAK means a
  // peer that broke the protocol or a receive queue run dry; a sender
  // retries rnr_retry_count times (~31 ms with 18 and 6), then fails the
  // work request with kRnrRetryExceeded.
  uint8_t min_rnr_timer = 18;
  // How often this side's sends are retried after an RNR NAK: 0-6, or 7 for
  // without end. 6 is the NAAICE reference library's value.
  uint8_t rnr_retry_count = 6;
};

// How a verbs connection's waits ended (diagnostics, tests, benchmarks).
struct VerbsWaitStats {
  uint64_t sleeps = 0;          // waits that outlasted the spin and slept
  uint64_t planned = 0;         // of which predictive_wake planned an early wake
  uint64_t planned_hits = 0;    // completion caught by the planned spin
  uint64_t planned_early = 0;   // completion came before the planned wake
  uint64_t planned_misses = 0;  // planned spin ended with no completion
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_OPTIONS_H_
