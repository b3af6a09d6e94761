// A verbs connection: one RC queue pair on an rdma_cm id, with its CQ and
// completion channel (Core), posting, completion conversion, and the waits
// (bounded spin, then sleep; predictive wake). Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_CONNECTION_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_CONNECTION_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/transport.h"
#include "runtime/transport_impl/verbs/verbs_memory.h"
#include "runtime/transport_impl/verbs/verbs_options.h"
#include "runtime/transport_impl/verbs/verbs_resources.h"
#include "runtime/transport_impl/verbs/wake_predictor.h"
#include "runtime/unique_fd.h"

namespace naarpc {
namespace verbs {

class VerbsConnection final : public Connection {
 public:
  VerbsConnection(std::shared_ptr<Core> core, const VerbsOptions& opt);
  ~VerbsConnection() override { Disconnect().IgnoreError(); }

  // Once the connection is established (the QP in RTS).
  void Established() { core_->SetMinRnrTimer(opt_.min_rnr_timer); }

  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
    return RegisterRegion(core_, addr, length, access);
  }
  bool supports_memory_windows() const override { return core_->mw_type2; }
  Result<std::unique_ptr<MemoryWindow>> AllocateWindow() override {
    return verbs::AllocateWindow(core_);
  }
  Status PostSend(std::span<const SendRequest> requests) override;
  Status PostRecv(uint64_t wr_id, const LocalBuffer& buffer) override;
  // The spin loop is the hottest code of a 64 B call: aligned so that it
  // never straddles a page (verbs_connection.cc).
  [[gnu::aligned(2048)]] Result<size_t> PollCompletions(std::span<Completion> out,
                                                        Deadline deadline) override;
  Status RequestNotify(NotifyMode mode) override;
  Result<bool> WaitNotify(Deadline deadline) override;
  Result<size_t> TryPollCompletions(std::span<Completion> out) override;
  int notify_fd() override;
  uint32_t max_inline_data() const override { return core_->max_inline; }
  uint32_t send_queue_depth() const override { return core_->send_depth; }
  uint32_t max_send_sge() const override { return core_->max_send_sge; }
  // Also safe from another thread: wakes a blocked PollCompletions.
  Status Disconnect() override;
  std::string peer_name() const override { return peer_; }
  std::string down_reason() const override {
    return down_.is_down ? down_.reason : std::string();
  }

  const VerbsWaitStats& wait_stats() const { return hybrid_.stats; }

 private:
  // Posted work not yet completed, to map completions back to the caller's
  // wr_ids (ours carry a sequence), and PostSend's scratch.
  struct PostedWork {
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
    std::deque<SendEntry> sends;
    std::deque<RecvEntry> recvs;
    uint64_t next_send_seq = 0;
    uint64_t next_recv_seq = 0;
    size_t signaled_pending = 0;
    // Reused across calls: no allocation on the data path once warm.
    std::vector<ibv_send_wr> wr_scratch;
    std::vector<ibv_sge> sge_scratch;
  };
  // Hybrid polling (VerbsOptions::predictive_wake).
  struct HybridPoll {
    bool posted_since_sleep = false;
    WakePredictor predictor;
    VerbsWaitStats stats;
  };
  // Why and since when the connection is down.
  struct DownState {
    bool is_down = false;
    std::string reason;
    Deadline flush_deadline = Deadline::Infinite();
  };
  // notify_fd(): the epoll set and the flush-grace timer.
  struct NotifyFds {
    UniqueFd ep, flush_timer;
  };

  // Out of line, so the spin loop stays small (DrainCq inlined).
  [[gnu::noinline]] Result<size_t> WaitForCompletions(std::span<Completion> out,
                                                      Deadline deadline);
  [[gnu::always_inline]] Result<size_t> DrainCq(std::span<Completion> out);
  Completion Convert(const ibv_wc& wc);
  // Takes and acknowledges one raised CQ event (the CQ is then unarmed);
  // false if none was raised.
  bool TakeCqEvent();

  bool IsDown() const { return down_.is_down || disconnect_requested_.load(); }
  bool Outstanding() const { return work_.signaled_pending > 0 || !work_.recvs.empty(); }
  // Down, and nothing more will complete: every outstanding request
  // flushed, or the flush grace over. Then every poll reports kDisconnected.
  bool DownAndSettled() const {
    return down_.is_down && (!Outstanding() || down_.flush_deadline.expired());
  }
  // A local Disconnect() seen: the connection is down from now on.
  void NoteLocalDisconnect() {
    if (disconnect_requested_.load() && !down_.is_down) MarkDown("connection closed locally");
  }
  // A poll that found no completion and will not sleep (no ppoll to report
  // the CM channel): reads CM events itself, then kDisconnected once down
  // and settled, else 0 completions.
  Result<size_t> NoCompletionWithoutSleep();
  std::string DownReason() const;
  void MarkDown(std::string reason);
  // Fails only for a bad descriptor or time: neither can occur here.
  void ArmFlushTimer() {
    (void)SetTimerFd(notify_.flush_timer.get(), down_.flush_deadline.when());
  }
  // Drains pending CM events without blocking.
  void HandleCmEvents();

  std::shared_ptr<Core> core_;
  VerbsOptions opt_;
  std::string peer_;
  PostedWork work_;
  bool armed_ = false;
  HybridPoll hybrid_;
  DownState down_;
  // Cross-thread: Disconnect() may run while another thread polls.
  std::atomic<bool> disconnect_sent_{false};  // rdma_disconnect done (either side)
  std::atomic<bool> disconnect_requested_{false};
  EventFd wake_;
  NotifyFds notify_;
};

}  // namespace verbs
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_CONNECTION_H_
