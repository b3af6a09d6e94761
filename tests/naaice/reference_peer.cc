#include "tests/naaice/reference_peer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "runtime/wire/mrsp.h"
#include "naarpc/protocol.h"

namespace naarpc::naaice {
namespace {

constexpr uint8_t kInternal = 0x01, kSingleSend = 0x02, kInput = 0x04, kOutput = 0x08;

std::string OpcodeName(WorkOpcode op) {
  switch (op) {
    case WorkOpcode::kSend: return "SEND";
    case WorkOpcode::kRdmaWrite: return "RDMA_WRITE";
    case WorkOpcode::kRdmaWriteWithImm: return "RDMA_WRITE_WITH_IMM";
    case WorkOpcode::kRecv: return "RECV";
    case WorkOpcode::kRecvRdmaWithImm: return "RECV_RDMA_WITH_IMM";
    case WorkOpcode::kBindWindow: return "BIND_MW";
    case WorkOpcode::kLocalInvalidate: return "LOCAL_INV";
  }
  return "?";
}

Status Failed(const Completion& c, std::string_view what) {
  return TransportError(std::string(what) + ": completion of " + OpcodeName(c.opcode) +
                        " failed: " + std::string(CompletionStatusName(c.status)));
}

LocalBuffer Whole(const MemoryRegion& mr, size_t length) {
  return {mr.remote_addr(), static_cast<uint32_t>(length), mr.lkey()};
}

SendRequest Send(uint64_t wr_id, LocalBuffer local) {
  SendRequest r;
  r.wr_id = wr_id;
  r.opcode = WorkOpcode::kSend;
  r.local = local;
  r.signaled = true;
  r.solicited = true;
  return r;
}

SendRequest Write(uint64_t wr_id, LocalBuffer local, uint64_t remote, uint32_t rkey) {
  SendRequest r;
  r.wr_id = wr_id;
  r.opcode = WorkOpcode::kRdmaWrite;
  r.local = local;
  r.remote_addr = remote;
  r.rkey = rkey;
  r.signaled = true;  // sq_sig_all = 1
  return r;
}

}  // namespace

// ---- SolicitedWaiter ---------------------------------------------------------

Result<SolicitedWaiter> SolicitedWaiter::Arm(Connection& conn) {
  NAARPC_RETURN_IF_ERROR(conn.RequestNotify(NotifyMode::kSolicitedOnly));
  return SolicitedWaiter(conn);
}

Result<std::vector<Completion>> SolicitedWaiter::Next(Deadline deadline,
                                                      const std::string& waiting_for) {
  NAARPC_ASSIGN_OR_RETURN(bool event, conn_->WaitNotify(deadline));
  if (!event) {
    return DeadlineExceededError("reference peer: no solicited event while waiting for " +
                                 waiting_for);
  }
  NAARPC_RETURN_IF_ERROR(conn_->RequestNotify(NotifyMode::kSolicitedOnly));
  std::vector<Completion> all;
  Completion batch[16];
  for (;;) {
    Result<size_t> n = conn_->TryPollCompletions(batch);
    if (!n.ok()) {
      if (!all.empty()) break;  // hand over what came before the end
      return n.status();
    }
    if (*n == 0) break;
    all.insert(all.end(), batch, batch + *n);
  }
  return all;
}

// ---- ReferenceHost -----------------------------------------------------------

ReferenceHost::~ReferenceHost() { Close(); }

void ReferenceHost::Close() {
  if (!conn_) return;
  conn_->Disconnect().IgnoreError();
  for (Region& r : regions_) r.mr.reset();
  mrsp_send_mr_.reset();
  mrsp_recv_mr_.reset();
  conn_.reset();
}

std::span<std::byte> ReferenceHost::buffer(size_t index) {
  if (index >= regions_.size()) return {};
  return regions_[index].data;
}

Result<std::unique_ptr<ReferenceHost>> ReferenceHost::Connect(Transport& transport,
                                                              const std::string& host,
                                                              uint16_t port,
                                                              std::vector<RefRegion> regions,
                                                              Deadline deadline,
                                                              bool strict_order) {
  bool internal_seen = false;
  for (const RefRegion& r : regions) {
    if ((r.flags & kInternal) == 0 && internal_seen) {
      return InvalidArgumentError("reference host: internal regions must come last");
    }
    internal_seen |= (r.flags & kInternal) != 0;
  }
  NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                          transport.Connect(host, port, deadline));
  // Armed before anything is posted, as the library does after connecting.
  NAARPC_ASSIGN_OR_RETURN(SolicitedWaiter waiter, SolicitedWaiter::Arm(*conn));
  std::unique_ptr<ReferenceHost> h(new ReferenceHost(std::move(conn), waiter));
  h->strict_order_ = strict_order;
  for (const RefRegion& spec : regions) {
    Region r;
    r.spec = spec;
    if ((spec.flags & kInternal) == 0) {
      r.data.assign(spec.size, std::byte{0});
      const uint32_t access =
          (spec.flags & kOutput) ? (kAccessLocalWrite | kAccessRemoteWrite) : kAccessLocalWrite;
      NAARPC_ASSIGN_OR_RETURN(r.mr, h->conn_->RegisterMemory(r.data.data(), r.data.size(), access));
    }
    h->regions_.push_back(std::move(r));
  }
  NAARPC_RETURN_IF_ERROR(h->RunMrsp(deadline));
  return h;
}

Status ReferenceHost::RunMrsp(Deadline deadline) {
  mrsp_send_.assign(kMaxMrspMessageSize, 0);
  mrsp_recv_.assign(kMaxMrspMessageSize, 0);
  NAARPC_ASSIGN_OR_RETURN(mrsp_send_mr_,
                          conn_->RegisterMemory(mrsp_send_.data(), mrsp_send_.size(), 0));
  NAARPC_ASSIGN_OR_RETURN(mrsp_recv_mr_, conn_->RegisterMemory(mrsp_recv_.data(), mrsp_recv_.size(),
                                                               kAccessLocalWrite));
  AdvertisementRequestMessage req;
  for (const Region& r : regions_) {
    RegionRequest e;
    e.flags = r.spec.flags;
    e.size = static_cast<uint32_t>(r.spec.size);
    if (r.mr) {
      e.addr = r.mr->remote_addr();
      e.rkey = r.mr->rkey();
    } else {
      e.requested_naa_address = r.spec.naa_address;
    }
    req.regions.push_back(e);
  }
  NAARPC_ASSIGN_OR_RETURN(size_t len, EncodeMrsp(MrspMessage(req), mrsp_send_));
  // The receive for the answer first, then the request.
  const uint64_t recv_id = next_wr_id_++, send_id = next_wr_id_++;
  NAARPC_RETURN_IF_ERROR(conn_->PostRecv(recv_id, Whole(*mrsp_recv_mr_, mrsp_recv_.size())));
  const SendRequest send = Send(send_id, Whole(*mrsp_send_mr_, len));
  NAARPC_RETURN_IF_ERROR(conn_->PostSend(std::span<const SendRequest>(&send, 1)));
  enum { kSending, kReceiving, kDone } state = kSending;
  uint32_t answer_len = 0;
  while (state != kDone) {
    NAARPC_ASSIGN_OR_RETURN(std::vector<Completion> batch,
                            waiter_.Next(deadline, "the MRSP answer"));
    for (const Completion& c : batch) {
      if (c.status != CompletionStatus::kSuccess) return Failed(c, "reference host MRSP");
      if (state == kSending && c.opcode == WorkOpcode::kSend && c.wr_id == send_id) {
        state = kReceiving;
      } else if (state == kReceiving && c.opcode == WorkOpcode::kRecv && c.wr_id == recv_id) {
        answer_len = c.byte_len;
        state = kDone;
      } else {
        return ProtocolError("reference host MRSP: unexpected " + OpcodeName(c.opcode) +
                             " completion in state " + (state == kSending ? "MRSP_SENDING"
                                                                          : "MRSP_RECEIVING"));
      }
    }
  }
  NAARPC_ASSIGN_OR_RETURN(MrspMessage answer,
                          DecodeMrsp(std::span<const uint8_t>(mrsp_recv_.data(), answer_len)));
  if (const auto* err = std::get_if<ErrorMessage>(&answer)) {
    return Status(StatusCode::kMrspError,
                  "reference host: the NAA answered MRSP error " + std::to_string(err->code))
        .set_wire_code(err->code);
  }
  const auto* adv = std::get_if<AdvertisementMessage>(&answer);
  if (adv == nullptr) return ProtocolError("reference host: MRSP answer is not an advertisement");
  size_t k = 0;
  for (Region& r : regions_) {
    if (!r.mr) continue;
    if (k >= adv->regions.size()) return ProtocolError("reference host: too few regions advertised");
    const RegionAdvertisement& a = adv->regions[k++];
    if (a.size < r.spec.size) return ProtocolError("reference host: advertised region too small");
    r.peer_addr = a.addr;
    r.peer_rkey = a.rkey;
  }
  if (k != adv->regions.size()) return ProtocolError("reference host: too many regions advertised");
  return Status::Ok();
}

Result<uint8_t> ReferenceHost::Call(uint8_t function_code, uint32_t user_bits, Deadline deadline) {
  if (!conn_) return FailedPreconditionError("reference host: closed");
  // Exactly one zero-length receive per call, before the writes.
  const uint64_t recv_id = next_wr_id_++;
  NAARPC_RETURN_IF_ERROR(conn_->PostRecv(recv_id, LocalBuffer{}));
  std::vector<SendRequest> writes;
  for (const Region& r : regions_) {
    if (!r.mr || !(r.spec.flags & kInput)) continue;
    if ((r.spec.flags & kSingleSend) && calls_ > 0) continue;
    writes.push_back(Write(next_wr_id_++, Whole(*r.mr, r.data.size()), r.peer_addr, r.peer_rkey));
  }
  if (writes.empty()) {
    for (const Region& r : regions_) {
      if (r.mr && (r.spec.flags & kOutput)) {
        writes.push_back(Write(next_wr_id_++, Whole(*r.mr, 0), r.peer_addr, r.peer_rkey));
        break;
      }
    }
  }
  if (writes.empty()) return InvalidArgumentError("reference host: no region to write");
  SendRequest& last = writes.back();
  last.opcode = WorkOpcode::kRdmaWriteWithImm;
  last.imm_data = uint32_t{function_code} | 0x80u | (user_bits << 8);
  last.solicited = true;
  NAARPC_RETURN_IF_ERROR(conn_->PostSend(writes));
  size_t writes_done = 0;
  enum { kSending, kReceiving } state = kSending;
  std::optional<uint8_t> early_reply;  // !strict_order_: a reply before our write's completion
  for (;;) {
    NAARPC_ASSIGN_OR_RETURN(std::vector<Completion> batch,
                            waiter_.Next(deadline, "the NAA's answer to function " +
                                                       std::to_string(function_code)));
    for (const Completion& c : batch) {
      if (c.status != CompletionStatus::kSuccess) return Failed(c, "reference host call");
      const bool is_write =
          c.opcode == WorkOpcode::kRdmaWrite || c.opcode == WorkOpcode::kRdmaWriteWithImm;
      if (state == kSending && is_write && c.wr_id == writes[writes_done].wr_id) {
        if (++writes_done == writes.size()) {
          state = kReceiving;
          if (early_reply) {
            ++calls_;
            ++reordered_;
            return *early_reply;
          }
        }
      } else if (state == kSending && c.opcode == WorkOpcode::kRecvRdmaWithImm && !early_reply &&
                 c.wr_id == recv_id && c.has_imm && !strict_order_) {
        early_reply = static_cast<uint8_t>(c.imm_data >> 8);
      } else if (state == kSending && c.opcode == WorkOpcode::kRecvRdmaWithImm) {
        return ProtocolError("reference host: reply polled before the completion of the host's "
                             "last write");
      } else if (state == kReceiving && c.opcode == WorkOpcode::kRecvRdmaWithImm &&
                 c.wr_id == recv_id && c.has_imm) {
        ++calls_;
        return static_cast<uint8_t>(c.imm_data >> 8);  // ntohl(imm) >> 8 into a uint8_t
      } else {
        return ProtocolError("reference host: unexpected " + OpcodeName(c.opcode) +
                             " completion in state " +
                             (state == kSending ? "DATA_SENDING" : "DATA_RECEIVING"));
      }
    }
  }
}

// ---- ReferenceNaa ------------------------------------------------------------

ReferenceNaa::~ReferenceNaa() { Shutdown(); }

Result<std::unique_ptr<ReferenceNaa>> ReferenceNaa::Start(Transport& transport,
                                                          const std::string& host, uint16_t port,
                                                          ReferenceNaaOptions options) {
  NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Listener> listener, transport.Listen(host, port));
  std::unique_ptr<ReferenceNaa> naa(new ReferenceNaa(std::move(listener), std::move(options)));
  naa->accept_thread_ = std::thread([p = naa.get()] { p->AcceptLoop(); });
  return naa;
}

uint16_t ReferenceNaa::port() const { return listener_->port(); }

std::vector<std::string> ReferenceNaa::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}

std::vector<std::string> ReferenceNaa::TakeViolations() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(violations_, {});
}

bool ReferenceNaa::WaitForClosedConnections(uint64_t n, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return closed_cv_.wait_until(lock, deadline.when(), [&] { return closed_ >= n; });
}

void ReferenceNaa::Violation(std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  violations_.push_back(std::move(what));
}

void ReferenceNaa::Shutdown() {
  if (stopping_.exchange(true)) return;
  listener_->Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) c->Disconnect().IgnoreError();  // wakes their waits
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void ReferenceNaa::AcceptLoop() {
  while (!stopping_.load()) {
    Result<std::unique_ptr<Connection>> conn = listener_->Accept(Deadline::Infinite());
    if (!conn.ok()) continue;  // a failed handshake, or the shutdown
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_.load()) break;
    ++connections_;
    Connection* raw = conn->get();
    conns_.push_back(std::move(conn).value());
    threads_.emplace_back([this, raw] { Serve(*raw); });
  }
}

void ReferenceNaa::Serve(Connection& conn) {
  Status s = ServeOrFail(conn);
  if (!s.ok() && s.code() != StatusCode::kDisconnected && !stopping_.load()) {
    Violation(s.ToString());
  }
  conn.Disconnect().IgnoreError();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++closed_;
  }
  closed_cv_.notify_all();
}

Status ReferenceNaa::ServeOrFail(Connection& conn) {
  NAARPC_ASSIGN_OR_RETURN(SolicitedWaiter waiter, SolicitedWaiter::Arm(conn));
  std::vector<uint8_t> send_buf(kMaxMrspMessageSize), recv_buf(kMaxMrspMessageSize);
  NAARPC_ASSIGN_OR_RETURN(auto send_mr, conn.RegisterMemory(send_buf.data(), send_buf.size(), 0));
  NAARPC_ASSIGN_OR_RETURN(auto recv_mr, conn.RegisterMemory(recv_buf.data(), recv_buf.size(),
                                                            kAccessLocalWrite));
  uint64_t wr_id = 1;
  const uint64_t mrsp_recv_id = wr_id++;
  NAARPC_RETURN_IF_ERROR(conn.PostRecv(mrsp_recv_id, Whole(*recv_mr, recv_buf.size())));
  uint32_t request_len = 0;
  bool got_request = false;
  while (!got_request) {
    NAARPC_ASSIGN_OR_RETURN(std::vector<Completion> batch,
                            waiter.Next(Deadline::After(std::chrono::seconds(30)),
                                        "the MRSP request"));
    for (const Completion& c : batch) {
      if (c.status != CompletionStatus::kSuccess) return Failed(c, "reference NAA MRSP");
      if (c.opcode != WorkOpcode::kRecv || c.wr_id != mrsp_recv_id || got_request) {
        return ProtocolError("reference NAA: expected the MRSP request (a SEND), got " +
                             OpcodeName(c.opcode));
      }
      request_len = c.byte_len;
      got_request = true;
    }
  }
  NAARPC_ASSIGN_OR_RETURN(MrspMessage msg,
                          DecodeMrsp(std::span<const uint8_t>(recv_buf.data(), request_len)));
  const auto* req = std::get_if<AdvertisementRequestMessage>(&msg);
  if (req == nullptr) return ProtocolError("reference NAA: MRSP message is not a request");

  auto send_error = [&](MrspErrorCode code) -> Status {
    NAARPC_ASSIGN_OR_RETURN(size_t len, EncodeMrsp(MrspMessage(ErrorMessage{uint8_t(code)}),
                                                   send_buf));
    const SendRequest send = Send(wr_id++, Whole(*send_mr, len));
    NAARPC_RETURN_IF_ERROR(conn.PostSend(std::span<const SendRequest>(&send, 1)));
    // Its completion is unsolicited: nothing wakes for it; the host disconnects.
    (void)waiter.Next(Deadline::After(std::chrono::seconds(5)), "the end after an MRSP error");
    return Status::Ok();
  };
  uint64_t total = 0;
  for (const RegionRequest& r : req->regions) total += r.size;
  if (req->regions.size() > options_.max_regions) return send_error(MrspErrorCode::kTooManyRegions);
  if (total > options_.max_bytes) return send_error(MrspErrorCode::kNotEnoughMemory);

  struct NaaRegionBuf {
    uint8_t flags;
    std::vector<std::byte> data;
    std::unique_ptr<MemoryRegion> mr;
    uint64_t host_addr;
    uint32_t host_rkey;
  };
  std::vector<NaaRegionBuf> regions;
  AdvertisementMessage adv;
  for (const RegionRequest& r : req->regions) {
    NaaRegionBuf b{r.flags, std::vector<std::byte>(r.size), nullptr, r.addr, r.rkey};
    if (!(r.flags & kInternal)) {
      NAARPC_ASSIGN_OR_RETURN(b.mr, conn.RegisterMemory(b.data.data(), b.data.size(),
                                                        kAccessLocalWrite | kAccessRemoteWrite));
      adv.regions.push_back({b.mr->remote_addr(), b.mr->rkey(), r.size});
    }
    regions.push_back(std::move(b));
  }
  // One receive for the first call, then the answer.
  uint64_t call_recv_id = wr_id++;
  NAARPC_RETURN_IF_ERROR(conn.PostRecv(call_recv_id, LocalBuffer{}));
  NAARPC_ASSIGN_OR_RETURN(size_t len, EncodeMrsp(MrspMessage(adv), send_buf));
  const uint64_t adv_id = wr_id++;
  const SendRequest adv_send = Send(adv_id, Whole(*send_mr, len));
  NAARPC_RETURN_IF_ERROR(conn.PostSend(std::span<const SendRequest>(&adv_send, 1)));

  uint64_t call_index = 0;
  for (;;) {
    Result<std::vector<Completion>> batch =
        waiter.Next(Deadline::Infinite(), "the next call");  // Shutdown disconnects
    if (!batch.ok()) return batch.status();
    for (const Completion& c : *batch) {
      if (c.status == CompletionStatus::kFlushed) return DisconnectedError("host left");
      if (c.status != CompletionStatus::kSuccess) return Failed(c, "reference NAA");
      // Its own SENDs and result writes complete unsolicited; they are
      // picked up with the next event.
      if (c.opcode == WorkOpcode::kSend || c.opcode == WorkOpcode::kRdmaWrite ||
          c.opcode == WorkOpcode::kRdmaWriteWithImm) {
        continue;
      }
      if (c.opcode != WorkOpcode::kRecvRdmaWithImm || c.wr_id != call_recv_id || !c.has_imm) {
        return ProtocolError("reference NAA: unexpected " + OpcodeName(c.opcode) +
                             " completion while waiting for a call");
      }
      // The receive for the next call goes up before anything else.
      call_recv_id = wr_id++;
      NAARPC_RETURN_IF_ERROR(conn.PostRecv(call_recv_id, LocalBuffer{}));
      const uint32_t imm = c.imm_data;
      if ((imm & 0x80u) == 0) {
        ++ignored_;
        Violation("reference NAA: request immediate without bit 7: " + std::to_string(imm));
        continue;
      }
      RefCall call;
      call.function_code = static_cast<uint8_t>(imm & 0x7fu);
      call.user_bits = imm >> 8;
      call.call_index = call_index++;
      for (NaaRegionBuf& b : regions) {
        if (b.flags & kInternal) {
          call.internal.emplace_back(b.data);
        } else {
          call.regions.emplace_back(b.data);
          call.flags.push_back(b.flags);
        }
      }
      uint8_t status = 0;
      if (auto k = options_.kernels.find(call.function_code); k != options_.kernels.end()) {
        status = k->second(call);
      } else if (call.function_code == 1 || call.function_code == 2) {
        for (auto& region : call.regions) {
          for (std::byte& x : region) x = std::byte(uint8_t(x) + call.function_code);
        }
      } else if (call.function_code != 3) {
        ++ignored_;  // never answered: the host waits for its timeout
        continue;
      }
      // Every region flagged OUTPUT, whole, in index order; the status is
      // the immediate's value.
      std::vector<SendRequest> writes;
      for (NaaRegionBuf& b : regions) {
        if (!b.mr || !(b.flags & kOutput)) continue;
        writes.push_back(Write(wr_id++, Whole(*b.mr, b.data.size()), b.host_addr, b.host_rkey));
      }
      if (writes.empty()) {
        for (NaaRegionBuf& b : regions) {
          if (!b.mr) continue;
          writes.push_back(Write(wr_id++, Whole(*b.mr, 0), b.host_addr, b.host_rkey));
          break;
        }
      }
      SendRequest& last = writes.back();
      last.opcode = WorkOpcode::kRdmaWriteWithImm;
      last.imm_data = status;
      last.solicited = true;
      ++answered_;  // counted first: the host may see the answer at once
      NAARPC_RETURN_IF_ERROR(conn.PostSend(writes));
    }
  }
}

}  // namespace naarpc::naaice
