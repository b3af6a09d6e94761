#include "naarpc/user_memory.h"

#include <string>
#include <utility>

namespace naarpc {

UserMemory& UserMemory::operator=(UserMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    registry_ = std::move(other.registry_);
    id_ = other.id_;
    base_ = other.base_;
    size_ = other.size_;
    other.registry_.reset();
  }
  return *this;
}

void UserMemory::Reset() {
  if (registry_ == nullptr) return;
  registry_->Deregister(id_);
  registry_.reset();
}

UserMemoryRegistry::~UserMemoryRegistry() = default;

Result<UserMemory> UserMemoryRegistry::Register(std::span<const std::byte> memory) {
  if (memory.empty()) return InvalidArgumentError("UserMemoryRegistry::Register: empty range");
  const uint64_t base = reinterpret_cast<uintptr_t>(memory.data());
  const uint64_t end = base + memory.size();
  UserMemory handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto next = ranges_.lower_bound(base);
    const bool overlaps_next = next != ranges_.end() && next->first < end;
    const bool overlaps_prev =
        next != ranges_.begin() && std::prev(next)->first + std::prev(next)->second.size > base;
    if (overlaps_next || overlaps_prev) {
      return InvalidArgumentError("UserMemoryRegistry::Register: " +
                                  std::to_string(memory.size()) +
                                  " bytes overlap a range already registered");
    }
    Range& r = ranges_[base];
    r.id = next_id_++;
    r.size = memory.size();
    handle.id_ = r.id;
  }
  handle.registry_ = shared_from_this();
  handle.base_ = memory.data();
  handle.size_ = memory.size();
  return handle;
}

void UserMemoryRegistry::Deregister(uint64_t id) {
  Range dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = ranges_.begin(); it != ranges_.end(); ++it) {
      if (it->second.id != id) continue;
      dead = std::move(it->second);
      ranges_.erase(it);
      break;
    }
  }
  // dead.regions deregister here, outside the lock.
}

Result<bool> UserMemoryRegistry::LocalKey(Connection& conn, uint64_t addr, uint64_t length,
                                          uint32_t* lkey) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return false;
  --it;
  Range& r = it->second;
  if (addr + length > it->first + r.size) return false;
  for (const auto& [c, mr] : r.regions) {
    if (c == &conn) {
      *lkey = mr->lkey();
      return true;
    }
  }
  // Local read only: the peer never gets a key to it.
  auto mr = conn.RegisterMemory(reinterpret_cast<void*>(static_cast<uintptr_t>(it->first)),
                                r.size, 0);
  if (!mr.ok()) return mr.status().WithContext("registering caller memory for a zero-copy send");
  *lkey = (*mr)->lkey();
  r.regions.emplace_back(&conn, std::move(mr).value());
  return true;
}

void UserMemoryRegistry::ForgetConnection(const Connection* conn) {
  std::vector<std::unique_ptr<MemoryRegion>> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [base, r] : ranges_) {
      for (size_t i = 0; i < r.regions.size();) {
        if (r.regions[i].first == conn) {
          dead.push_back(std::move(r.regions[i].second));
          r.regions.erase(r.regions.begin() + static_cast<ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
  }
}

void UserMemoryRegistry::CountZeroCopy(uint64_t bytes) {
  zero_copy_inputs_.fetch_add(1, std::memory_order_relaxed);
  zero_copy_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void UserMemoryRegistry::CountPacked(uint64_t bytes) {
  packed_inputs_.fetch_add(1, std::memory_order_relaxed);
  packed_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

UserMemoryRegistry::Stats UserMemoryRegistry::stats() const {
  Stats s;
  s.zero_copy_inputs = zero_copy_inputs_.load(std::memory_order_relaxed);
  s.zero_copy_bytes = zero_copy_bytes_.load(std::memory_order_relaxed);
  s.packed_inputs = packed_inputs_.load(std::memory_order_relaxed);
  s.packed_bytes = packed_bytes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace naarpc
