#include "runtime/transport_impl/verbs/verbs_memory.h"

#include <cerrno>
#include <string>

namespace naarpc {
namespace verbs {

Result<std::unique_ptr<MemoryRegion>> RegisterRegion(const std::shared_ptr<Core>& core,
                                                     void* addr, size_t length,
                                                     uint32_t access) {
  if (addr == nullptr || length == 0) {
    return InvalidArgumentError("RegisterMemory: empty region");
  }
  constexpr uint32_t kKnown =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessMwBind;
  if ((access & ~kKnown) != 0) {
    return InvalidArgumentError("RegisterMemory: unknown access flags");
  }
  static_assert(uint32_t{kAccessMwBind} == uint32_t{IBV_ACCESS_MW_BIND});
  // Same values as IBV_ACCESS_*; registered exactly as requested.
  static_assert(uint32_t{kAccessLocalWrite} == uint32_t{IBV_ACCESS_LOCAL_WRITE});
  static_assert(uint32_t{kAccessRemoteWrite} == uint32_t{IBV_ACCESS_REMOTE_WRITE});
  static_assert(uint32_t{kAccessRemoteRead} == uint32_t{IBV_ACCESS_REMOTE_READ});
  MrPtr mr(ibv_reg_mr(core->pd.get(), addr, length, static_cast<int>(access)));
  if (!mr) {
    int err = errno;
    std::string msg = ErrnoText("ibv_reg_mr(" + std::to_string(length) + " bytes)", err);
    if (err == EINVAL && (access & kAccessRemoteWrite) && !(access & kAccessLocalWrite)) {
      return InvalidArgumentError(msg + ": remote write requires local write");
    }
    if (err == ENOMEM || err == EPERM) {
      return ResourceExhaustedError(msg + " (check `ulimit -l`)");
    }
    return InvalidArgumentError(msg);
  }
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<VerbsMemoryRegion>(core, std::move(mr)));
}

Result<std::unique_ptr<MemoryWindow>> AllocateWindow(const std::shared_ptr<Core>& core) {
  if (!core->mw_type2) {
    return FailedPreconditionError("memory windows: RDMA device '" + DeviceNameOf(core->id.get()) +
                                   "' reports no type-2 memory windows");
  }
  ibv_mw* mw = ibv_alloc_mw(core->pd.get(), IBV_MW_TYPE_2);
  if (mw == nullptr) return ResourceExhaustedError(ErrnoText("ibv_alloc_mw(type 2)", errno));
  return std::unique_ptr<MemoryWindow>(std::make_unique<VerbsMemoryWindow>(core, mw));
}

}  // namespace verbs
}  // namespace naarpc
