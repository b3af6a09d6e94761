// Caller memory registered for zero-copy sends of laid-out inputs
// (docs/protocol.md 16.2, seed 004). A generated stub sends an input with a
// layout (StridedView) straight from the caller's memory, by chained RDMA
// WRITEs whose gather lists name the layout's runs, when
//  (a) the memory the view reaches lies in a UserMemory registered with the
//      registry given in ClientOptions::user_memory, and
//  (b) the layout's runs average at least ClientOptions::zero_copy_min_run_bytes;
// otherwise it packs the elements into the parameter's registered region,
// as before. The NAA sees the same packed bytes either way.
//
//   auto registry = std::make_shared<naarpc::UserMemoryRegistry>();
//   naarpc::codegen::StubOptions options;
//   options.session.user_memory = registry;
//   FooClient client(transport, host, port, options);
//   std::vector<double> m(4096 * 4096);
//   naarpc::UserMemory reg = registry->Register(std::span<double>(m)).value();
//   client.Column(naarpc::StridedView<const double>(m, layout), ...);
//   // reg's destructor deregisters m from every connection.
#ifndef NAARPC_USER_MEMORY_H_
#define NAARPC_USER_MEMORY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "naarpc/status.h"
#include "naarpc/transport.h"

namespace naarpc {

class UserMemoryRegistry;

// RAII handle of one registered range: destroying it deregisters the range
// from every connection that registered it (at once, from this thread).
// REQUIRES: no call sending from the range is in flight when it is
// destroyed; the memory outlives the handle.
class UserMemory {
 public:
  UserMemory() = default;
  UserMemory(UserMemory&& other) noexcept { *this = std::move(other); }
  UserMemory& operator=(UserMemory&& other) noexcept;
  ~UserMemory() { Reset(); }
  UserMemory(const UserMemory&) = delete;
  UserMemory& operator=(const UserMemory&) = delete;

  // Deregisters now (idempotent).
  void Reset();
  explicit operator bool() const { return registry_ != nullptr; }
  std::span<const std::byte> bytes() const { return {base_, size_}; }

 private:
  friend class UserMemoryRegistry;
  std::shared_ptr<UserMemoryRegistry> registry_;
  uint64_t id_ = 0;
  const std::byte* base_ = nullptr;
  size_t size_ = 0;
};

// Ranges of caller memory sessions may send from (zero-copy), each
// registered lazily on every connection that sends from it (one protection
// domain per connection). Thread-safe; owned by shared_ptr.
class UserMemoryRegistry : public std::enable_shared_from_this<UserMemoryRegistry> {
 public:
  UserMemoryRegistry() = default;
  ~UserMemoryRegistry();
  UserMemoryRegistry(const UserMemoryRegistry&) = delete;
  UserMemoryRegistry& operator=(const UserMemoryRegistry&) = delete;

  // kInvalidArgument for an empty range or one overlapping a registered one.
  // REQUIRES: the registry is owned by a shared_ptr.
  Result<UserMemory> Register(std::span<const std::byte> memory);
  template <typename T>
  Result<UserMemory> Register(std::span<T> memory) {
    return Register(std::as_bytes(memory));
  }

  // What generated stubs did with laid-out inputs (all connections): sent
  // zero-copy (bytes gathered by the device from caller memory), or packed
  // by the CPU into the parameter's region.
  struct Stats {
    uint64_t zero_copy_inputs = 0, zero_copy_bytes = 0;
    uint64_t packed_inputs = 0, packed_bytes = 0;
  };
  Stats stats() const;

  // ---- For sessions (runtime internal).
  // The lkey of `conn`'s registration of the range holding
  // [addr, addr + length), registering it on first use (local read only);
  // false if no registered range holds it whole.
  Result<bool> LocalKey(Connection& conn, uint64_t addr, uint64_t length, uint32_t* lkey);
  // Deregisters everything `conn` registered (before it goes away).
  void ForgetConnection(const Connection* conn);
  void CountZeroCopy(uint64_t bytes);
  void CountPacked(uint64_t bytes);

 private:
  friend class UserMemory;
  void Deregister(uint64_t id);

  struct Range {
    uint64_t id = 0;
    uint64_t size = 0;
    // One registration per connection that sent from it.
    std::vector<std::pair<const Connection*, std::unique_ptr<MemoryRegion>>> regions;
  };
  mutable std::mutex mu_;
  std::map<uint64_t, Range> ranges_;  // by base address
  uint64_t next_id_ = 1;
  std::atomic<uint64_t> zero_copy_inputs_{0}, zero_copy_bytes_{0};
  std::atomic<uint64_t> packed_inputs_{0}, packed_bytes_{0};
};

}  // namespace naarpc

#endif  // NAARPC_USER_MEMORY_H_
