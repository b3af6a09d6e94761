#include "bench/transport_pingpong.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "runtime/engine/send_queue_budget.h"

namespace naarpc::bench {
namespace {

constexpr auto kWait = std::chrono::seconds(60);

struct Hello {
  uint64_t size;
  uint64_t addr;
  uint32_t rkey;
  uint32_t pad;
};

SendRequest Request(uint64_t wr_id, WorkOpcode op, LocalBuffer local, uint64_t remote_addr = 0,
                    uint32_t rkey = 0) {
  SendRequest r;
  r.wr_id = wr_id;
  r.opcode = op;
  r.local = local;
  r.remote_addr = remote_addr;
  r.rkey = rkey;
  r.signaled = true;
  return r;
}

// Waits for the completion of `wr_id`; completions of other work are
// dropped (their successes are implied by later ones).
// With `budget`, send completions are reported to it (wr_id ~0: returns
// once a batch made its signal no longer pending).
Result<Completion> WaitFor(Connection& conn, uint64_t wr_id, SendQueueBudget* budget = nullptr) {
  const Deadline deadline = Deadline::After(kWait);
  Completion batch[8];
  for (;;) {
    NAARPC_ASSIGN_OR_RETURN(size_t n, conn.PollCompletions(batch, deadline));
    if (n == 0) return DeadlineExceededError("ping-pong: no completion");
    std::optional<Completion> found;
    for (size_t i = 0; i < n; ++i) {
      if (batch[i].status != CompletionStatus::kSuccess) {
        return TransportError("ping-pong: completion failed: " +
                              std::string(CompletionStatusName(batch[i].status)));
      }
      if (budget != nullptr) budget->OnSendCompleted(batch[i].wr_id);
      if (batch[i].wr_id == wr_id) found = batch[i];
    }
    if (found) return *found;
    if (wr_id == ~0ull && budget != nullptr && !budget->signal_pending()) return Completion{};
  }
}

Status ServeOne(Connection& conn) {
  Hello hello{};
  std::vector<std::byte> ctrl(sizeof(Hello));
  NAARPC_ASSIGN_OR_RETURN(auto ctrl_mr, conn.RegisterMemory(ctrl.data(), ctrl.size(),
                                                            kAccessLocalWrite));
  const LocalBuffer ctrl_buf{ctrl_mr->remote_addr(), uint32_t(ctrl.size()), ctrl_mr->lkey()};
  NAARPC_RETURN_IF_ERROR(conn.PostRecv(1, ctrl_buf));
  NAARPC_RETURN_IF_ERROR(WaitFor(conn, 1).status());
  std::memcpy(&hello, ctrl.data(), sizeof hello);
  std::vector<std::byte> buffer(hello.size);
  NAARPC_ASSIGN_OR_RETURN(auto mr, conn.RegisterMemory(buffer.data(), buffer.size(),
                                                       kAccessLocalWrite | kAccessRemoteWrite));
  // Two receives up, as naarpc keeps them (wire_ops.h, kDataRecvDepth): the
  // one a message consumed is replaced after the echo is posted.
  uint64_t id = 10, last_posted = 11;
  NAARPC_RETURN_IF_ERROR(conn.PostRecv(10, {}));
  NAARPC_RETURN_IF_ERROR(conn.PostRecv(11, {}));
  Hello answer{hello.size, mr->remote_addr(), mr->rkey(), 0};
  std::memcpy(ctrl.data(), &answer, sizeof answer);
  SendRequest send = Request(2, WorkOpcode::kSend, ctrl_buf);
  NAARPC_RETURN_IF_ERROR(conn.PostSend(std::span<const SendRequest>(&send, 1)));
  const LocalBuffer data{mr->remote_addr(), uint32_t(buffer.size()), mr->lkey()};
  // Echoes are signaled as naarpc signals its replies (send_queue_budget.h);
  // the server does not wait for them, so a signaled one stays pending until
  // WaitFor sees it go by.
  SendQueueBudget budget(conn.send_queue_depth(), 1);
  for (;;) {
    NAARPC_RETURN_IF_ERROR(WaitFor(conn, id, &budget).status());
    SendRequest echo = Request(1ull << 40 | id, WorkOpcode::kRdmaWriteWithImm, data, hello.addr,
                               hello.rkey);
    echo.imm_data = uint32_t(id);
    if (budget.NeedsReclaim(1)) {
      while (budget.signal_pending()) NAARPC_RETURN_IF_ERROR(WaitFor(conn, ~0ull, &budget).status());
    }
    echo.signaled = budget.ShouldSignal(1);
    NAARPC_RETURN_IF_ERROR(conn.PostSend(std::span<const SendRequest>(&echo, 1)));
    budget.OnPosted(1, echo.signaled, echo.wr_id);
    NAARPC_RETURN_IF_ERROR(conn.PostRecv(++last_posted, {}));
    ++id;
  }
}

}  // namespace

void ServeTransportPingPong(Listener& listener) {
  for (;;) {
    auto conn = listener.Accept(Deadline::Infinite());
    if (!conn.ok()) {
      std::fprintf(stderr, "ping-pong server: %s\n", conn.status().ToString().c_str());
      _exit(1);
    }
    (void)ServeOne(**conn);  // ends when the host disconnects
  }
}

Result<std::unique_ptr<TransportPingPong>> TransportPingPong::Open(Transport& transport,
                                                                   const std::string& host,
                                                                   uint16_t port, size_t bytes) {
  std::unique_ptr<TransportPingPong> p(new TransportPingPong());
  NAARPC_ASSIGN_OR_RETURN(p->conn_, transport.Connect(host, port, Deadline::After(kWait)));
  Connection& conn = *p->conn_;
  p->buffer_.assign(bytes, std::byte{0x5a});
  NAARPC_ASSIGN_OR_RETURN(p->mr_, conn.RegisterMemory(p->buffer_.data(), bytes,
                                                      kAccessLocalWrite | kAccessRemoteWrite));
  std::vector<std::byte> ctrl(sizeof(Hello));
  NAARPC_ASSIGN_OR_RETURN(auto ctrl_mr, conn.RegisterMemory(ctrl.data(), ctrl.size(),
                                                            kAccessLocalWrite));
  const LocalBuffer ctrl_buf{ctrl_mr->remote_addr(), uint32_t(ctrl.size()), ctrl_mr->lkey()};
  NAARPC_RETURN_IF_ERROR(conn.PostRecv(1, ctrl_buf));
  Hello hello{bytes, p->mr_->remote_addr(), p->mr_->rkey(), 0};
  std::vector<std::byte> out(sizeof(Hello));
  std::memcpy(out.data(), &hello, sizeof hello);
  NAARPC_ASSIGN_OR_RETURN(auto out_mr, conn.RegisterMemory(out.data(), out.size(),
                                                           kAccessLocalWrite));
  SendRequest send = Request(2, WorkOpcode::kSend,
                             {out_mr->remote_addr(), uint32_t(out.size()), out_mr->lkey()});
  NAARPC_RETURN_IF_ERROR(conn.PostSend(std::span<const SendRequest>(&send, 1)));
  NAARPC_RETURN_IF_ERROR(WaitFor(conn, 1).status());
  Hello answer{};
  std::memcpy(&answer, ctrl.data(), sizeof answer);
  p->peer_addr_ = answer.addr;
  p->peer_rkey_ = answer.rkey;
  p->budget_ = SendQueueBudget(conn.send_queue_depth(), 1);
  p->next_id_ = 100;
  NAARPC_RETURN_IF_ERROR(conn.PostRecv(p->next_id_, {}));  // the first answer's
  p->last_posted_ = p->next_id_;
  return p;
}

bool TransportPingPong::RoundTrip() {
  // The answer lands in the oldest posted receive; the spare is posted
  // after the write, while the peer works (as naarpc does).
  const uint64_t recv_id = next_id_++;
  const uint64_t write_id = 1ull << 41 | recv_id;
  SendRequest write = Request(write_id, WorkOpcode::kRdmaWriteWithImm,
                              {mr_->remote_addr(), uint32_t(buffer_.size()), mr_->lkey()},
                              peer_addr_, peer_rkey_);
  write.imm_data = uint32_t(recv_id);
  // Signaled as naarpc signals its calls (send_queue_budget.h).
  write.signaled = budget_.ShouldSignal(1);
  Status s = conn_->PostSend(std::span<const SendRequest>(&write, 1));
  if (s.ok()) budget_.OnPosted(1, write.signaled, write_id);
  if (s.ok()) s = conn_->PostRecv(++last_posted_, {});
  // The answer, and the write's completion if signaled, in either order.
  bool written = !write.signaled, answered = false;
  const Deadline deadline = Deadline::After(kWait);
  Completion batch[8];
  while (s.ok() && !(written && answered)) {
    auto n = conn_->PollCompletions(batch, deadline);
    if (!n.ok()) {
      s = n.status();
      break;
    }
    if (*n == 0) s = DeadlineExceededError("no answer");
    for (size_t i = 0; i < *n && s.ok(); ++i) {
      if (batch[i].status != CompletionStatus::kSuccess) {
        s = TransportError(std::string(CompletionStatusName(batch[i].status)));
      }
      written |= batch[i].wr_id == write_id;
      budget_.OnSendCompleted(batch[i].wr_id);
      answered |= batch[i].wr_id == recv_id;
    }
  }
  if (!s.ok()) std::fprintf(stderr, "ping-pong: %s\n", s.ToString().c_str());
  return s.ok();
}

}  // namespace naarpc::bench
