#include "runtime/naa/admission.h"

#include <utility>
#include <vector>

namespace naarpc::internal {

std::string PeerHost(std::string_view peer_name) {
  if (!peer_name.empty() && peer_name.front() == '[') {
    const size_t close = peer_name.find(']');
    if (close != std::string_view::npos) return std::string(peer_name.substr(1, close - 1));
  }
  const size_t colon = peer_name.rfind(':');
  if (colon == std::string_view::npos || peer_name.find(':') != colon) {
    return std::string(peer_name);  // no port, or a bare IPv6 address
  }
  return std::string(peer_name.substr(0, colon));
}

template <typename Measure>
Admission::Conn* Admission::VictimLocked(Measure measure, uint64_t than,
                                         const std::string& except) {
  const std::string* richest = nullptr;
  uint64_t most = than;
  for (const auto& [name, peer] : peers_) {
    if (name == except || measure(peer) <= most) continue;
    // Only a peer with an idle session to give counts.
    bool idle = false;
    for (const auto& [id, c] : conns_) {
      if (c.peer == name && c.word.load(std::memory_order_acquire) == Conn::kIdle) {
        idle = true;
        break;
      }
    }
    if (!idle) continue;
    richest = &name;
    most = measure(peer);
  }
  if (richest == nullptr) return nullptr;
  Conn* lru = nullptr;
  for (auto& [id, c] : conns_) {
    if (c.peer != *richest || c.word.load(std::memory_order_acquire) != Conn::kIdle) continue;
    if (lru == nullptr || c.last_use.load(std::memory_order_relaxed) <
                              lru->last_use.load(std::memory_order_relaxed)) {
      lru = &c;
    }
  }
  return lru;
}

bool Admission::TryReclaimLocked(Conn& c) {
  uint8_t idle = Conn::kIdle;
  if (!c.word.compare_exchange_strong(idle, Conn::kIdle | Conn::kReclaimed,
                                      std::memory_order_acq_rel)) {
    return false;  // a call has started (or it is not idle): not a victim
  }
  --connections_;
  Peer& p = peers_[c.peer];
  --p.connections;
  p.releasing += c.bytes;
  ++reclaimed_;
  return true;
}

void Admission::UnreclaimLocked(Conn& c) {
  c.word.fetch_and(static_cast<uint8_t>(~Conn::kReclaimed), std::memory_order_acq_rel);
  ++connections_;
  Peer& p = peers_[c.peer];
  ++p.connections;
  p.releasing -= c.bytes;
  --reclaimed_;
}

Result<uint64_t> Admission::Admit(const std::string& peer, ReclaimFn reclaim) {
  ReclaimFn close_victim;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Peer& p = peers_[peer];
    auto refuse = [&](std::string why) {
      if (p.connections == 0 && p.handshakes == 0 && p.bytes == 0) peers_.erase(peer);
      return ResourceExhaustedError(std::move(why));
    };
    if (p.handshakes >= limits_.max_handshakes_per_peer) {
      return refuse("peer " + peer + " has " + std::to_string(p.handshakes) +
                    " connections in their MRSP handshake (limit per peer " +
                    std::to_string(limits_.max_handshakes_per_peer) + ")");
    }
    // A tighter cap than the server's (the server's is checked below).
    if (limits_.max_connections_per_peer < limits_.max_connections &&
        p.connections >= limits_.max_connections_per_peer) {
      return refuse("peer " + peer + " holds " + std::to_string(p.connections) +
                    " connections (limit per peer " +
                    std::to_string(limits_.max_connections_per_peer) + ")");
    }
    if (connections_ >= limits_.max_connections) {
      // A slot from a peer that holds more than this one would.
      Conn* victim;
      do {  // again if a call started on the victim meanwhile
        victim = VictimLocked([](const Peer& q) { return uint64_t{q.connections}; },
                              p.connections + 1, peer);
        if (victim == nullptr) {
          return refuse("connection limit " + std::to_string(limits_.max_connections) +
                        " reached, no idle session of a peer holding more than " + peer +
                        " to reclaim");
        }
      } while (!TryReclaimLocked(*victim));
      close_victim = std::exchange(victim->reclaim, nullptr);
    }
    id = next_id_++;
    conns_.try_emplace(id, peer, clock_.fetch_add(1, std::memory_order_relaxed) + 1,
                       std::move(reclaim));
    ++p.connections;
    ++p.handshakes;
    ++connections_;
  }
  if (close_victim) close_victim();
  return id;
}

void Admission::HandshakeDone(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  // Only this connection's thread changes a handshake's word.
  uint8_t handshake = Conn::kHandshake;
  if (!c.word.compare_exchange_strong(handshake, Conn::kIdle, std::memory_order_acq_rel)) return;
  c.last_use.store(clock_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  --peers_[c.peer].handshakes;
}

Admission::Slot* Admission::Find(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

// Runs for every call: no lock but to confirm a reclaim (see Conn).
bool Admission::Busy(Slot& c) {
  uint8_t word = c.word.load(std::memory_order_acquire);
  for (;;) {
    if (word & Conn::kReclaimed) {
      // Committed, or being decided by a Reserve that holds mu_ (it may
      // undo it): its outcome, under mu_.
      std::lock_guard<std::mutex> lock(mu_);
      word = c.word.load(std::memory_order_acquire);
      if (word & Conn::kReclaimed) return false;
      continue;  // undone
    }
    if (word != Conn::kIdle) return true;  // in its handshake, or busy already
    if (c.word.compare_exchange_weak(word, Conn::kBusy, std::memory_order_acq_rel)) return true;
  }
}

void Admission::Idle(Slot& c) {
  uint8_t word = c.word.load(std::memory_order_acquire);
  do {
    if ((word & Conn::kStateMask) == Conn::kHandshake) return;
  } while (!c.word.compare_exchange_weak(
      word, static_cast<uint8_t>((word & Conn::kReclaimed) | Conn::kIdle),
      std::memory_order_acq_rel));
  c.last_use.store(clock_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

Status Admission::Reserve(uint64_t id, uint64_t bytes, Deadline deadline, uint64_t& in_use) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = conns_.find(id);
  if (it == conns_.end()) return InternalError("admission: unknown connection");
  const std::string peer = it->second.peer;
  auto fits = [&] { return bytes <= limits_.max_bytes - bytes_; };
  in_use = bytes_;
  if (bytes > limits_.max_bytes_per_peer - peers_[peer].bytes) {
    return ResourceExhaustedError("peer " + peer + " would hold " +
                                  std::to_string(peers_[peer].bytes + bytes) +
                                  " bytes (limit per peer " +
                                  std::to_string(limits_.max_bytes_per_peer) + ")");
  }
  if (!fits()) {
    if (bytes > limits_.max_bytes) {
      return ResourceExhaustedError("more than the whole memory budget");
    }
    // Idle sessions of peers that keep more bytes than this one would,
    // least recently used first, until what they release covers the
    // shortfall; none if they cannot.
    uint64_t releasing = 0;
    for (const auto& [name, q] : peers_) releasing += q.releasing;
    const uint64_t shortfall = bytes - (limits_.max_bytes - bytes_);
    const uint64_t would_keep = peers_[peer].kept() + bytes;
    std::vector<Conn*> victims;
    while (releasing < shortfall) {
      Conn* victim = VictimLocked([](const Peer& q) { return q.kept(); }, would_keep, peer);
      if (victim == nullptr || victim->bytes == 0) break;
      if (!TryReclaimLocked(*victim)) continue;  // a call started on it: look again
      releasing += victim->bytes;
      victims.push_back(victim);
    }
    if (releasing < shortfall) {
      for (Conn* v : victims) UnreclaimLocked(*v);
      return ResourceExhaustedError(
          "no idle session of a peer holding more can be reclaimed to cover it");
    }
    std::vector<ReclaimFn> closes;
    for (Conn* v : victims) closes.push_back(std::exchange(v->reclaim, nullptr));
    lock.unlock();
    for (auto& close : closes) close();
    lock.lock();
    const bool in_time = deadline.infinite()
                             ? (released_.wait(lock, fits), true)
                             : released_.wait_until(lock, deadline.when(), fits);
    in_use = bytes_;
    if (!in_time) {
      return ResourceExhaustedError("the reclaimed sessions did not release their memory in time");
    }
  }
  auto again = conns_.find(id);
  if (again == conns_.end()) return InternalError("admission: connection released while reserving");
  bytes_ += bytes;
  again->second.bytes += bytes;
  peers_[peer].bytes += bytes;
  return Status::Ok();
}

void Admission::Closed(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  Peer& p = peers_[c.peer];
  // This connection's thread: its word changes under it only by a reclaim
  // (under mu_, held here).
  const uint8_t word = c.word.load(std::memory_order_acquire);
  if ((word & Conn::kStateMask) == Conn::kHandshake) --p.handshakes;
  // Never a victim, never counted as a handshake again, starts no call.
  c.word.store(Conn::kBusy | Conn::kReclaimed, std::memory_order_release);
  if (!(word & Conn::kReclaimed)) {
    --connections_;
    --p.connections;
    p.releasing += c.bytes;
  }
}

void Admission::Release(uint64_t id) {
  ReclaimFn drop;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    auto pit = peers_.find(c.peer);
    Peer& p = pit->second;
    const uint8_t word = c.word.load(std::memory_order_acquire);
    if ((word & Conn::kStateMask) == Conn::kHandshake) --p.handshakes;
    if (!(word & Conn::kReclaimed)) {
      --connections_;
      --p.connections;
    }
    bytes_ -= c.bytes;
    p.bytes -= c.bytes;
    if (word & Conn::kReclaimed) p.releasing -= c.bytes;
    drop = std::move(c.reclaim);
    conns_.erase(it);
    if (p.connections == 0 && p.handshakes == 0 && p.bytes == 0) peers_.erase(pit);
  }
  released_.notify_all();
}

size_t Admission::connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_;
}

uint64_t Admission::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

uint64_t Admission::reclaimed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reclaimed_;
}

}  // namespace naarpc::internal
