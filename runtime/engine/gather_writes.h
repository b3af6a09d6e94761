// Zero-copy sends of a parameter laid out in the caller's memory
// (docs/protocol.md 16, seed 004): RDMA WRITEs whose gather lists name the
// layout's runs in registered memory, at most max_send_sge entries each,
// chained; the target receives the elements packed, in wire order.
#ifndef NAARPC_RUNTIME_ENGINE_GATHER_WRITES_H_
#define NAARPC_RUNTIME_ENGINE_GATHER_WRITES_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "naarpc/status.h"
#include "naarpc/strided_view.h"
#include "naarpc/transport.h"

namespace naarpc {

struct GatherWrites {
  std::vector<LocalBuffer> sges;      // every run, in wire order
  std::vector<SendRequest> requests;  // RDMA WRITEs; sg_list points into sges
  uint64_t bytes = 0;                 // packed bytes written at the target
  // REQUIRES: not copied or moved after planning (requests point into sges).
  GatherWrites() = default;
  GatherWrites(const GatherWrites&) = delete;
  GatherWrites& operator=(const GatherWrites&) = delete;
};

struct GatherTarget {
  uint64_t remote_addr = 0;  // where the packed elements start at the target
  uint32_t rkey = 0;
  uint64_t first_wr_id = 0;  // wr_ids first_wr_id, first_wr_id + 1, ...
  // Every signal_every-th request and the last are signaled (0: the last
  // only): the caller posts at most its send-queue depth between polls.
  uint32_t signal_every = 0;
};

// Plans the writes of `layout` (elements of `elem` bytes) from `bases`
// (one address per array, registered under `lkey`) to `target`: one
// request per at most `max_sge` runs; a run longer than 1 GiB is split.
// kInvalidArgument for an invalid layout, a wrong number of bases or
// max_sge 0. REQUIRES: `out` freshly constructed.
Status PlanGatherWrites(const Layout& layout, size_t elem, std::span<const uint64_t> bases,
                        uint32_t lkey, const GatherTarget& target, uint32_t max_sge,
                        GatherWrites* out);

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_ENGINE_GATHER_WRITES_H_
