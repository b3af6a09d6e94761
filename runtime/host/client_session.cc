#include "runtime/host/client_session_impl.h"

#include <chrono>

namespace naarpc {

using internal::IsReturn;
using internal::Quote;

ClientSession::ClientSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClientSession::~ClientSession() { Close().IgnoreError(); }

Result<std::unique_ptr<ClientSession>> ClientSession::Open(
    Transport& transport, const std::string& host, uint16_t port,
    std::vector<RegionSpec> regions, const ClientOptions& options) {
  return Open(transport, host, port, std::move(regions), options, Deadline::Infinite());
}

Result<std::unique_ptr<ClientSession>> ClientSession::Open(
    Transport& transport, const std::string& host, uint16_t port,
    std::vector<RegionSpec> regions, const ClientOptions& options, Deadline deadline) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.memory_windows.value_or(false)) {
    if (options.dialect != Dialect::kSpec) {
      return InvalidArgumentError(
          "ClientOptions::memory_windows needs the spec dialect (the window keys travel in its "
          "metadata region, docs/protocol.md 4.5)");
    }
    for (const RegionSpec& r : regions) {
      if (r.stream.enabled()) {
        return InvalidArgumentError("ClientOptions::memory_windows: not with streams (" +
                                    Quote(r.name) + "); their rings keep connection-long keys");
      }
      if (IsReturn(r) && r.size > UINT32_MAX) {
        return InvalidArgumentError("ClientOptions::memory_windows: result " + Quote(r.name) +
                                    " is larger than one window binds here (4 GiB - 1)");
      }
    }
    impl->windows.enabled = true;
  }
  NAARPC_RETURN_IF_ERROR(impl->BuildLayout(std::move(regions)));
  NAARPC_RETURN_IF_ERROR(impl->sm.Transition(CommState::kReady));
  const std::string where = "NAA at " + HostPort(host, port);
  ConnectOptions connect;
  connect.retry_refused = options.retry_refused_connect;
  const auto connect_start = std::chrono::steady_clock::now();
  auto conn = transport.Connect(
      host, port, Deadline::Earlier(deadline, Deadline::After(options.connect_timeout)), connect);
  if (!conn.ok()) {
    if (conn.status().code() == StatusCode::kDeadlineExceeded && deadline.expired()) {
      return DeadlineExceededError("connecting to " + where +
                                   ": the call's deadline passed before the connection was "
                                   "established");
    }
    return conn.status().WithContext("connecting to " + where);
  }
  impl->conn = std::move(conn).value();
  const auto connected = std::chrono::steady_clock::now();
  impl->setup_times.connect = connected - connect_start;
  NAARPC_RETURN_IF_ERROR(impl->sm.Transition(CommState::kConnected));
  Status s;
  if (impl->windows.enabled && !impl->conn->supports_memory_windows()) {
    s = FailedPreconditionError(
        "ClientOptions::memory_windows: the transport's device has no type-2 memory windows");
  }
  if (s.ok()) s = impl->Register();
  if (s.ok()) s = impl->RunMrsp(deadline);
  if (s.ok()) {
    impl->setup_times.register_and_mrsp = std::chrono::steady_clock::now() - connected;
    // A call posts at most one write per host-side wire region.
    uint32_t max_requests = 0;
    for (const auto& w : impl->regions.wire) max_requests += !w.internal;
    // Per-call windows: a bind per return parameter before the writes.
    if (impl->windows.enabled) {
      max_requests += static_cast<uint32_t>(impl->regions.metadata_params.size());
    }
    impl->ep.StartSendBudget(max_requests);
  }
  if (!s.ok()) {
    impl->sm.Fail();
    impl->conn->Disconnect().IgnoreError();
    return s.WithContext(where);
  }
  return std::unique_ptr<ClientSession>(new ClientSession(std::move(impl)));
}

std::span<std::byte> ClientSession::buffer(size_t index) {
  if (index >= impl_->regions.params.size()) return {};
  auto& p = impl_->regions.params[index];
  if (p.data == nullptr) return {};
  return {p.data, p.spec.size};
}

size_t ClientSession::region_count() const { return impl_->regions.params.size(); }

bool ClientSession::StageGatherInput(size_t index, const Layout& layout, size_t elem,
                                     std::span<const std::byte* const> bases) {
  return impl_->StageGather(index, layout, elem, bases);
}

void ClientSession::DropStagedInputs() {
  if (!impl_->call.active) impl_->DropStaged();  // a chain in flight still reads them
}
const RegionSpec& ClientSession::spec(size_t index) const {
  return impl_->regions.params.at(index).spec;
}

Status ClientSession::Call(uint8_t function_code, Deadline deadline, const CallOptions& options) {
  return impl_->DoCall(function_code, deadline, options);
}

Status ClientSession::StartCall(uint8_t function_code, Deadline deadline,
                                const CallOptions& options) {
  if (!impl_->streams.empty()) {
    return InvalidArgumentError("StartCall: a session with streams runs its calls with Call()");
  }
  return impl_->BeginCall(function_code, deadline, options);
}

std::optional<Status> ClientSession::ContinueCall() { return impl_->ContinueCall(); }
std::optional<Status> ClientSession::WaitCall(Deadline until) { return impl_->WaitCall(until); }

Status ClientSession::FinishCall() { return impl_->FinishCall(); }

void ClientSession::AbandonCall() {
  if (impl_->call.active) {
    impl_->EndCall(CancelledError("the call was abandoned (its client was destroyed)")).IgnoreError();
  }
}

int ClientSession::notify_fd() const { return impl_->conn ? impl_->conn->notify_fd() : -1; }

bool ClientSession::call_in_flight() const { return impl_->call.active; }

CommState ClientSession::state() const { return impl_->sm.state(); }

const SetupTimes& ClientSession::setup_times() const { return impl_->setup_times; }

bool ClientSession::PeerGone() {
  if (impl_->sm.state() == CommState::kError || !impl_->conn) return true;
  if (impl_->call.active) return false;
  // One non-blocking progress step: a disconnect shows as kDisconnected.
  Result<bool> r = impl_->conn->WaitNotify(Deadline::Now());
  if (r.ok()) {
    // It consumed a raised event (the CQ is unarmed), or none is raised.
    if (*r) impl_->notify.armed = false;
    impl_->notify.maybe_raised = false;
  }
  if (r.ok() || r.status().code() != StatusCode::kDisconnected) return false;
  impl_->Fail(r.status()).IgnoreError();
  return true;
}

Dialect ClientSession::dialect() const { return impl_->options.dialect; }
uint64_t ClientSession::calls_completed() const { return impl_->calls_completed; }

ClientSession::StreamBytes ClientSession::last_stream_bytes() const {
  StreamBytes bytes;
  for (const Impl::Stream& st : impl_->streams) {
    (st.input ? bytes.sent : bytes.received) += st.input ? st.outbound.bytes() : st.inbound.bytes();
  }
  return bytes;
}

Status ClientSession::Close() {
  if (!impl_ || !impl_->conn) return Status::Ok();
  Status s = impl_->conn->Disconnect();
  if (!impl_->sm.failed() && impl_->sm.state() != CommState::kDisconnected) {
    impl_->sm.Transition(CommState::kDisconnected).IgnoreError();
  }
  // Deregister before the memory goes away, then drop the connection.
  impl_->windows.open = false;
  for (auto& p : impl_->regions.params) p.window.reset();  // before its region
  for (auto& p : impl_->regions.params) p.mr.reset();
  impl_->regions.metadata_mr.reset();
  impl_->DropStaged();
  if (impl_->options.user_memory) impl_->options.user_memory->ForgetConnection(impl_->conn.get());
  impl_->ep.ReleaseRegistrations();
  impl_->conn.reset();
  return s;
}

}  // namespace naarpc
