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
  // channel (0 = always event-driven). A completion event costs the sleeper
  // an interrupt and a context switch (ibv_get_cq_event); a small call's
  // round trip on an HCA is a few microseconds, so a spin this long catches
  // it and the peer's turnaround with room to spare, and gives up on waits
  // (long transfers, kernels) that the event serves as well. Spins only
  // while work is outstanding on the connection (a posted receive counts,
  // so an idle connection spins this long per wait: 0.1% of a CPU for the
  // NAA's 200 ms stop checks); reads the clock once per 32 polls
  // (SpinBudget). Figures: bench/guest/README.md.
  std::chrono::microseconds poll_spin{200};
  // Hybrid polling for waits longer than the spin (wake_predictor.h): the
  // first sleep after a post is timed; once two such waits are known, the
  // next one sleeps until a margin (1/8 of the wait, 0.1-1 ms) before the
  // shortest of the last four, then spins through the expected completion
  // for at most 4 margins before sleeping again. It trades at least one
  // margin (>= 0.1 ms) of CPU per planned wait, up to 4 on a miss, for the
  // completion event's wake-up, so it pays only where a wake-up costs more
  // than that (a host whose CPUs are virtualised or emulated); an HCA's
  // completion event on bare metal wakes its waiter in microseconds. Off by
  // default; waits under 0.3 ms are never planned.
  bool predictive_wake = false;
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
  // work request with kRnrRetryExceeded. 18 rather than the CM's 0
  // (655 ms per retry: seconds before a broken peer is noticed) or 12: a
  // responder that runs dry is software, and 5.12 ms per retry lets a thread
  // that its OS descheduled for a few ms repost in time.
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
