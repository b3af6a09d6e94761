// Verbs backend: rdma_cm (RDMA_PS_TCP) + RC QPs. One event channel, PD,
// completion channel, CQ and QP per connection, all owned by a shared Core
// that memory regions keep alive (a PD cannot be freed under live MRs).
#include "runtime/transport_impl/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/sockaddr_text.h"
#include "runtime/unique_fd.h"
#include "runtime/spin_budget.h"
#include "runtime/transport_impl/verbs/wake_predictor.h"

namespace naarpc {
namespace {

using Clock = std::chrono::steady_clock;

// NAAICE reference library connection parameters.
constexpr uint8_t kRetryCount = 7;
constexpr uint8_t kInitiatorDepth = 1;
constexpr uint8_t kResponderResources = 1;
// CM address/route resolution timeout per step.
constexpr int kResolveTimeoutMs = 2000;
// How long a broken connection waits for flush completions of outstanding
// work before reporting kDisconnected.
constexpr auto kFlushGrace = std::chrono::seconds(2);
constexpr timespec kZeroTimeout{0, 0};
// Internal wr_id layout: top bit marks receives, the rest is a sequence.
constexpr uint64_t kRecvBit = 1ull << 63;
// Gather entries asked of a queue pair (SendRequest::sg_list; docs/protocol.md
// 16): enough to cut a strided layout into few work requests, few enough
// that the send queue entries stay small.
constexpr uint32_t kWantedSendSge = 16;

std::string ErrnoText(std::string_view what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

// ---------------------------------------------------------------- RAII --

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

// Resolves host (empty = any) to a socket address with `port`.
Result<sockaddr_storage> ResolveHost(const std::string& host, uint16_t port,
                                     bool passive) {
  sockaddr_storage ss{};
  if (host.empty() || host == "0.0.0.0" || host == "*") {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_ANY);
    in->sin_port = htons(port);
    return ss;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return UnavailableError("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (ss.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  } else if (ss.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  } else {
    return UnavailableError("unsupported address family for '" + host + "'");
  }
  return ss;
}

// Waits for the next CM event on `channel` (its fd is non-blocking), up to
// `deadline`; `wake_fd` (if >= 0) aborts the wait with kUnavailable.
Result<CmEventPtr> NextCmEvent(rdma_event_channel* channel, Deadline deadline,
                               int wake_fd = -1,
                               std::atomic<bool>* shutdown = nullptr) {
  for (;;) {
    if (shutdown != nullptr && shutdown->load()) {
      return UnavailableError("listener shut down");
    }
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(channel, &ev) == 0) return CmEventPtr(ev);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return InternalError(ErrnoText("rdma_get_cm_event", errno));
    }
    pollfd fds[2] = {{channel->fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int n = poll(fds, wake_fd >= 0 ? 2 : 1, deadline.PollTimeoutMs());
    if (n < 0 && errno != EINTR) return InternalError(ErrnoText("poll", errno));
    if (n == 0 && deadline.expired()) {
      return DeadlineExceededError("timed out waiting for a connection event");
    }
    if (wake_fd >= 0 && (fds[1].revents & POLLIN)) {
      return UnavailableError("listener shut down");
    }
  }
}

std::string CmEventText(const rdma_cm_event* ev) {
  std::string s = rdma_event_str(ev->event);
  if (ev->status != 0) s += " (status " + std::to_string(ev->status) + ")";
  return s;
}

// Maps an unexpected CM event during connection set-up to a Status.
Status CmEventError(const rdma_cm_event* ev, std::string_view stage) {
  std::string msg = std::string(stage) + ": " + CmEventText(ev);
  switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      if (ev->status == -ENODEV) {
        return UnavailableError(msg + " (no RDMA device serves this address; is the device "
                                      "up? without RDMA hardware use --transport=emulated)");
      }
      return UnavailableError(msg + " (peer unreachable)");
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return UnavailableError(msg + " (peer unreachable)");
    case RDMA_CM_EVENT_REJECTED:
      return UnavailableError(msg + " (connection rejected: no listener?)");
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return DisconnectedError(msg);
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return UnavailableError(msg + " (RDMA device removed)");
    default:
      return InternalError(msg + " (unexpected event)");
  }
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

// With VerbsOptions::device set: the cm_id (address resolved or bound) must
// sit on that device.
Status CheckDevice(const rdma_cm_id* id, const std::string& device, std::string_view what) {
  if (device.empty() || id == nullptr || id->verbs == nullptr) return Status::Ok();
  const std::string actual = DeviceNameOf(id);
  if (actual == device) return Status::Ok();
  return InvalidArgumentError(std::string(what) + " is served by RDMA device '" + actual +
                              "', not by the selected device '" + device + "'");
}

// --------------------------------------------------------------- Core --

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
  Status CreateResources(const VerbsOptions& opt) {
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

  // Applies the RNR timer (RTS -> RTS); best effort.
  void SetMinRnrTimer(uint8_t timer) {
    if (qp.get() == nullptr) return;
    ibv_qp_attr attr{};
    attr.min_rnr_timer = timer;
    (void)ibv_modify_qp(qp.get(), &attr, IBV_QP_MIN_RNR_TIMER);
  }
};

// --------------------------------------------------------- MemoryRegion --

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

// ----------------------------------------------------------- Connection --

class VerbsConnection final : public Connection {
 public:
  VerbsConnection(std::shared_ptr<Core> core, const VerbsOptions& opt)
      : core_(std::move(core)), opt_(opt) {
    peer_ = SockaddrToString(rdma_get_peer_addr(core_->id.get()));
  }

  // Once the connection is established (the QP in RTS).
  void Established() { core_->SetMinRnrTimer(opt_.min_rnr_timer); }

  ~VerbsConnection() override { Disconnect().IgnoreError(); }

  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
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
    MrPtr mr(ibv_reg_mr(core_->pd.get(), addr, length, static_cast<int>(access)));
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
        std::make_unique<VerbsMemoryRegion>(core_, std::move(mr)));
  }

  bool supports_memory_windows() const override { return core_->mw_type2; }

  Result<std::unique_ptr<MemoryWindow>> AllocateWindow() override {
    if (!core_->mw_type2) {
      return FailedPreconditionError("memory windows: RDMA device '" + DeviceNameOf(core_->id.get()) +
                                     "' reports no type-2 memory windows");
    }
    ibv_mw* mw = ibv_alloc_mw(core_->pd.get(), IBV_MW_TYPE_2);
    if (mw == nullptr) return ResourceExhaustedError(ErrnoText("ibv_alloc_mw(type 2)", errno));
    return std::unique_ptr<MemoryWindow>(std::make_unique<VerbsMemoryWindow>(core_, mw));
  }

  Status PostSend(std::span<const SendRequest> requests) override {
    if (requests.empty()) return Status::Ok();
    if (IsDown()) return DisconnectedError("PostSend: " + DownReason());
    // Reused across calls: no allocation on the data path once warm.
    std::vector<ibv_send_wr>& wrs = wr_scratch_;
    std::vector<ibv_sge>& sges = sge_scratch_;
    // One slot per request (its `local`) plus its gather list: sized before
    // any pointer into it is taken.
    size_t sge_total = 0;
    for (const SendRequest& r : requests) {
      if (r.sg_list.size() > core_->max_send_sge) {
        return InvalidArgumentError(
            "PostSend: wr_id " + std::to_string(r.wr_id) + " has " +
            std::to_string(r.sg_list.size()) + " gather entries; the queue pair takes " +
            std::to_string(core_->max_send_sge) + " (max_send_sge): chain work requests");
      }
      sge_total += std::max<size_t>(r.sg_list.size(), 1);
    }
    if (wrs.size() < requests.size()) wrs.resize(requests.size());
    if (sges.size() < sge_total) sges.resize(sge_total);
    size_t sge_next = 0;
    uint64_t seq = next_send_seq_;
    for (size_t i = 0; i < requests.size(); ++i) {
      const SendRequest& r = requests[i];
      ibv_send_wr& wr = wrs[i];
      wr = {};
      switch (r.opcode) {
        case WorkOpcode::kSend: wr.opcode = IBV_WR_SEND; break;
        case WorkOpcode::kRdmaWrite: wr.opcode = IBV_WR_RDMA_WRITE; break;
        case WorkOpcode::kRdmaWriteWithImm:
          wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
          wr.imm_data = htonl(r.imm_data);
          break;
        case WorkOpcode::kBindWindow: {
          auto* w = dynamic_cast<VerbsMemoryWindow*>(r.window);
          auto* m = dynamic_cast<const VerbsMemoryRegion*>(r.window_region);
          if (w == nullptr || m == nullptr || w->core() != core_.get() || m->core() != core_.get()) {
            return InvalidArgumentError("PostSend: wr_id " + std::to_string(r.wr_id) +
                                        ": BIND_MW needs a window and a region of this connection");
          }
          if (r.solicited) return InvalidArgumentError("PostSend: the solicited bit on a BIND_MW");
          wr.opcode = IBV_WR_BIND_MW;
          wr.bind_mw.mw = w->mw();
          wr.bind_mw.rkey = ibv_inc_rkey(w->mw()->rkey);
          wr.bind_mw.bind_info.mr = m->mr();
          wr.bind_mw.bind_info.addr = r.local.addr;
          wr.bind_mw.bind_info.length = r.local.length;
          wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(r.window_access);
          break;
        }
        case WorkOpcode::kLocalInvalidate:
          if (r.solicited) return InvalidArgumentError("PostSend: the solicited bit on a LOCAL_INV");
          wr.opcode = IBV_WR_LOCAL_INV;
          wr.invalidate_rkey = r.rkey;
          break;
        default:
          return InvalidArgumentError("PostSend: opcode must be SEND or RDMA WRITE[_WITH_IMM]");
      }
      if (r.opcode == WorkOpcode::kBindWindow || r.opcode == WorkOpcode::kLocalInvalidate) {
        wr.wr_id = seq + i;
        ++sge_next;
        if (r.signaled) wr.send_flags |= IBV_SEND_SIGNALED;
        wr.next = i + 1 < requests.size() ? &wrs[i + 1] : nullptr;
        continue;
      }
      if (r.opcode != WorkOpcode::kSend) {
        wr.wr.rdma.remote_addr = r.remote_addr;
        wr.wr.rdma.rkey = r.rkey;
      }
      wr.wr_id = seq + i;
      if (!r.sg_list.empty()) {
        wr.sg_list = &sges[sge_next];
        for (const LocalBuffer& b : r.sg_list) sges[sge_next++] = {b.addr, b.length, b.lkey};
        wr.num_sge = static_cast<int>(r.sg_list.size());
      } else if (r.local.length > 0) {
        sges[sge_next] = {r.local.addr, r.local.length, r.local.lkey};
        wr.sg_list = &sges[sge_next++];
        wr.num_sge = 1;
        if (r.local.length <= core_->max_inline) wr.send_flags |= IBV_SEND_INLINE;
      } else {
        ++sge_next;
      }
      if (r.signaled) wr.send_flags |= IBV_SEND_SIGNALED;
      if (r.solicited) {
        if (r.opcode == WorkOpcode::kRdmaWrite) {
          return InvalidArgumentError(
              "PostSend: the solicited-event bit applies to SEND and RDMA_WRITE_WITH_IMM only");
        }
        wr.send_flags |= IBV_SEND_SOLICITED;
      }
      wr.next = i + 1 < requests.size() ? &wrs[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(core_->qp.get(), wrs.data(), &bad);
    size_t posted = rc == 0 ? requests.size() : static_cast<size_t>(bad - wrs.data());
    for (size_t i = 0; i < posted; ++i) {
      if (requests[i].opcode == WorkOpcode::kBindWindow) {
        // The consumer's key for this bind (ibv_inc_rkey): what the peer
        // writes with, and where the next bind's key starts.
        static_cast<VerbsMemoryWindow*>(requests[i].window)->mw()->rkey = wrs[i].bind_mw.rkey;
      }
      sends_.push_back({seq + i, requests[i].wr_id, requests[i].opcode, requests[i].signaled});
      if (requests[i].signaled) ++signaled_pending_;
    }
    next_send_seq_ += posted;
    posted_since_sleep_ = true;
    if (rc != 0) {
      std::string msg = ErrnoText("ibv_post_send", rc) + " (posted " +
                        std::to_string(posted) + " of " +
                        std::to_string(requests.size()) + ")";
      if (rc == ENOMEM) return ResourceExhaustedError(msg + ": send queue full");
      return InvalidArgumentError(msg);
    }
    return Status::Ok();
  }

  Status PostRecv(uint64_t wr_id, const LocalBuffer& buffer) override {
    if (IsDown()) return DisconnectedError("PostRecv: " + DownReason());
    ibv_sge sge{buffer.addr, buffer.length, buffer.lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvBit | next_recv_seq_;
    if (buffer.length > 0) {
      wr.sg_list = &sge;
      wr.num_sge = 1;
    }
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(core_->qp.get(), &wr, &bad);
    if (rc != 0) {
      std::string msg = ErrnoText("ibv_post_recv", rc);
      if (rc == ENOMEM) return ResourceExhaustedError(msg + ": receive queue full");
      return InvalidArgumentError(msg);
    }
    recvs_.push_back({next_recv_seq_++, wr_id});
    return Status::Ok();
  }

  // The spin loop is the hottest code of a 64 B call. Aligned so that it
  // never straddles a 4 KiB page (the function is < 2 KiB; the slow path is
  // out of line): under QEMU TCG, where the Soft-RoCE benchmark runs, jumps
  // to another guest page are not chained between translated blocks (each
  // goes through a block lookup), and builds whose spin loop happened to
  // straddle a page measured ~1-1.5 us slower per round trip (naarpc and the
  // raw transport alike; 12 interleaved rounds). At most 2 KiB of padding.
  [[gnu::aligned(2048)]] Result<size_t> PollCompletions(std::span<Completion> out,
                                                        Deadline deadline) override {
    if (out.empty()) return InvalidArgumentError("PollCompletions: empty output span");
    // Bounded spin, only while work is outstanding.
    if (opt_.poll_spin.count() > 0 && Outstanding()) {
      SpinBudget spin(opt_.poll_spin, deadline, /*yield_cpu=*/true);
      do {
        NAARPC_ASSIGN_OR_RETURN(size_t n, DrainCq(out));
        if (n > 0) return n;
      } while (spin.Continue());
    }
    return WaitForCompletions(out, deadline);
  }

  Status RequestNotify(NotifyMode mode) override {
    const int solicited_only = mode == NotifyMode::kSolicitedOnly ? 1 : 0;
    if (int rc = ibv_req_notify_cq(core_->cq.get(), solicited_only); rc != 0) {
      return InternalError(ErrnoText("ibv_req_notify_cq", rc));
    }
    // The HCA keeps the wider arming; PollCompletions re-arms for every
    // completion unless this one already does.
    armed_ = armed_ || mode == NotifyMode::kNextCompletion;
    return Status::Ok();
  }

  Result<bool> WaitNotify(Deadline deadline) override {
    for (;;) {
      if (disconnect_requested_.load() && !down_) MarkDown("connection closed locally");
      HandleCmEvents();
      if (down_ && flush_timer_.get() >= 0) {
        uint64_t expirations;
        ssize_t n = read(flush_timer_.get(), &expirations, sizeof(expirations));
        (void)n;
      }
      pollfd fds[3] = {{core_->comp_channel->fd, POLLIN, 0},
                       {core_->channel->fd, POLLIN, 0},
                       {wake_.fd(), POLLIN, 0}};
      // Non-blocking first: an event already raised is taken at once.
      int rc = ppoll(fds, 3, &kZeroTimeout, nullptr);
      if (rc == 0) {
        if (down_ && (!Outstanding() || flush_deadline_.expired())) {
          return DisconnectedError(DownReason());
        }
        if (deadline.expired()) return false;
        Deadline wait = down_ ? Deadline::Earlier(deadline, flush_deadline_) : deadline;
        const timespec timeout = TimeLeft(wait);
        rc = ppoll(fds, 3, wait.infinite() ? nullptr : &timeout, nullptr);
      }
      if (rc < 0 && errno != EINTR) return InternalError(ErrnoText("ppoll", errno));
      if (fds[2].revents & POLLIN) wake_.Drain();
      if (fds[1].revents & POLLIN) HandleCmEvents();
      if (fds[0].revents & POLLIN) {
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        if (ibv_get_cq_event(core_->comp_channel.get(), &ev_cq, &ev_ctx) == 0) {
          ibv_ack_cq_events(ev_cq, 1);
          armed_ = false;
          return true;
        }
      }
    }
  }

  Result<size_t> TryPollCompletions(std::span<Completion> out) override {
    if (out.empty()) return InvalidArgumentError("TryPollCompletions: empty output span");
    NAARPC_ASSIGN_OR_RETURN(size_t n, DrainCq(out));
    if (n > 0) return n;
    if (disconnect_requested_.load() && !down_) MarkDown("connection closed locally");
    HandleCmEvents();
    if (down_ && (!Outstanding() || flush_deadline_.expired())) {
      return DisconnectedError(DownReason());
    }
    return size_t{0};
  }

  // An epoll set (made on first use) of what WaitNotify waits on: the
  // completion channel, the CM event channel, wake_ (Disconnect), and a
  // timer for the end of the flush grace, so that a broken connection whose
  // flushes do not come still reports kDisconnected. WaitNotify(now) clears
  // them all (the timer once it expired).
  int notify_fd() override {
    if (notify_ep_.get() >= 0) return notify_ep_.get();
    UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
    UniqueFd timer(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (ep.get() < 0 || timer.get() < 0) return -1;
    for (int fd : {core_->comp_channel->fd, core_->channel->fd, wake_.fd(), timer.get()}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return -1;
    }
    notify_ep_ = std::move(ep);
    flush_timer_ = std::move(timer);
    if (down_) ArmFlushTimer();
    return notify_ep_.get();
  }

  uint32_t max_inline_data() const override { return core_->max_inline; }
  uint32_t send_queue_depth() const override { return core_->send_depth; }
  uint32_t max_send_sge() const override { return core_->max_send_sge; }

  // Also safe from another thread: wakes a blocked PollCompletions.
  Status Disconnect() override {
    if (!disconnect_requested_.exchange(true)) {
      // Moves the QP to ERR (flushing outstanding work) and sends DREQ.
      if (!disconnect_sent_.exchange(true)) rdma_disconnect(core_->id.get());
      wake_.Signal();
    }
    return Status::Ok();
  }

  std::string peer_name() const override { return peer_; }
  std::string down_reason() const override { return down_ ? down_reason_ : std::string(); }

  const VerbsWaitStats& wait_stats() const { return wait_stats_; }

 private:
  // PollCompletions after the spin found nothing: sleeps on the completion
  // channel (and CM events, and Disconnect), with the predictive wake.
  // Out of line, so the spin loop above stays small (DrainCq inlined).
  [[gnu::noinline]] Result<size_t> WaitForCompletions(std::span<Completion> out, Deadline deadline) {
    // The first sleep after a post is the one whose length repeats from call
    // to call; it is measured and, once learnt, planned (WakePredictor).
    const bool measured = posted_since_sleep_ && opt_.predictive_wake;
    posted_since_sleep_ = false;
    std::optional<Deadline::Clock::time_point> slept_at;
    std::optional<WakePredictor::Plan> plan;
    for (;;) {
      NAARPC_ASSIGN_OR_RETURN(size_t n, DrainCq(out));
      if (n > 0) {
        if (plan) ++wait_stats_.planned_early;
        if (measured && slept_at) predictor_.OnCompleted(Deadline::Clock::now() - *slept_at);
        return n;
      }
      if (disconnect_requested_.load() && !down_) MarkDown("connection closed locally");
      HandleCmEvents();
      Deadline wait = deadline;
      if (down_) {
        if (!Outstanding() || flush_deadline_.expired()) {
          return DisconnectedError(DownReason());
        }
        wait = Deadline::Earlier(deadline, flush_deadline_);
      }
      if (!armed_) {
        // Arm, then poll again before sleeping (no lost wake-up).
        if (int rc = ibv_req_notify_cq(core_->cq.get(), 0); rc != 0) {
          return InternalError(ErrnoText("ibv_req_notify_cq", rc));
        }
        armed_ = true;
        continue;
      }
      if (deadline.expired()) return size_t{0};
      if (!slept_at) {
        slept_at = Deadline::Clock::now();
        ++wait_stats_.sleeps;
        if (measured && !down_ && (plan = predictor_.PlanWait())) ++wait_stats_.planned;
      }
      const bool planned_wake_pending = plan.has_value();
      if (planned_wake_pending) wait = Deadline::Earlier(wait, Deadline::At(*slept_at + plan->wake_after));
      pollfd fds[3] = {{core_->comp_channel->fd, POLLIN, 0},
                       {core_->channel->fd, POLLIN, 0},
                       {wake_.fd(), POLLIN, 0}};
      const timespec timeout = TimeLeft(wait);
      int rc = ppoll(fds, 3, wait.infinite() ? nullptr : &timeout, nullptr);
      if (fds[2].revents & POLLIN) wake_.Drain();
      if (rc < 0 && errno != EINTR) return InternalError(ErrnoText("ppoll", errno));
      if (fds[0].revents & POLLIN) {
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        if (ibv_get_cq_event(core_->comp_channel.get(), &ev_cq, &ev_ctx) == 0) {
          ibv_ack_cq_events(ev_cq, 1);
          armed_ = false;
        }
      }
      if (rc == 0 && planned_wake_pending && !deadline.expired() &&
          Deadline::Clock::now() >= *slept_at + plan->wake_after) {
        // Woken by the plan, before the completion: spin through it.
        SpinBudget spin(plan->spin_until - plan->wake_after, deadline, /*yield_cpu=*/true);
        plan.reset();
        do {
          NAARPC_ASSIGN_OR_RETURN(size_t got, DrainCq(out));
          if (got > 0) {
            ++wait_stats_.planned_hits;
            predictor_.OnCompleted(Deadline::Clock::now() - *slept_at);
            return got;
          }
        } while (spin.Continue());
        ++wait_stats_.planned_misses;
        continue;  // the completion, when it comes, is the wait's sample
      }
      if (rc == 0 && deadline.expired()) {
        NAARPC_ASSIGN_OR_RETURN(size_t last, DrainCq(out));
        return last;
      }
    }
  }

  struct SendEntry {
    uint64_t seq;
    uint64_t user_wr_id;
    WorkOpcode opcode;
    bool signaled;
  };
  struct RecvEntry {
    uint64_t seq;
    uint64_t user_wr_id;
  };

  bool IsDown() const { return down_ || disconnect_requested_.load(); }

  bool Outstanding() const { return signaled_pending_ > 0 || !recvs_.empty(); }

  std::string DownReason() const {
    return "connection to " + peer_ + " is down: " +
           (down_ ? down_reason_ : std::string("connection closed locally"));
  }

  void MarkDown(std::string reason) {
    if (down_) return;
    down_ = true;
    down_reason_ = std::move(reason);
    flush_deadline_ = Deadline::After(kFlushGrace);
    if (flush_timer_.get() >= 0) ArmFlushTimer();
  }

  // Fails only for a bad descriptor or time: neither can occur here.
  void ArmFlushTimer() { (void)SetTimerFd(flush_timer_.get(), flush_deadline_.when()); }

  // Drains pending CM events without blocking.
  void HandleCmEvents() {
    for (;;) {
      rdma_cm_event* raw = nullptr;
      if (rdma_get_cm_event(core_->channel.get(), &raw) != 0) return;
      CmEventPtr ev(raw);
      switch (ev->event) {
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
          if (!disconnect_sent_.exchange(true)) {
            // Completes the DREQ/DREP exchange and moves the QP to ERR so
            // outstanding work is flushed.
            rdma_disconnect(core_->id.get());
          }
          MarkDown(ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL
                       ? "RDMA device removed"
                       : "peer disconnected (" + CmEventText(ev.get()) + ")");
          break;
        default:
          break;
      }
    }
  }

  // Polls the CQ once and converts up to out.size() completions (inlined
  // into the spin loop).
  [[gnu::always_inline]] Result<size_t> DrainCq(std::span<Completion> out) {
    constexpr size_t kBatch = 16;
    ibv_wc wcs[kBatch];
    int want = static_cast<int>(std::min(out.size(), kBatch));
    int n = ibv_poll_cq(core_->cq.get(), want, wcs);
    if (n < 0) return InternalError("ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) {
      out[i] = Convert(wcs[i]);
      // A flush means the QP broke: pick up the CM event that says why
      // (disconnect, device removal) so down_reason() can name it.
      if (wcs[i].status == IBV_WC_WR_FLUSH_ERR && !down_) HandleCmEvents();
    }
    return static_cast<size_t>(n);
  }

  Completion Convert(const ibv_wc& wc) {
    Completion c;
    c.status = MapWcStatus(wc.status);
    c.vendor_err = wc.vendor_err;
    if (wc.wr_id & kRecvBit) {
      uint64_t seq = wc.wr_id & ~kRecvBit;
      // Receives complete in posting order.
      while (!recvs_.empty() && recvs_.front().seq < seq) recvs_.pop_front();
      if (!recvs_.empty() && recvs_.front().seq == seq) {
        c.wr_id = recvs_.front().user_wr_id;
        recvs_.pop_front();
      }
      c.opcode = WorkOpcode::kRecv;
      // Our receive WQEs are well-formed (one SGE), so a local QP operation
      // error on one means the message did not fit: rxe reports overlong
      // SENDs that way where HCAs report LOC_LEN_ERR.
      if (wc.status == IBV_WC_LOC_QP_OP_ERR) c.status = CompletionStatus::kLocalLengthError;
      if (wc.status == IBV_WC_SUCCESS) {
        c.byte_len = wc.byte_len;
        if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) c.opcode = WorkOpcode::kRecvRdmaWithImm;
        if (wc.wc_flags & IBV_WC_WITH_IMM) {
          c.has_imm = true;
          c.imm_data = ntohl(wc.imm_data);
        }
      }
      return c;
    }
    // Sends complete in order: earlier unsignaled ones finished silently.
    uint64_t seq = wc.wr_id;
    while (!sends_.empty() && sends_.front().seq < seq) sends_.pop_front();
    if (!sends_.empty() && sends_.front().seq == seq) {
      const SendEntry& e = sends_.front();
      c.wr_id = e.user_wr_id;
      c.opcode = e.opcode;
      if (e.signaled && signaled_pending_ > 0) --signaled_pending_;
      sends_.pop_front();
    }
    return c;
  }

  std::shared_ptr<Core> core_;
  VerbsOptions opt_;
  std::string peer_;
  std::deque<SendEntry> sends_;
  std::deque<RecvEntry> recvs_;
  uint64_t next_send_seq_ = 0;
  std::vector<ibv_send_wr> wr_scratch_;  // PostSend scratch
  std::vector<ibv_sge> sge_scratch_;
  uint64_t next_recv_seq_ = 0;
  size_t signaled_pending_ = 0;
  bool armed_ = false;
  // Hybrid polling (VerbsOptions::predictive_wake).
  bool posted_since_sleep_ = false;
  WakePredictor predictor_;
  VerbsWaitStats wait_stats_;
  bool down_ = false;
  // Cross-thread: Disconnect() may run while another thread polls.
  std::atomic<bool> disconnect_sent_{false};  // rdma_disconnect done (either side)
  std::atomic<bool> disconnect_requested_{false};
  EventFd wake_;
  std::string down_reason_;
  Deadline flush_deadline_ = Deadline::Infinite();
  UniqueFd notify_ep_, flush_timer_;  // notify_fd()
};

rdma_conn_param ConnParam(const VerbsOptions& opt) {
  rdma_conn_param p{};
  p.responder_resources = kResponderResources;
  p.initiator_depth = kInitiatorDepth;
  p.retry_count = kRetryCount;
  p.rnr_retry_count = opt.rnr_retry_count;
  return p;  // no private data
}

// Creates a non-blocking event channel.
Result<EventChannelPtr> NewEventChannel() {
  EventChannelPtr ch(rdma_create_event_channel());
  if (!ch) {
    return UnavailableError(ErrnoText("rdma_create_event_channel", errno) +
                            " (no RDMA device / rdma_ucm module?)");
  }
  if (!SetNonBlocking(ch->fd)) return InternalError(ErrnoText("fcntl", errno));
  return ch;
}

// Waits for `expected` on `channel`; other events become errors.
Status ExpectCmEvent(rdma_event_channel* channel, rdma_cm_event_type expected,
                     Deadline deadline, std::string_view stage) {
  NAARPC_ASSIGN_OR_RETURN(CmEventPtr ev, NextCmEvent(channel, deadline));
  if (ev->event == expected && ev->status == 0) return Status::Ok();
  return CmEventError(ev.get(), stage);
}

int StepTimeoutMs(Deadline deadline) {
  int ms = deadline.PollTimeoutMs();
  return (ms < 0 || ms > kResolveTimeoutMs) ? kResolveTimeoutMs : (ms == 0 ? 1 : ms);
}

// ------------------------------------------------------------- Listener --

class VerbsListener final : public Listener {
 public:
  VerbsListener(EventChannelPtr channel, CmIdPtr id, const VerbsOptions& opt)
      : channel_(std::move(channel)), id_(std::move(id)), opt_(opt) {
    port_ = ntohs(rdma_get_src_port(id_.get()));
  }

  // Every connection in set-up progresses at once: a peer that never
  // completes the rdma_cm exchange (no RTU) does not delay another. Its id
  // stays on the listener's channel until ESTABLISHED, then moves to a
  // channel of its own; set-ups unfinished after kSetupTimeout are dropped.
  Result<std::unique_ptr<Connection>> Accept(Deadline deadline) override {
    for (;;) {
      DropExpiredSetups();
      Deadline wait = deadline;
      for (const auto& [id, setup] : setups_) wait = Deadline::Earlier(wait, setup.deadline);
      auto next = NextCmEvent(channel_.get(), wait, wake_.fd(), &shutdown_);
      if (!next.ok()) {
        if (next.status().code() == StatusCode::kDeadlineExceeded && !deadline.expired()) {
          continue;  // a set-up's time ran out, not ours
        }
        return next.status();
      }
      CmEventPtr ev = std::move(next).value();
      if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        return UnavailableError("listener: RDMA device removed");
      }
      rdma_cm_id* raw_id = ev->id;
      if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        ev.reset();  // ack before anything may destroy the id
        BeginSetup(raw_id);
        continue;
      }
      auto it = setups_.find(raw_id);
      if (it == setups_.end()) continue;  // not ours (the listening id's own events)
      const bool established = ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->status == 0;
      ev.reset();  // acked: the id may now migrate or be destroyed
      std::shared_ptr<Core> core = std::move(it->second.core);
      std::unique_ptr<VerbsConnection> conn = std::move(it->second.conn);
      setups_.erase(it);
      if (!established) continue;  // rejected, unreachable, gone: the next one
      auto ch = NewEventChannel();
      if (!ch.ok()) return ch.status().WithContext("accept");
      core->channel = std::move(*ch);
      if (rdma_migrate_id(raw_id, core->channel.get()) != 0) {
        return InternalError(ErrnoText("rdma_migrate_id", errno));
      }
      if (!conn) conn = std::make_unique<VerbsConnection>(std::move(core), opt_);
      conn->Established();
      return std::unique_ptr<Connection>(std::move(conn));
    }
  }

  bool SetAcceptHook(AcceptHook hook) override {
    hook_ = std::move(hook);
    return true;
  }

  uint16_t port() const override { return port_; }

  void Shutdown() override {
    shutdown_.store(true);
    wake_.Signal();
  }

 private:
  static constexpr auto kSetupTimeout = std::chrono::seconds(10);
  struct Setup {
    std::shared_ptr<Core> core;  // id on the listener's channel until established
    // With an accept hook: the connection it prepared (its QP in INIT, the
    // hook's receives posted). Declared after `core`: destroyed first.
    std::unique_ptr<VerbsConnection> conn;
    Deadline deadline = Deadline::Infinite();
  };

  // Creates the resources of a requested connection, runs the accept hook
  // on it (the QP exists and takes receives; the peer cannot send before
  // rdma_accept), and accepts it; a failure rejects it.
  void BeginSetup(rdma_cm_id* raw_id) {
    auto core = std::make_shared<Core>();
    core->id.reset(raw_id);
    if (Status s = core->CreateResources(opt_); !s.ok()) {
      rdma_reject(raw_id, nullptr, 0);
      return;  // core destroys the id
    }
    std::unique_ptr<VerbsConnection> conn;
    if (hook_) {
      conn = std::make_unique<VerbsConnection>(core, opt_);
      auto context = hook_(*conn);
      if (!context.ok()) {
        rdma_reject(raw_id, nullptr, 0);
        return;
      }
      conn->SetAcceptContext(std::move(context).value());
    }
    rdma_conn_param param = ConnParam(opt_);
    if (rdma_accept(raw_id, &param) != 0) return;  // the client went away
    setups_.insert_or_assign(raw_id, Setup{std::move(core), std::move(conn),
                                           Deadline::After(kSetupTimeout)});
  }

  void DropExpiredSetups() {
    for (auto it = setups_.begin(); it != setups_.end();) {
      it = it->second.deadline.expired() ? setups_.erase(it) : std::next(it);
    }
  }

  EventChannelPtr channel_;
  CmIdPtr id_;  // destroyed before channel_
  VerbsOptions opt_;
  uint16_t port_ = 0;
  EventFd wake_;
  std::atomic<bool> shutdown_{false};
  AcceptHook hook_;
  // Connections in set-up (Accept only: one caller at a time). Declared
  // last: their ids use channel_, so they go first.
  std::map<rdma_cm_id*, Setup> setups_;
};

// ------------------------------------------------------------ Transport --

class VerbsTransport final : public Transport {
 public:
  // `device_address`: with opt.device, that device's IPv4 address.
  VerbsTransport(VerbsOptions opt, std::string device_address,
                 std::optional<sockaddr_storage> source)
      : opt_(std::move(opt)), device_address_(std::move(device_address)), source_(source) {}

  std::string_view name() const override { return "verbs"; }

  Result<std::unique_ptr<Transport>> WithLocalAddress(
      const std::string& local_address) const override {
    VerbsOptions o = opt_;
    o.source_address = local_address;
    return NewVerbsTransport(std::move(o));
  }

  using Transport::Connect;
  Result<std::unique_ptr<Connection>> Connect(const std::string& host, uint16_t port,
                                              Deadline deadline,
                                              const ConnectOptions& options) override {
    NAARPC_ASSIGN_OR_RETURN(sockaddr_storage dst, ResolveHost(host, port, false));

    std::string target = HostPort(host, port);
    std::optional<Status> refused;  // the last refusal, if any attempt was refused
    for (int attempt = 0;; ++attempt) {
      bool rejected = false;
      auto conn = TryConnect(dst, deadline, &rejected);
      if (conn.ok()) return conn;
      if (rejected) refused = conn.status();
      if (!rejected && refused.has_value() && deadline.expired()) {
        // An attempt after a refusal ran out of time waiting for its answer
        // (a slow CM): the refusal is still the answer.
        return Status(refused->code(), "verbs connect to " + target + " refused " +
                                           std::to_string(attempt) +
                                           " time(s) until the deadline: " + refused->message());
      }
      bool retry = rejected && options.retry_refused && attempt < opt_.connect_retries &&
                   !deadline.expired();
      if (!retry) {
        std::string extra = rejected ? " after " + std::to_string(attempt + 1) + " attempt(s)" : "";
        return Status(conn.status().code(), "verbs connect to " + target + extra + ": " +
                                                conn.status().message());
      }
      auto delay = std::min<Clock::duration>(opt_.connect_retry_delay,
                                             deadline.when() - Clock::now());
      if (delay > Clock::duration::zero()) std::this_thread::sleep_for(delay);
      if (deadline.expired()) {
        // The refusal is the answer, not the deadline that ended the retries.
        return Status(conn.status().code(),
                      "verbs connect to " + target + " refused " + std::to_string(attempt + 1) +
                          " time(s) until the deadline: " + conn.status().message());
      }
    }
  }

  Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port) override {
    std::string bind_host = host;
    const bool any = host.empty() || host == "0.0.0.0" || host == "*";
    // "Any" on a selected device: that device's address only.
    if (any && !device_address_.empty()) bind_host = device_address_;
    NAARPC_ASSIGN_OR_RETURN(sockaddr_storage addr, ResolveHost(bind_host, port, true));
    NAARPC_ASSIGN_OR_RETURN(EventChannelPtr ch, NewEventChannel());
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(ch.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
      return InternalError(ErrnoText("rdma_create_id", errno));
    }
    CmIdPtr id(raw);
    std::string where = HostPort(host.empty() ? "*" : host, port);
    if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&addr)) != 0) {
      return UnavailableError(ErrnoText("rdma_bind_addr(" + where + ")", errno));
    }
    NAARPC_RETURN_IF_ERROR(CheckDevice(id.get(), opt_.device, "listen address " + where));
    if (rdma_listen(id.get(), 16) != 0) {
      return UnavailableError(ErrnoText("rdma_listen(" + where + ")", errno));
    }
    return std::unique_ptr<Listener>(
        std::make_unique<VerbsListener>(std::move(ch), std::move(id), opt_));
  }

 private:
  Result<std::unique_ptr<Connection>> TryConnect(const sockaddr_storage& dst,
                                                 Deadline deadline, bool* rejected) {
    auto core = std::make_shared<Core>();
    NAARPC_ASSIGN_OR_RETURN(core->channel, NewEventChannel());
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(core->channel.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
      return InternalError(ErrnoText("rdma_create_id", errno));
    }
    core->id.reset(raw);
    sockaddr_storage dst_copy = dst;
    sockaddr_storage src_copy = source_.value_or(sockaddr_storage{});
    if (rdma_resolve_addr(raw, source_ ? reinterpret_cast<sockaddr*>(&src_copy) : nullptr,
                          reinterpret_cast<sockaddr*>(&dst_copy), StepTimeoutMs(deadline)) != 0) {
      return UnavailableError(ErrnoText("rdma_resolve_addr", errno));
    }
    NAARPC_RETURN_IF_ERROR(ExpectCmEvent(core->channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED,
                                         deadline, "resolve address"));
    NAARPC_RETURN_IF_ERROR(CheckDevice(raw, opt_.device, "the route to this address"));
    if (rdma_resolve_route(raw, StepTimeoutMs(deadline)) != 0) {
      return UnavailableError(ErrnoText("rdma_resolve_route", errno));
    }
    NAARPC_RETURN_IF_ERROR(ExpectCmEvent(core->channel.get(), RDMA_CM_EVENT_ROUTE_RESOLVED,
                                         deadline, "resolve route"));
    NAARPC_RETURN_IF_ERROR(core->CreateResources(opt_));
    rdma_conn_param param = ConnParam(opt_);
    if (rdma_connect(raw, &param) != 0) {
      return UnavailableError(ErrnoText("rdma_connect", errno));
    }
    NAARPC_ASSIGN_OR_RETURN(CmEventPtr ev, NextCmEvent(core->channel.get(), deadline));
    if (ev->event != RDMA_CM_EVENT_ESTABLISHED || ev->status != 0) {
      *rejected = ev->event == RDMA_CM_EVENT_REJECTED;
      return CmEventError(ev.get(), "connect");
    }
    ev.reset();
    auto conn = std::make_unique<VerbsConnection>(std::move(core), opt_);
    conn->Established();
    return std::unique_ptr<Connection>(std::move(conn));
  }

  const VerbsOptions opt_;
  const std::string device_address_;
  // With opt_.device: connections originate from the device's address.
  const std::optional<sockaddr_storage> source_;
};

}  // namespace

std::vector<std::string> RdmaDeviceNames() {
  std::vector<std::string> names;
  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (list == nullptr) return names;
  for (int i = 0; i < num; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return names;
}

std::optional<VerbsWaitStats> WaitStatsOf(const Connection& connection) {
  const auto* verbs = dynamic_cast<const VerbsConnection*>(&connection);
  if (verbs == nullptr) return std::nullopt;
  return verbs->wait_stats();
}

bool RdmaDeviceAvailable() {
  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (list == nullptr) return false;
  ibv_free_device_list(list);
  return num > 0;
}

Result<std::unique_ptr<Transport>> NewVerbsTransport(VerbsOptions options) {
  if (!RdmaDeviceAvailable()) {
    return NotFoundError(
        "no RDMA device found (libibverbs lists none); use --transport=emulated "
        "on machines without RDMA hardware, or run inside the Soft-RoCE guest "
        "(tools/rxe-vm/rxe-vm)");
  }
  if (!options.device.empty()) {
    const std::vector<std::string> names = RdmaDeviceNames();
    if (std::find(names.begin(), names.end(), options.device) == names.end()) {
      std::string have;
      for (const std::string& n : names) have += (have.empty() ? "" : ", ") + n;
      return NotFoundError("RDMA device '" + options.device + "' not found (devices: " + have + ")");
    }
  }
  if (options.max_send_wr == 0 || options.max_recv_wr == 0) {
    return InvalidArgumentError("VerbsOptions: max_send_wr/max_recv_wr must be > 0");
  }
  if (options.rnr_retry_count > 7 || options.min_rnr_timer > 31) {
    return InvalidArgumentError("VerbsOptions: rnr_retry_count is 0-7 (got " +
                                std::to_string(options.rnr_retry_count) +
                                "), min_rnr_timer 0-31 (got " +
                                std::to_string(options.min_rnr_timer) + ")");
  }
  std::string device_address;
  std::optional<sockaddr_storage> source;
  if (!options.device.empty()) {
    NAARPC_ASSIGN_OR_RETURN(device_address, FindRdmaIpv4Address(options.device));
    NAARPC_ASSIGN_OR_RETURN(source, ResolveHost(device_address, 0, true));
  }
  if (!options.source_address.empty()) {
    NAARPC_ASSIGN_OR_RETURN(std::string owner, VerbsDeviceOfAddress(options.source_address));
    if (!options.device.empty() && owner != options.device) {
      return InvalidArgumentError("VerbsOptions: source address " + options.source_address +
                                  " belongs to RDMA device " + owner + ", not " + options.device);
    }
    NAARPC_ASSIGN_OR_RETURN(source, ResolveHost(options.source_address, 0, true));
  }
  return std::unique_ptr<Transport>(
      std::make_unique<VerbsTransport>(options, device_address, source));
}

Result<std::string> VerbsDeviceOfAddress(const std::string& address) {
  const std::string what = "local address " + address;
  std::string bare = address;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  auto ss = ResolveHost(bare, 0, true);
  if (!ss.ok()) return ss.status().WithContext(what);
  std::string name;
  if (rdma_event_channel* channel = rdma_create_event_channel()) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0) {
      if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&*ss)) == 0 && id->verbs != nullptr) {
        name = ibv_get_device_name(id->verbs->device);
      }
      rdma_destroy_id(id);
    }
    rdma_destroy_event_channel(channel);
  }
  if (name.empty()) {
    return NotFoundError(what + ": no RDMA device has this address (ibv_devices, rdma link show)");
  }
  return name;
}

Result<std::string> FindRdmaIpv4Address(const std::string& device) {
  if (!RdmaDeviceAvailable()) return NotFoundError("no RDMA device found");
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return InternalError(ErrnoText("getifaddrs", errno));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(ifs, freeifaddrs);
  for (ifaddrs* it = ifs; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    auto* in = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
    if (ntohl(in->sin_addr.s_addr) >> 24 == 127) continue;
    auto ch = NewEventChannel();
    if (!ch.ok()) return ch.status();
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(ch->get(), &raw, nullptr, RDMA_PS_TCP) != 0) continue;
    CmIdPtr id(raw);
    sockaddr_in probe = *in;
    probe.sin_port = 0;
    if (rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&probe)) == 0 && raw->verbs != nullptr &&
        (device.empty() || DeviceNameOf(raw) == device)) {
      char buf[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
      return std::string(buf);
    }
  }
  if (!device.empty()) {
    return NotFoundError("no local IPv4 address is bound to RDMA device '" + device +
                         "' (is its netdev up with an address?)");
  }
  return NotFoundError("no local IPv4 address is bound to an RDMA device");
}

}  // namespace naarpc
