#include "runtime/transport_impl/emulated/memory_table.h"

#include "runtime/transport_impl/emulated/emulated_options.h"
#include "runtime/transport_impl/emulated/frame.h"

namespace naarpc {
namespace emulated {

Result<uint32_t> MrTable::AddRegion(void* addr, size_t length, uint32_t access) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_index_ > kMaxIndex) {
    return ResourceExhaustedError("emulated transport: memory keys exhausted");
  }
  const uint32_t index = next_index_++;
  regions_[index] = {static_cast<uint8_t*>(addr), length, access};
  return index;
}

Result<uint32_t> MrTable::AddWindow() {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_index_ > kMaxIndex) {
    return ResourceExhaustedError("emulated transport: memory keys exhausted");
  }
  const uint32_t index = next_index_++;
  windows_[index] = {};
  return index;
}

void MrTable::RemoveRegion(uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.erase(index);
  version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void MrTable::RemoveWindow(uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  windows_.erase(index);
}

void MrTable::Cache::Put(uint64_t version, const Item& item) {
  if (version != version_) {
    version_ = version;
    for (Item& i : items_) i = Item{};
  }
  items_[item.index % kSize] = item;
}

bool MrTable::ExistsUnderLock(uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.count(index) != 0;
}

bool MrTable::WindowOpen(uint32_t index, uint8_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(index);
  return it != windows_.end() && it->second.bound && it->second.key == key;
}

uint32_t MrTable::CheckUnderLock(uint32_t key, uint32_t tag, uint64_t addr, uint64_t len,
                                 uint32_t need, uint32_t* index_out, uint32_t* window_out,
                                 Cache* cache) {
  const bool remote = tag == kRkeyTag;
  uint32_t index = key >> 8;
  std::lock_guard<std::mutex> lock(mu_);
  if (remote) {
    if (auto w = windows_.find(index); w != windows_.end()) {
      const Window& win = w->second;
      if (!win.bound || win.key != (key & 0xff)) return kEmuErrWindowInvalid;
      if (addr < win.addr || len > win.len || addr - win.addr > win.len - len) {
        return kEmuErrRemoteBounds;
      }
      if ((win.access & need) != need) return kEmuErrNoRemoteWrite;
      if (regions_.count(win.mr_index) == 0) return kEmuErrRegionGone;
      *index_out = win.mr_index;
      if (window_out != nullptr) *window_out = index;
      return kEmuErrNone;
    }
  }
  if ((key & 0xff) != tag) return remote ? kEmuErrBadRkey : kEmuErrBadLkey;
  auto it = regions_.find(index);
  if (it == regions_.end()) return remote ? kEmuErrBadRkey : kEmuErrBadLkey;
  const Entry& e = it->second;
  if (cache != nullptr) {
    cache->Put(version_.load(std::memory_order_relaxed), {index, e.addr, e.len, e.access});
  }
  const uint32_t err = CheckRegion(e.addr, e.len, e.access, remote, addr, len, need);
  if (err == kEmuErrNone) *index_out = index;
  return err;
}

std::string MrTable::Invalidate(const WindowOp& op) {
  std::lock_guard<std::mutex> lock(mu_);
  auto w = windows_.find(op.window_index);
  if (w == windows_.end()) return "LOCAL_INV of key " + Hex(op.key) + ": no such window";
  if (!w->second.bound || w->second.key != (op.key & 0xff)) {
    return "LOCAL_INV of key " + Hex(op.key) + ": the window is not bound under that key";
  }
  w->second.bound = false;
  return {};
}

std::string MrTable::Bind(const WindowOp& op) {
  std::lock_guard<std::mutex> lock(mu_);
  auto w = windows_.find(op.window_index);
  if (w == windows_.end()) return "BIND_MW: window deallocated";
  // o10-36.2.2: a type-2 window is bound only from the free state.
  if (w->second.bound) return "BIND_MW of a window still bound (invalidate it first)";
  auto mr = regions_.find(op.mr_index);
  if (mr == regions_.end()) return "BIND_MW over a deregistered region";
  const Entry& e = mr->second;
  const uint64_t base = reinterpret_cast<uintptr_t>(e.addr);
  if (!(e.access & kAccessMwBind)) return "BIND_MW over a region without kAccessMwBind";
  if (op.addr < base || op.len > e.len || op.addr - base > e.len - op.len) {
    return "BIND_MW range " + Hex(op.addr) + "+" + std::to_string(op.len) + " outside its region";
  }
  if ((op.access & kAccessRemoteWrite) && !(e.access & kAccessLocalWrite)) {
    return "BIND_MW with remote write over a region without local write";
  }
  w->second = {static_cast<uint8_t>(op.key & 0xff), true, op.mr_index, op.addr, op.len,
               op.access};
  return {};
}

Result<std::unique_ptr<MemoryRegion>> RegisterRegion(const std::shared_ptr<MrTable>& table,
                                                     void* addr, size_t length,
                                                     uint32_t access) {
  constexpr uint32_t kKnown =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessMwBind;
  if (access & ~kKnown) {
    return InvalidArgumentError("emulated transport: unknown access flags " + Hex(access));
  }
  if ((access & kAccessRemoteWrite) && !(access & kAccessLocalWrite)) {
    return InvalidArgumentError(
        "emulated transport: kAccessRemoteWrite requires kAccessLocalWrite (as in ibverbs)");
  }
  if (addr == nullptr && length > 0) {
    return InvalidArgumentError("emulated transport: null address");
  }
  NAARPC_ASSIGN_OR_RETURN(uint32_t index, table->AddRegion(addr, length, access));
  return std::unique_ptr<MemoryRegion>(new EmuMemoryRegion(table, index, addr, length));
}

Result<std::unique_ptr<MemoryWindow>> AllocateWindow(const std::shared_ptr<MrTable>& table) {
  NAARPC_ASSIGN_OR_RETURN(uint32_t index, table->AddWindow());
  return std::unique_ptr<MemoryWindow>(new EmuMemoryWindow(table, index));
}

}  // namespace emulated
}  // namespace naarpc
