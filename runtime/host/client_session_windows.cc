#include "runtime/host/client_session_impl.h"

namespace naarpc {

using internal::MakeWrId;
using internal::WrIdKind;
using internal::WrKind;

Status ClientSession::Impl::OpenWindows() {
  windows.wrs.clear();
  for (size_t k = 0; k < regions.metadata_params.size(); ++k) {
    Param& p = regions.params[regions.metadata_params[k]];
    // A split parameter: one window.
    if (k > 0 && regions.metadata_params[k - 1] == regions.metadata_params[k]) continue;
    SendRequest r;
    r.wr_id = MakeWrId(WrKind::kWindow, ++windows.seq);
    r.opcode = WorkOpcode::kBindWindow;
    r.signaled = false;
    r.window = p.window.get();
    r.window_region = p.mr.get();
    r.local = {p.mr->remote_addr(), static_cast<uint32_t>(p.spec.size), p.mr->lkey()};
    r.window_access = kAccessRemoteWrite;
    windows.wrs.push_back(r);
  }
  NAARPC_RETURN_IF_ERROR(conn->PostSend(windows.wrs));
  ep.send_budget().OnPosted(static_cast<uint32_t>(windows.wrs.size()), false, 0);
  windows.open = true;
  // This call's keys, next to the addresses the NAA writes to.
  for (size_t k = 0; k < regions.metadata_params.size(); ++k) {
    auto* entry =
        reinterpret_cast<uint8_t*>(regions.metadata.data()) + k * kMetadataWindowEntrySize;
    PutBe32(entry + 8, regions.params[regions.metadata_params[k]].window->rkey());
  }
  return Status::Ok();
}

Status ClientSession::Impl::CloseWindows(std::optional<Deadline> wait) {
  windows.open = false;
  if (!conn) return Status::Ok();
  windows.wrs.clear();
  for (size_t k = 0; k < regions.metadata_params.size(); ++k) {
    if (k > 0 && regions.metadata_params[k - 1] == regions.metadata_params[k]) continue;
    SendRequest r;
    r.wr_id = MakeWrId(WrKind::kWindow, ++windows.seq);
    r.opcode = WorkOpcode::kLocalInvalidate;
    r.signaled = false;
    r.rkey = regions.params[regions.metadata_params[k]].window->rkey();
    windows.wrs.push_back(r);
  }
  windows.wrs.back().signaled = true;  // its completion frees every earlier request
  const uint64_t last = windows.wrs.back().wr_id;
  Status s = conn->PostSend(windows.wrs);
  if (s.ok() && wait) {
    ep.send_budget().OnPosted(static_cast<uint32_t>(windows.wrs.size()), true, last);
    // Blocks on the connection (a local completion, also from ContinueCall):
    // PollCompletions arms and consumes on its own.
    ForgetNotify();
    s = internal::PollUntil(*conn, *wait, "invalidating the call's memory windows",
                            [&](const Completion& c, bool& done) -> Status {
                              if (c.status != CompletionStatus::kSuccess) {
                                return internal::CompletionFailure(
                                    c, "invalidating the call's memory windows", *conn);
                              }
                              ep.OnSendCompleted(c.wr_id);
                              if (WrIdKind(c.wr_id) == WrKind::kDataRecv) ep.DataRecvConsumed();
                              done = c.wr_id == last;
                              return Status::Ok();
                            });
  }
  // Not closed in order: the caller fails the session, which ends the
  // connection and with it the NAA's access.
  return s;
}

}  // namespace naarpc
