#include "runtime/engine/gather_writes.h"

#include <algorithm>
#include <string>

namespace naarpc {

Status PlanGatherWrites(const Layout& layout, size_t elem, std::span<const uint64_t> bases,
                        uint32_t lkey, const GatherTarget& target, uint32_t max_sge,
                        GatherWrites* out) {
  if (std::optional<LayoutProblem> p = CheckLayout(layout)) {
    return InvalidArgumentError("gather writes: invalid layout (" + p->field + "): " + p->message);
  }
  if (bases.size() != LayoutArrays(layout)) {
    return InvalidArgumentError("gather writes: " + std::to_string(bases.size()) + " bases for " +
                                LayoutToString(layout));
  }
  if (max_sge == 0 || elem == 0) return InvalidArgumentError("gather writes: max_sge 0");
  constexpr uint64_t kMaxEntry = uint64_t{1} << 30;
  out->sges.reserve(LayoutRuns(layout));
  ForEachRun(layout, [&](size_t array, uint64_t offset, uint64_t length) {
    uint64_t addr = bases[array] + offset * elem;
    uint64_t bytes = length * elem;
    while (bytes > 0) {
      const uint64_t n = std::min(bytes, kMaxEntry);
      out->sges.push_back({addr, static_cast<uint32_t>(n), lkey});
      addr += n;
      bytes -= n;
    }
  });
  // The WRs after every SGE exists: their spans stay valid.
  uint64_t remote = target.remote_addr;
  for (size_t i = 0; i < out->sges.size(); i += max_sge) {
    const size_t n = std::min<size_t>(max_sge, out->sges.size() - i);
    SendRequest r;
    r.wr_id = target.first_wr_id + out->requests.size();
    r.opcode = WorkOpcode::kRdmaWrite;
    r.sg_list = std::span<const LocalBuffer>(out->sges.data() + i, n);
    r.remote_addr = remote;
    r.rkey = target.rkey;
    for (size_t k = 0; k < n; ++k) remote += out->sges[i + k].length;
    const size_t index = out->requests.size() + 1;
    r.signaled = target.signal_every != 0 && index % target.signal_every == 0;
    out->requests.push_back(r);
  }
  if (!out->requests.empty()) out->requests.back().signaled = true;
  out->bytes = remote - target.remote_addr;
  return Status::Ok();
}

}  // namespace naarpc
