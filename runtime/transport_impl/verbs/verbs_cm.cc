#include "runtime/transport_impl/verbs/verbs_cm.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

namespace naarpc {
namespace verbs {

namespace {

// NAAICE reference library connection parameters.
constexpr uint8_t kRetryCount = 7;
constexpr uint8_t kInitiatorDepth = 1;
constexpr uint8_t kResponderResources = 1;
// CM address/route resolution timeout per step.
constexpr int kResolveTimeoutMs = 2000;

}  // namespace

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

Result<CmEventPtr> NextCmEvent(rdma_event_channel* channel, Deadline deadline, int wake_fd,
                               std::atomic<bool>* shutdown) {
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

Status CheckDevice(const rdma_cm_id* id, const std::string& device, std::string_view what) {
  if (device.empty() || id == nullptr || id->verbs == nullptr) return Status::Ok();
  const std::string actual = DeviceNameOf(id);
  if (actual == device) return Status::Ok();
  return InvalidArgumentError(std::string(what) + " is served by RDMA device '" + actual +
                              "', not by the selected device '" + device + "'");
}

rdma_conn_param ConnParam(const VerbsOptions& opt) {
  rdma_conn_param p{};
  p.responder_resources = kResponderResources;
  p.initiator_depth = kInitiatorDepth;
  p.retry_count = kRetryCount;
  p.rnr_retry_count = opt.rnr_retry_count;
  return p;  // no private data
}

Result<EventChannelPtr> NewEventChannel() {
  EventChannelPtr ch(rdma_create_event_channel());
  if (!ch) {
    return UnavailableError(ErrnoText("rdma_create_event_channel", errno) +
                            " (no RDMA device / rdma_ucm module?)");
  }
  if (!SetNonBlocking(ch->fd)) return InternalError(ErrnoText("fcntl", errno));
  return ch;
}

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

}  // namespace verbs
}  // namespace naarpc
