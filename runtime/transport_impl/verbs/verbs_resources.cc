#include "runtime/transport_impl/verbs/verbs_resources.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace naarpc {
namespace verbs {

namespace {

// Gather entries asked of a queue pair (SendRequest::sg_list; docs/protocol.md
// 16): enough to cut a strided layout into few work requests, few enough
// that the send queue entries stay small.
constexpr uint32_t kWantedSendSge = 16;

}  // namespace

std::string ErrnoText(std::string_view what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

timespec TimeLeft(Deadline d) {
  auto left = d.when() - Deadline::Clock::now();
  if (left < Deadline::Clock::duration::zero()) left = Deadline::Clock::duration::zero();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(left);
  timespec ts;
  ts.tv_sec = static_cast<time_t>(std::min<int64_t>(secs.count(), 1'000'000'000));
  ts.tv_nsec = static_cast<long>(std::chrono::nanoseconds(left - secs).count());
  return ts;
}

bool SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

CompletionStatus MapWcStatus(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return CompletionStatus::kSuccess;
    case IBV_WC_LOC_LEN_ERR: return CompletionStatus::kLocalLengthError;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_MW_BIND_ERR:  // a refused BIND_MW / LOCAL_INV (transport.h)
      return CompletionStatus::kLocalProtectionError;
    case IBV_WC_REM_ACCESS_ERR: return CompletionStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:  // rxe's answer to an overlong SEND (HCAs: REM_INV_REQ)
      return CompletionStatus::kRemoteInvalidRequest;
    case IBV_WC_RNR_RETRY_EXC_ERR: return CompletionStatus::kRnrRetryExceeded;
    case IBV_WC_RETRY_EXC_ERR: return CompletionStatus::kRetryExceeded;
    case IBV_WC_WR_FLUSH_ERR: return CompletionStatus::kFlushed;
    default: return CompletionStatus::kGeneralError;
  }
}

std::string DeviceNameOf(const rdma_cm_id* id) {
  if (id == nullptr || id->verbs == nullptr || id->verbs->device == nullptr) return "?";
  const char* n = ibv_get_device_name(id->verbs->device);
  return n != nullptr ? n : "?";
}

Status Core::CreateResources(const VerbsOptions& opt) {
  if (id->verbs == nullptr) return InternalError("cm_id has no device context");
  pd.reset(ibv_alloc_pd(id->verbs));
  if (!pd) return ResourceExhaustedError(ErrnoText("ibv_alloc_pd", errno));
  comp_channel.reset(ibv_create_comp_channel(id->verbs));
  if (!comp_channel) {
    return ResourceExhaustedError(ErrnoText("ibv_create_comp_channel", errno));
  }
  if (!SetNonBlocking(comp_channel->fd)) {
    return InternalError(ErrnoText("fcntl(comp channel)", errno));
  }
  int cqe = static_cast<int>(opt.max_send_wr + opt.max_recv_wr);
  cq.reset(ibv_create_cq(id->verbs, cqe, nullptr, comp_channel.get(), 0));
  if (!cq) return ResourceExhaustedError(ErrnoText("ibv_create_cq", errno));
  // Gather lists (SendRequest::sg_list): up to kWantedSendSge entries if
  // the device has them (rxe: 32), else what it has.
  uint32_t sge_req = 1;
  if (ibv_device_attr dev{}; ibv_query_device(id->verbs, &dev) == 0) {
    if (dev.max_sge > 1) {
      sge_req = std::min<uint32_t>(static_cast<uint32_t>(dev.max_sge), kWantedSendSge);
    }
    mw_type2 = dev.max_mw > 0 && (dev.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                                                          IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  }
  for (uint32_t inline_req : {opt.max_inline_data, 0u}) {
    ibv_qp_init_attr attr{};
    attr.send_cq = cq.get();
    attr.recv_cq = cq.get();
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 0;
    attr.cap.max_send_wr = opt.max_send_wr;
    attr.cap.max_recv_wr = opt.max_recv_wr;
    attr.cap.max_send_sge = sge_req;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = inline_req;
    if (rdma_create_qp(id.get(), pd.get(), &attr) == 0) {
      qp.Attach(id.get());
      max_inline = attr.cap.max_inline_data;
      max_send_sge = std::max<uint32_t>(attr.cap.max_send_sge, 1);
      send_depth = attr.cap.max_send_wr;
      return Status::Ok();
    }
    if (inline_req == 0) break;
  }
  return ResourceExhaustedError(ErrnoText("rdma_create_qp", errno));
}


void Core::SetMinRnrTimer(uint8_t timer) {
  if (qp.get() == nullptr) return;
  ibv_qp_attr attr{};
  attr.min_rnr_timer = timer;
  (void)ibv_modify_qp(qp.get(), &attr, IBV_QP_MIN_RNR_TIMER);
}

}  // namespace verbs
}  // namespace naarpc
