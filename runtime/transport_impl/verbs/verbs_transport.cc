// Verbs backend: rdma_cm (RDMA_PS_TCP) + RC QPs. One event channel, PD,
// completion channel, CQ and QP per connection, all owned by a shared Core
// that memory regions keep alive (a PD cannot be freed under live MRs).
// The pieces: verbs_resources.h (RAII, Core), verbs_cm.h (rdma_cm),
// verbs_memory.h (MRs, windows), verbs_connection.h (the QP: posting,
// completions, waits), verbs_listener.h; here: Connect, Listen and the
// device queries.
#include "runtime/transport_impl/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/transport_impl/verbs/verbs_cm.h"
#include "runtime/transport_impl/verbs/verbs_connection.h"
#include "runtime/transport_impl/verbs/verbs_listener.h"
#include "runtime/transport_impl/verbs/verbs_resources.h"

namespace naarpc {
namespace verbs {
namespace {

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
    return NewListener(std::move(ch), std::move(id), opt_);
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
}  // namespace verbs

using verbs::CmIdPtr;
using verbs::NewEventChannel;
using verbs::ResolveHost;

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
  const auto* verbs = dynamic_cast<const verbs::VerbsConnection*>(&connection);
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
      std::make_unique<verbs::VerbsTransport>(options, device_address, source));
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
  if (getifaddrs(&ifs) != 0) return InternalError(verbs::ErrnoText("getifaddrs", errno));
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
        (device.empty() || verbs::DeviceNameOf(raw) == device)) {
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
