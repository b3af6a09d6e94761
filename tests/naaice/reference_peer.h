// Test peers that behave like the NAAICE reference library's host and
// software NAA, written from its documented behaviour (shared/spec/README.md),
// not from naarpc's engine. They use only the Transport interface, so they
// run on both transports (on verbs in the Soft-RoCE guest).
//
// What they do as the reference does:
//  * one CQ per connection, armed solicited-only before anything is posted,
//    and never polled without an event: wait for the event, re-arm, drain.
//    A message that lacks the solicited-event bit is never seen until some
//    later solicited event, so a peer that forgets the bit stalls here, as
//    it does against the real library;
//  * every send work request signaled (sq_sig_all = 1); the solicited bit on
//    every MRSP SEND and on the final WRITE_WITH_IMM of a call and a reply;
//  * host: the MRSP receive posted before its request; exactly one
//    zero-length receive per call, posted before its writes; inputs are the
//    regions flagged INPUT (single-send ones on the first call only); the
//    request immediate fncode | 0x80 | user << 8; completions dispatched
//    strictly by (state, opcode) (a reply polled before the completion of
//    the host's own last write fails the call); the status read from bits
//    8..15 (ntohl(imm) >> 8, into a uint8_t);
//  * NAA: internal regions allocated, not advertised; one receive per call,
//    the next one posted before the reply; every region flagged OUTPUT
//    written back whole, in index order, the status the immediate's value;
//    an unknown function code is never answered; stock kernels 1 (+1 to
//    every byte of every region), 2 (+2), 3 (nothing).
// Stricter than the reference where that catches more: its NAA arms
// solicited-only on every wait (the library only until its first event).
#ifndef NAARPC_TESTS_NAAICE_REFERENCE_PEER_H_
#define NAARPC_TESTS_NAAICE_REFERENCE_PEER_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"

namespace naarpc::naaice {

// One region of a reference host's layout: flags as on the wire (0x04
// input, 0x08 output, 0x02 single-send, 0x01 internal).
struct RefRegion {
  uint64_t size = 0;
  uint8_t flags = 0;
  uint64_t naa_address = 0;  // internal regions: requested NAA address
};

// Waits as the reference does: woken only by an event of a CQ armed
// solicited-only; re-arms, then drains every completion.
class SolicitedWaiter {
 public:
  // Arms the CQ. REQUIRES: before anything is posted on `conn`.
  static Result<SolicitedWaiter> Arm(Connection& conn);
  // The completions queued when the next event comes; kDeadlineExceeded
  // naming `waiting_for` if none comes before `deadline`.
  Result<std::vector<Completion>> Next(Deadline deadline, const std::string& waiting_for);

 private:
  explicit SolicitedWaiter(Connection& conn) : conn_(&conn) {}
  Connection* conn_;
};

class ReferenceHost {
 public:
  ~ReferenceHost();
  // Connects and runs the MRSP. Internal regions must come last.
  // `strict_order`: fail a call whose reply is polled before the completion
  // of the host's own last write, as the reference host does. Soft-RoCE
  // (rxe) can produce that order by itself: its responder delivers a
  // message to the NAA before sending the ACK, so a fast NAA's reply can
  // overtake the ACK; with strict_order false such a call is counted in
  // reordered_replies() instead (the data and status are still checked).
  static Result<std::unique_ptr<ReferenceHost>> Connect(Transport& transport,
                                                        const std::string& host, uint16_t port,
                                                        std::vector<RefRegion> regions,
                                                        Deadline deadline,
                                                        bool strict_order = true);
  // One call; the NAA's status as the reference host reads it (bits 8..15).
  Result<uint8_t> Call(uint8_t function_code, uint32_t user_bits, Deadline deadline);
  // The host buffer of region `index` (empty for internal regions).
  std::span<std::byte> buffer(size_t index);
  uint64_t calls() const { return calls_; }
  uint64_t reordered_replies() const { return reordered_; }
  void Close();

 private:
  struct Region {
    RefRegion spec;
    std::vector<std::byte> data;
    std::unique_ptr<MemoryRegion> mr;
    uint64_t peer_addr = 0;
    uint32_t peer_rkey = 0;
  };
  ReferenceHost(std::unique_ptr<Connection> conn, SolicitedWaiter waiter)
      : conn_(std::move(conn)), waiter_(waiter) {}
  Status RunMrsp(Deadline deadline);

  std::unique_ptr<Connection> conn_;
  SolicitedWaiter waiter_;
  std::vector<Region> regions_;
  std::vector<uint8_t> mrsp_send_, mrsp_recv_;
  std::unique_ptr<MemoryRegion> mrsp_send_mr_, mrsp_recv_mr_;
  uint64_t calls_ = 0;
  uint64_t next_wr_id_ = 1;
  bool strict_order_ = true;
  uint64_t reordered_ = 0;
};

// The view of one call a ReferenceNaa kernel gets.
struct RefCall {
  uint8_t function_code = 0;
  uint32_t user_bits = 0;
  uint64_t call_index = 0;
  std::vector<std::span<std::byte>> regions;  // non-internal, in MRSP order
  std::vector<uint8_t> flags;                 // their flags
  std::vector<std::span<std::byte>> internal;  // internal regions
};

struct ReferenceNaaOptions {
  size_t max_regions = 32;                      // MRSP error 0x03 beyond
  uint64_t max_bytes = uint64_t{1} << 30;       // MRSP error 0x01 beyond
  // Kernels besides the stock ones (a code here overrides a stock one).
  std::map<uint8_t, std::function<uint8_t(RefCall&)>> kernels;
};

class ReferenceNaa {
 public:
  ~ReferenceNaa();  // Shutdown()
  static Result<std::unique_ptr<ReferenceNaa>> Start(Transport& transport,
                                                     const std::string& host, uint16_t port,
                                                     ReferenceNaaOptions options = {});
  uint16_t port() const;
  uint64_t connections() const { return connections_.load(); }
  uint64_t calls_answered() const { return answered_.load(); }
  uint64_t calls_ignored() const { return ignored_.load(); }  // unknown codes, bad immediates
  // Why connections ended badly (protocol violations seen), one line each.
  std::vector<std::string> violations() const;
  // violations(), then forgets them (for a test that provokes one).
  std::vector<std::string> TakeViolations();
  // Waits until `n` connections have ended (their thread is done with
  // them, every count above is final for them); false if `deadline`
  // passed first.
  bool WaitForClosedConnections(uint64_t n, Deadline deadline);
  void Shutdown();

 private:
  ReferenceNaa(std::unique_ptr<Listener> listener, ReferenceNaaOptions options)
      : listener_(std::move(listener)), options_(std::move(options)) {}
  void AcceptLoop();
  void Serve(Connection& conn);
  Status ServeOrFail(Connection& conn);
  void Violation(std::string what);

  std::unique_ptr<Listener> listener_;
  const ReferenceNaaOptions options_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> connections_{0}, answered_{0}, ignored_{0};
  mutable std::mutex mu_;
  std::condition_variable closed_cv_;
  uint64_t closed_ = 0;                             // guarded by mu_
  std::vector<std::unique_ptr<Connection>> conns_;  // guarded by mu_
  std::vector<std::thread> threads_;                // guarded by mu_
  std::vector<std::string> violations_;             // guarded by mu_
};

}  // namespace naarpc::naaice

#endif  // NAARPC_TESTS_NAAICE_REFERENCE_PEER_H_
