// Memory regions and type-2 memory windows of a verbs connection. Each
// keeps the connection's Core (its PD) alive. Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_MEMORY_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_MEMORY_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "naarpc/transport.h"
#include "runtime/transport_impl/verbs/verbs_resources.h"

namespace naarpc {
namespace verbs {

class VerbsMemoryRegion final : public MemoryRegion {
 public:
  VerbsMemoryRegion(std::shared_ptr<Core> core, MrPtr mr)
      : core_(std::move(core)), mr_(std::move(mr)) {}
  ~VerbsMemoryRegion() override { mr_.reset(); }  // before the PD (core_)
  void* addr() const override { return mr_->addr; }
  size_t length() const override { return mr_->length; }
  uint32_t lkey() const override { return mr_->lkey; }
  uint32_t rkey() const override { return mr_->rkey; }
  ibv_mr* mr() const { return mr_.get(); }
  const Core* core() const { return core_.get(); }

 private:
  std::shared_ptr<Core> core_;
  MrPtr mr_;
};

// A type-2 window (ibv_alloc_mw). mw->rkey is kept as the key of the last
// posted bind: the next ibv_inc_rkey starts from it.
class VerbsMemoryWindow final : public MemoryWindow {
 public:
  VerbsMemoryWindow(std::shared_ptr<Core> core, ibv_mw* mw) : core_(std::move(core)), mw_(mw) {}
  ~VerbsMemoryWindow() override { ibv_dealloc_mw(mw_); }  // before the PD (core_)
  uint32_t rkey() const override { return mw_->rkey; }
  ibv_mw* mw() const { return mw_; }
  const Core* core() const { return core_.get(); }

 private:
  std::shared_ptr<Core> core_;
  ibv_mw* mw_;
};

// Connection::RegisterMemory (ibv_reg_mr) and AllocateWindow (ibv_alloc_mw)
// in `core`'s protection domain.
Result<std::unique_ptr<MemoryRegion>> RegisterRegion(const std::shared_ptr<Core>& core,
                                                     void* addr, size_t length,
                                                     uint32_t access);
Result<std::unique_ptr<MemoryWindow>> AllocateWindow(const std::shared_ptr<Core>& core);

}  // namespace verbs
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_MEMORY_H_
