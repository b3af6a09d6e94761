// The verbs and rdma_cm objects of a connection, each owned RAII, and
// small helpers the verbs transport's files share. Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_RESOURCES_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_RESOURCES_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "naarpc/deadline.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"
#include "runtime/transport_impl/verbs/verbs_options.h"

namespace naarpc {
namespace verbs {

using Clock = std::chrono::steady_clock;

// "what: strerror(err)".
std::string ErrnoText(std::string_view what, int err);

struct EventChannelDeleter {
  void operator()(rdma_event_channel* c) const { rdma_destroy_event_channel(c); }
};
struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const { rdma_destroy_id(id); }
};
struct PdDeleter {
  void operator()(ibv_pd* pd) const { ibv_dealloc_pd(pd); }
};
struct CompChannelDeleter {
  void operator()(ibv_comp_channel* c) const { ibv_destroy_comp_channel(c); }
};
struct CqDeleter {
  void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); }
};
struct MrDeleter {
  void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};
struct CmEventAcker {
  void operator()(rdma_cm_event* e) const { rdma_ack_cm_event(e); }
};

using EventChannelPtr = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using CmIdPtr = std::unique_ptr<rdma_cm_id, CmIdDeleter>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using CmEventPtr = std::unique_ptr<rdma_cm_event, CmEventAcker>;

// The QP of a cm_id (rdma_create_qp/rdma_destroy_qp).
class QpHolder {
 public:
  QpHolder() = default;
  QpHolder(const QpHolder&) = delete;
  QpHolder& operator=(const QpHolder&) = delete;
  ~QpHolder() { Reset(); }
  void Reset() {
    if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
    id_ = nullptr;
  }
  void Attach(rdma_cm_id* id) { id_ = id; }  // after rdma_create_qp(id)
  ibv_qp* get() const { return id_ != nullptr ? id_->qp : nullptr; }

 private:
  rdma_cm_id* id_ = nullptr;
};

// An eventfd, used to wake a blocked Accept.
class EventFd {
 public:
  EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  ~EventFd() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  void Signal() const {
    uint64_t one = 1;
    ssize_t n = write(fd_, &one, sizeof(one));
    (void)n;
  }
  void Drain() const {
    uint64_t v;
    ssize_t n = read(fd_, &v, sizeof(v));
    (void)n;
  }

 private:
  int fd_;
};

// Time left until `d` (not infinite) for ppoll(2); zero once expired.
timespec TimeLeft(Deadline d);
bool SetNonBlocking(int fd);

CompletionStatus MapWcStatus(ibv_wc_status s);
// The name of the device a cm_id sits on, "?" if none.
std::string DeviceNameOf(const rdma_cm_id* id);

// All verbs/CM objects of one connection. Members are destroyed in reverse
// order: QP, CQ, completion channel, PD, cm_id, event channel.
struct Core {
  EventChannelPtr channel;
  CmIdPtr id;
  PdPtr pd;
  CompChannelPtr comp_channel;
  CqPtr cq;
  QpHolder qp;
  uint32_t max_inline = 0;
  uint32_t max_send_sge = 1;  // of the QP (SendRequest::sg_list)
  uint32_t send_depth = 0;  // the QP's actual max_send_wr
  bool mw_type2 = false;    // device_cap_flags: type 2A or 2B memory windows

  // Creates PD, completion channel, CQ and QP on `id` (address resolved).
  Status CreateResources(const VerbsOptions& opt);
  // Applies the RNR timer (RTS -> RTS); best effort.
  void SetMinRnrTimer(uint8_t timer);
};

}  // namespace verbs
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_RESOURCES_H_
