// The protection domain of one emulated connection: its memory regions and
// type-2 memory windows, their keys and the checks every access makes.
// Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_MEMORY_TABLE_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_MEMORY_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/emulated_options.h"

namespace naarpc {
namespace emulated {

// Region keys: index << 8 | tag, so an lkey is never a valid rkey and keys
// are never reused. Memory windows take indexes from the same counter;
// their key is index << 8 | key byte, the byte changing with every bind (an
// 8-bit key, as on an HCA). Thread-safe: regions and windows may be
// destroyed by any thread while the connection's owner checks keys.
class MrTable {
 public:
  static constexpr uint32_t kLkeyTag = 0xa5;
  static constexpr uint32_t kRkeyTag = 0x5a;

  // A work request's view of a BIND_MW (the range and access it grants
  // over region mr_index, under the new key) or of a LOCAL_INV (window and
  // key only).
  struct WindowOp {
    uint32_t window_index = 0;
    uint32_t key = 0;  // bind: the new key; invalidate: the key to invalidate
    uint32_t mr_index = 0;
    uint64_t addr = 0, len = 0;
    uint32_t access = 0;
  };

  // What one connection has looked up, to check keys without the lock:
  // regions found, valid while the table's version is the one they were
  // found at. Only a deregistration changes a region (indexes are never
  // reused; binds and invalidates change windows, never cached), and it
  // bumps the version under the lock, after the change: a check that reads
  // an unchanged version (acquire) gives what a locked lookup at that moment
  // would give, and one that happens after a deregistration returned sees the
  // new version. Used by one thread at a time (the connection's op_mu_).
  class Cache {
   private:
    friend class MrTable;
    struct Item {
      uint32_t index = 0;  // 0: empty (no region has index 0)
      uint8_t* addr = nullptr;
      size_t len = 0;
      uint32_t access = 0;
    };
    // Direct-mapped by index: one slot to look at.
    const Item* Find(uint64_t version, uint32_t index) const {
      const Item& item = items_[index % kSize];
      return version == version_ && item.index == index ? &item : nullptr;
    }
    void Put(uint64_t version, const Item& item);

    static constexpr size_t kSize = 16;
    uint64_t version_ = UINT64_MAX;  // of every item; none yet
    Item items_[kSize];
  };

  // New indexes; kResourceExhausted once the 24-bit index space is used.
  Result<uint32_t> AddRegion(void* addr, size_t length, uint32_t access);
  Result<uint32_t> AddWindow();
  void RemoveRegion(uint32_t index);
  void RemoveWindow(uint32_t index);

  bool Exists(uint32_t index, Cache* cache = nullptr) {
    if (cache != nullptr && cache->Find(version_.load(std::memory_order_acquire), index)) {
      return true;
    }
    return ExistsUnderLock(index);
  }
  // Window `index` is still bound under key byte `key`.
  bool WindowOpen(uint32_t index, uint8_t key);

  // Validates [addr, addr+len) under `key`; returns 0 or an EmulatedVendorError.
  // A window key (remote only) is checked for state, key byte, the window's
  // range and access, then its region; *window_out is then its index.
  // With `cache`, a region looked up before is checked without the lock.
  uint32_t Check(uint32_t key, uint32_t tag, uint64_t addr, uint64_t len,
                 uint32_t need, uint32_t* index_out, uint32_t* window_out = nullptr,
                 Cache* cache = nullptr) {
    if (cache != nullptr && (key & 0xff) == tag) {
      // A region's index is never a window's: no window lookup to make.
      const uint32_t index = key >> 8;
      if (const Cache::Item* c = cache->Find(version_.load(std::memory_order_acquire), index)) {
        const uint32_t err =
            CheckRegion(c->addr, c->len, c->access, tag == kRkeyTag, addr, len, need);
        if (err == kEmuErrNone) *index_out = index;
        return err;
      }
    }
    return CheckUnderLock(key, tag, addr, len, need, index_out, window_out, cache);
  }

  // Executes a BIND_MW / LOCAL_INV; empty on success, else why it was refused.
  std::string Bind(const WindowOp& op);
  std::string Invalidate(const WindowOp& op);

 private:
  struct Entry {
    uint8_t* addr;
    size_t len;
    uint32_t access;
  };
  // A type-2 window: free (not bound) or bound over [addr, addr+len) of
  // region mr_index with `access`, valid under key byte `key` only.
  struct Window {
    uint8_t key = 0;
    bool bound = false;
    uint32_t mr_index = 0;
    uint64_t addr = 0, len = 0;
    uint32_t access = 0;
  };
  static constexpr uint32_t kMaxIndex = (1u << 24) - 1;

  // Bounds and access of a region [base, base+size) with `access`, for Check.
  static uint32_t CheckRegion(const uint8_t* base_ptr, size_t size, uint32_t access, bool remote,
                              uint64_t addr, uint64_t len, uint32_t need) {
    const uint64_t base = reinterpret_cast<uintptr_t>(base_ptr);
    if (addr < base || len > size || addr - base > size - len) {
      return remote ? kEmuErrRemoteBounds : kEmuErrBadLkey;
    }
    if ((access & need) != need) return remote ? kEmuErrNoRemoteWrite : kEmuErrNoLocalWrite;
    return kEmuErrNone;
  }
  // Check and Exists, taking mu_ (the cache filled where it applies).
  uint32_t CheckUnderLock(uint32_t key, uint32_t tag, uint64_t addr, uint64_t len, uint32_t need,
                          uint32_t* index_out, uint32_t* window_out, Cache* cache);
  bool ExistsUnderLock(uint32_t index);

  std::mutex mu_;
  std::atomic<uint64_t> version_{0};  // +1 per deregistration; written under mu_
  std::unordered_map<uint32_t, Entry> regions_;
  std::unordered_map<uint32_t, Window> windows_;
  uint32_t next_index_ = 1;
};

class EmuMemoryRegion final : public MemoryRegion {
 public:
  EmuMemoryRegion(std::shared_ptr<MrTable> table, uint32_t index, void* addr, size_t len)
      : table_(std::move(table)), index_(index), addr_(addr), len_(len) {}
  ~EmuMemoryRegion() override { table_->RemoveRegion(index_); }
  void* addr() const override { return addr_; }
  size_t length() const override { return len_; }
  uint32_t lkey() const override { return index_ << 8 | MrTable::kLkeyTag; }
  uint32_t rkey() const override { return index_ << 8 | MrTable::kRkeyTag; }

  const MrTable* table() const { return table_.get(); }
  uint32_t index() const { return index_; }

 private:
  std::shared_ptr<MrTable> table_;
  uint32_t index_;
  void* addr_;
  size_t len_;
};

class EmuMemoryWindow final : public MemoryWindow {
 public:
  EmuMemoryWindow(std::shared_ptr<MrTable> table, uint32_t index)
      : table_(std::move(table)), index_(index), rkey_(index << 8) {}
  ~EmuMemoryWindow() override { table_->RemoveWindow(index_); }
  uint32_t rkey() const override { return rkey_; }

  const MrTable* table() const { return table_.get(); }
  uint32_t index() const { return index_; }
  // The key of the next bind (ibv_inc_rkey: the key byte plus one).
  uint32_t NextKey() const { return (rkey_ & ~0xffu) | ((rkey_ + 1) & 0xffu); }
  void set_rkey(uint32_t key) { rkey_ = key; }

 private:
  std::shared_ptr<MrTable> table_;
  uint32_t index_;
  uint32_t rkey_;
};

// Connection::RegisterMemory and AllocateWindow over `table`.
Result<std::unique_ptr<MemoryRegion>> RegisterRegion(const std::shared_ptr<MrTable>& table,
                                                     void* addr, size_t length,
                                                     uint32_t access);
Result<std::unique_ptr<MemoryWindow>> AllocateWindow(const std::shared_ptr<MrTable>& table);

}  // namespace emulated
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_MEMORY_TABLE_H_
