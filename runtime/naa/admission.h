// Admission on a software NAA: what each peer (host address) holds —
// connections, connections still in their MRSP handshake, reserved bytes —
// and max-min fair reclaim, so that no single peer can starve the others
// (docs/server.md, "What one peer can hold"). When the connection slots or
// the memory budget run short, a newcomer may take an idle session (between
// calls, least recently used first) from a peer that holds more than the
// newcomer's peer would; a peer never loses a session to itself or to a
// peer holding as much. Thread-safe. Internal to the runtime.
#ifndef NAARPC_RUNTIME_NAA_ADMISSION_H_
#define NAARPC_RUNTIME_NAA_ADMISSION_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "naarpc/deadline.h"
#include "naarpc/status.h"

namespace naarpc::internal {

// "10.0.0.7" of "10.0.0.7:4242", "fd00::7" of "[fd00::7]:4242".
std::string PeerHost(std::string_view peer_name);

class Admission {
 public:
  struct Limits {
    size_t max_connections = 256;
    size_t max_connections_per_peer = 256;
    size_t max_handshakes_per_peer = 128;
    uint64_t max_bytes = 0;
    uint64_t max_bytes_per_peer = 0;
  };
  // Closes a reclaimed connection (it must end soon and then Release()).
  // Called without Admission's lock held.
  using ReclaimFn = std::function<void()>;

  explicit Admission(Limits limits) : limits_(limits) {}

  // A new connection from `peer` (PeerHost()); in its handshake until
  // HandshakeDone. Returns its id, or kResourceExhausted naming the limit
  // (nothing held). May reclaim an idle session of a peer holding more.
  Result<uint64_t> Admit(const std::string& peer, ReclaimFn reclaim);
  // The MRSP is done: the connection is an idle session.
  void HandshakeDone(uint64_t id);

  // A connection's entry, for the per-call Busy/Idle without a lookup;
  // valid until Release(id). Opaque.
  class Slot {
   public:
    Slot(std::string p, uint64_t use, ReclaimFn fn)  // by Admit only
        : peer(std::move(p)), last_use(use), reclaim(std::move(fn)) {}

   private:
    friend class Admission;
    enum State : uint8_t { kHandshake = 0, kIdle = 1, kBusy = 2, kStateMask = 3, kReclaimed = 4 };

    uint8_t state() const { return word.load(std::memory_order_acquire) & kStateMask; }
    bool reclaimed() const { return (word.load(std::memory_order_acquire) & kReclaimed) != 0; }

    const std::string peer;
    std::atomic<uint8_t> word{kHandshake};  // State | kReclaimed (closing: no longer a slot)
    uint64_t bytes = 0;                     // guarded by mu_
    std::atomic<uint64_t> last_use;         // LRU order among idle sessions
    ReclaimFn reclaim;                      // guarded by mu_
  };
  // The entry of `id`; nullptr if `id` is unknown (released).
  Slot* Find(uint64_t id);
  // A call runs / the session is idle again (most recently used). Busy is
  // false if the connection has been reclaimed (it is closing: skip the
  // call). Neither takes the lock unless a reclaim is under way (below).
  bool Busy(Slot& slot);
  void Idle(Slot& slot);
  // Reserves `bytes` of the budgets for `id` (its MRSP). Short of memory, it
  // reclaims idle sessions of peers holding more bytes than this peer would
  // and waits (until `deadline`) for them to release theirs. On refusal,
  // `in_use` is what the server's budget had reserved.
  Status Reserve(uint64_t id, uint64_t bytes, Deadline deadline, uint64_t& in_use);
  // The connection has ended: its slot is free now; its bytes stay reserved
  // until Release (its memory may outlive the connection briefly).
  void Closed(uint64_t id);
  // The connection and its memory are gone: its slot and bytes are free.
  void Release(uint64_t id);

  size_t connections() const;
  uint64_t reserved_bytes() const;
  uint64_t reclaimed() const;  // sessions reclaimed so far

 private:
  // A call starting and a reclaim race on one atomic word per connection,
  // its state and a "reclaimed" bit, changed by compare-and-swap only:
  //  - Busy: kIdle -> kBusy, only while the bit is clear;
  //  - a reclaim (under mu_): kIdle -> kIdle | kReclaimed, only while idle.
  // Whichever swaps first wins: a session whose call has started is never
  // reclaimed (the reclaim sees kBusy and takes another victim), and a
  // reclaimed session starts no call (Busy sees the bit). Reserve may undo a
  // reclaim (UnreclaimLocked) before it releases mu_, so Busy confirms a set
  // bit under mu_: only a committed reclaim makes it false.
  using Conn = Slot;
  struct Peer {
    size_t connections = 0;  // not reclaimed
    size_t handshakes = 0;
    uint64_t bytes = 0;      // reserved, reclaimed connections' included
    uint64_t releasing = 0;  // of which reclaimed connections still hold
    uint64_t kept() const { return bytes - releasing; }
  };

  // The least recently used idle session of the peer that holds the most of
  // `measure` among those holding more than `than`; nullptr if none.
  // REQUIRES: mu_ held.
  template <typename Measure>
  Conn* VictimLocked(Measure measure, uint64_t than, const std::string& except);
  // Marks `c` reclaimed: its slot is free now, its bytes once it releases.
  // False, and nothing changed, if a call has started on it meanwhile.
  // Unreclaim undoes it (a reclaim that would not have been enough).
  // REQUIRES: mu_ held.
  bool TryReclaimLocked(Conn& c);
  void UnreclaimLocked(Conn& c);

  const Limits limits_;
  mutable std::mutex mu_;
  std::condition_variable released_;  // bytes were released
  std::map<uint64_t, Conn> conns_;    // guarded by mu_
  std::map<std::string, Peer> peers_; // guarded by mu_
  size_t connections_ = 0;            // not reclaimed; guarded by mu_
  uint64_t bytes_ = 0;                // guarded by mu_
  uint64_t next_id_ = 1;              // guarded by mu_
  std::atomic<uint64_t> clock_{0};    // LRU ticks
  uint64_t reclaimed_ = 0;            // guarded by mu_
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_NAA_ADMISSION_H_
