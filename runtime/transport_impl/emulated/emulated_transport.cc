// Emulated transport: RC queue-pair semantics over one TCP stream per
// connection. See emulated_transport.h for the model. Wire frames:
//
//   header (32 bytes, little-endian except imm):
//     0 type u8 | 1 flags u8 | 2 reserved u16 | 4 length u32 |
//     (flags: bit 0 = solicited event, SEND and WRITE_IMM only; other bits 0)
//     8 seq u64 | 16 addr u64 | 24 key u32 | 28 imm u32 (big-endian)
//   SEND      seq, length, payload
//   WRITE     seq, length, addr = remote address, key = rkey, payload
//   WRITE_IMM as WRITE plus imm
//   CTRL      seq = requests processed so far (cumulative ack)
//   NAK       seq = failed request, key = CompletionStatus, imm = vendor_err
//   RNR_NAK   seq = request that found no posted receive (all before it
//             were processed). The target drops every later request until
//             the sender retransmits from seq (go-back-N, as on RC).
//
// Request sequence numbers start at 1 and increase by one per request frame
// (one per work request, plus one per copy that fault injection duplicates).
#include "runtime/transport_impl/emulated/emulated_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/sockaddr_text.h"
#include "runtime/transport_impl/emulated/ring_queue.h"
#include "runtime/unique_fd.h"

namespace naarpc {
namespace {

using Clock = std::chrono::steady_clock;
using internal::RingQueue;

constexpr uint32_t kHelloMagic = 0x4e414545;  // "NAEE"
constexpr uint16_t kWireVersion = 1;
constexpr size_t kHelloSize = 16;
constexpr size_t kHdrSize = 32;
constexpr size_t kReadBufSize = 256 * 1024;
constexpr int kMaxIov = 64;
constexpr size_t kMaxBytesPerSend = size_t{256} << 20;
constexpr int kMaxReadsPerCall = 64;

enum FrameType : uint8_t {
  kFrameSend = 1,
  kFrameWrite = 2,
  kFrameWriteImm = 3,
  kFrameCtrl = 4,
  kFrameNak = 5,
  kFrameRnrNak = 6,
};

// Header flags of request frames.
constexpr uint8_t kFrameFlagSolicited = 0x01;

// ---- encoding -------------------------------------------------------------

// Little-endian fields, stored and loaded whole (one move each on x86).
template <typename T>
T ToLe(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 8) return __builtin_bswap64(v);
    if constexpr (sizeof(T) == 4) return __builtin_bswap32(v);
    if constexpr (sizeof(T) == 2) return __builtin_bswap16(v);
  }
  return v;
}
template <typename T>
void PutLe(uint8_t* p, T v) {
  v = ToLe(v);
  std::memcpy(p, &v, sizeof(v));
}
template <typename T>
T GetLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return ToLe(v);
}

struct Header {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t length = 0;
  uint64_t seq = 0;
  uint64_t addr = 0;
  uint32_t key = 0;
  uint32_t imm = 0;
};

void EncodeHeader(const Header& h, uint8_t* p) {
  p[0] = h.type;
  p[1] = h.flags;
  p[2] = p[3] = 0;
  PutLe<uint32_t>(p + 4, h.length);
  PutLe<uint64_t>(p + 8, h.seq);
  PutLe<uint64_t>(p + 16, h.addr);
  PutLe<uint32_t>(p + 24, h.key);
  uint32_t be = htonl(h.imm);
  std::memcpy(p + 28, &be, 4);
}

Header DecodeHeader(const uint8_t* p) {
  Header h;
  h.type = p[0];
  h.flags = p[1];
  h.length = GetLe<uint32_t>(p + 4);
  h.seq = GetLe<uint64_t>(p + 8);
  h.addr = GetLe<uint64_t>(p + 16);
  h.key = GetLe<uint32_t>(p + 24);
  uint32_t be;
  std::memcpy(&be, p + 28, 4);
  h.imm = ntohl(be);
  return h;
}

std::string Errno(int err) { return std::strerror(err); }

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- sockets ----------------------------------------------------------------

timespec ToTimespec(Clock::time_point wake, bool* infinite) {
  *infinite = wake == Clock::time_point::max();
  timespec ts{0, 0};
  if (*infinite) return ts;
  auto left = wake - Clock::now();
  if (left <= Clock::duration::zero()) return ts;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  constexpr int64_t kMaxSec = 1'000'000'000;
  ts.tv_sec = static_cast<time_t>(std::min<int64_t>(ns / 1'000'000'000, kMaxSec));
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

// ppoll until `wake`; returns ppoll's result (EINTR is retried).
int PollUntil(pollfd* fds, nfds_t n, Clock::time_point wake) {
  for (;;) {
    bool infinite;
    timespec ts = ToTimespec(wake, &infinite);
    int r = ::ppoll(fds, n, infinite ? nullptr : &ts, nullptr);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

// Waits for `events` on fd, or for cancel_fd (if >= 0) to become readable.
// Returns 1 ready, 0 deadline, -1 cancelled, -2 poll error.
int WaitFd(int fd, short events, Deadline deadline, int cancel_fd) {
  pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
  int r = PollUntil(p, cancel_fd >= 0 ? 2 : 1, deadline.when());
  if (r < 0) return -2;
  if (r == 0) return 0;
  if (cancel_fd >= 0 && (p[1].revents & POLLIN)) return -1;
  return 1;
}

// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

uint16_t PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

std::string PeerName(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  return SockaddrToString(reinterpret_cast<const sockaddr*>(&a));
}

// The addresses `host` names, in getaddrinfo's order of preference: IPv4
// and IPv6 literals (bracketed or not) and names. Passive (to listen on):
// "", "*" and "0.0.0.0" are every IPv4 address, "::" every IPv6 one (and
// IPv4 too where the host's IPV6_V6ONLY default is off).
Result<std::vector<SockAddr>> Resolve(std::string host, uint16_t port, bool passive) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (passive && (host.empty() || host == "*")) host = "0.0.0.0";
  if (host.empty()) return InvalidArgumentError("emulated transport: empty host name");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return UnavailableError("emulated transport: cannot resolve '" + host +
                            "': " + ::gai_strerror(rc));
  }
  std::vector<SockAddr> addrs;
  for (const addrinfo* r = res; r != nullptr; r = r->ai_next) {
    if ((r->ai_family != AF_INET && r->ai_family != AF_INET6) ||
        r->ai_addrlen > sizeof(sockaddr_storage)) {
      continue;
    }
    SockAddr a;
    std::memcpy(&a.storage, r->ai_addr, r->ai_addrlen);
    a.length = r->ai_addrlen;
    addrs.push_back(a);
  }
  ::freeaddrinfo(res);
  if (addrs.empty()) {
    return UnavailableError("emulated transport: '" + host + "' has no IPv4 or IPv6 address");
  }
  return addrs;
}

// Outcome of one non-blocking connect attempt.
struct ConnectAttempt {
  UniqueFd fd;          // connected, when err == 0
  int err = 0;          // errno of the failure
  bool timed_out = false;
};

// `source`: the local address to bind first, or null.
ConnectAttempt ConnectTo(const SockAddr& addr, const SockAddr* source, Deadline deadline) {
  ConnectAttempt out;
  out.fd = UniqueFd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (out.fd.get() < 0) {
    out.err = errno;
    return out;
  }
  if (source != nullptr && source->family() == addr.family() &&
      ::bind(out.fd.get(), source->get(), source->length) != 0) {
    out.err = errno;
    out.fd.Reset();
    return out;
  }
  if (::connect(out.fd.get(), addr.get(), addr.length) == 0) return out;
  out.err = errno;
  if (out.err == EINPROGRESS) {
    int r = WaitFd(out.fd.get(), POLLOUT, deadline, -1);
    if (r == 0) {
      out.timed_out = true;
      return out;
    }
    socklen_t len = sizeof(out.err);
    if (r < 0 || ::getsockopt(out.fd.get(), SOL_SOCKET, SO_ERROR, &out.err, &len) != 0) {
      out.err = errno;
    }
  }
  if (out.err != 0) out.fd.Reset();
  return out;
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Exchanges hellos on a connected non-blocking socket.
// Validates a peer's 16-byte hello.
Status CheckHello(const uint8_t* in, const std::string& peer) {
  uint32_t magic = GetLe<uint32_t>(in);
  uint16_t version = GetLe<uint16_t>(in + 4);
  if (magic != kHelloMagic) {
    return ProtocolError("emulated transport: " + peer +
                         " is not an emulated-transport peer (hello magic " +
                         Hex(magic) + ", expected " + Hex(kHelloMagic) + ")");
  }
  if (version != kWireVersion) {
    return ProtocolError("emulated transport: protocol version mismatch with " + peer +
                         ": peer speaks version " + std::to_string(version) +
                         ", we speak version " + std::to_string(kWireVersion));
  }
  return Status::Ok();
}

Status Handshake(int fd, const std::string& peer, Deadline deadline, int cancel_fd) {
  uint8_t out[kHelloSize] = {};
  PutLe<uint32_t>(out, kHelloMagic);
  PutLe<uint16_t>(out + 4, kWireVersion);
  auto wait = [&](short ev) -> Status {
    int r = WaitFd(fd, ev, deadline, cancel_fd);
    if (r == 1) return Status::Ok();
    if (r == 0) {
      return DeadlineExceededError("emulated transport: hello exchange with " +
                                   peer + " timed out");
    }
    if (r == -1) return UnavailableError("emulated transport: listener shut down");
    return UnavailableError("emulated transport: poll failed: " + Errno(errno));
  };
  for (size_t off = 0; off < kHelloSize;) {
    ssize_t n = ::send(fd, out + off, kHelloSize - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      NAARPC_RETURN_IF_ERROR(wait(POLLOUT));
    } else if (!(n < 0 && errno == EINTR)) {
      return UnavailableError("emulated transport: sending hello to " + peer +
                              " failed: " + Errno(errno));
    }
  }
  uint8_t in[kHelloSize];
  for (size_t off = 0; off < kHelloSize;) {
    ssize_t n = ::recv(fd, in + off, kHelloSize - off, MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n == 0) {
      return UnavailableError("emulated transport: " + peer +
                              " closed the connection during the hello exchange");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      NAARPC_RETURN_IF_ERROR(wait(POLLIN));
    } else if (errno != EINTR) {
      return UnavailableError("emulated transport: reading hello from " + peer +
                              " failed: " + Errno(errno));
    }
  }
  return CheckHello(in, peer);
}

// ---- memory regions ---------------------------------------------------------

// The protection domain of one connection. Region keys: index << 8 | tag,
// so an lkey is never a valid rkey and keys are never reused. Memory windows
// take indexes from the same counter; their key is index << 8 | key byte,
// the byte changing with every bind (an 8-bit key, as on an HCA).
struct MrTable {
  struct Entry {
    uint8_t* addr;
    size_t len;
    uint32_t access;
  };
  // A type-2 window: free (not bound) or bound over [addr, addr+len) of
  // region mr_index with `access`, valid under key byte `key` only.
  struct Window {
    uint8_t key = 0;
    bool bound = false;
    uint32_t mr_index = 0;
    uint64_t addr = 0, len = 0;
    uint32_t access = 0;
  };
  static constexpr uint32_t kLkeyTag = 0xa5;
  static constexpr uint32_t kRkeyTag = 0x5a;
  static constexpr uint32_t kMaxIndex = (1u << 24) - 1;

  std::mutex mu;
  std::unordered_map<uint32_t, Entry> regions;
  std::unordered_map<uint32_t, Window> windows;
  uint32_t next_index = 1;

  bool Exists(uint32_t index) {
    std::lock_guard<std::mutex> lock(mu);
    return regions.count(index) != 0;
  }
  // Window `index` is still bound under key byte `key`.
  bool WindowOpen(uint32_t index, uint8_t key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = windows.find(index);
    return it != windows.end() && it->second.bound && it->second.key == key;
  }

  // Validates [addr, addr+len) under `key`; returns 0 or an EmulatedVendorError.
  // A window key (remote only) is checked for state, key byte, the window's
  // range and access, then its region; *window_out is then its index.
  uint32_t Check(uint32_t key, uint32_t tag, uint64_t addr, uint64_t len,
                 uint32_t need, uint32_t* index_out, uint32_t* window_out = nullptr) {
    const bool remote = tag == kRkeyTag;
    uint32_t index = key >> 8;
    std::lock_guard<std::mutex> lock(mu);
    if (remote) {
      if (auto w = windows.find(index); w != windows.end()) {
        const Window& win = w->second;
        if (!win.bound || win.key != (key & 0xff)) return kEmuErrWindowInvalid;
        if (addr < win.addr || len > win.len || addr - win.addr > win.len - len) {
          return kEmuErrRemoteBounds;
        }
        if ((win.access & need) != need) return kEmuErrNoRemoteWrite;
        if (regions.count(win.mr_index) == 0) return kEmuErrRegionGone;
        *index_out = win.mr_index;
        if (window_out != nullptr) *window_out = index;
        return kEmuErrNone;
      }
    }
    if ((key & 0xff) != tag) return remote ? kEmuErrBadRkey : kEmuErrBadLkey;
    auto it = regions.find(index);
    if (it == regions.end()) return remote ? kEmuErrBadRkey : kEmuErrBadLkey;
    const Entry& e = it->second;
    uint64_t base = reinterpret_cast<uintptr_t>(e.addr);
    if (addr < base || len > e.len || addr - base > e.len - len) {
      return remote ? kEmuErrRemoteBounds : kEmuErrBadLkey;
    }
    if ((e.access & need) != need) {
      return remote ? kEmuErrNoRemoteWrite : kEmuErrNoLocalWrite;
    }
    *index_out = index;
    return kEmuErrNone;
  }
};

class EmuMemoryRegion final : public MemoryRegion {
 public:
  EmuMemoryRegion(std::shared_ptr<MrTable> table, uint32_t index, void* addr, size_t len)
      : table_(std::move(table)), index_(index), addr_(addr), len_(len) {}
  ~EmuMemoryRegion() override {
    std::lock_guard<std::mutex> lock(table_->mu);
    table_->regions.erase(index_);
  }
  void* addr() const override { return addr_; }
  size_t length() const override { return len_; }
  uint32_t lkey() const override { return index_ << 8 | MrTable::kLkeyTag; }
  uint32_t rkey() const override { return index_ << 8 | MrTable::kRkeyTag; }

  const MrTable* table() const { return table_.get(); }
  uint32_t index() const { return index_; }

 private:
  std::shared_ptr<MrTable> table_;
  uint32_t index_;
  void* addr_;
  size_t len_;
};

class EmuMemoryWindow final : public MemoryWindow {
 public:
  EmuMemoryWindow(std::shared_ptr<MrTable> table, uint32_t index)
      : table_(std::move(table)), index_(index), rkey_(index << 8) {}
  ~EmuMemoryWindow() override {
    std::lock_guard<std::mutex> lock(table_->mu);
    table_->windows.erase(index_);
  }
  uint32_t rkey() const override { return rkey_; }

  const MrTable* table() const { return table_.get(); }
  uint32_t index() const { return index_; }
  // The key of the next bind (ibv_inc_rkey: the key byte plus one).
  uint32_t NextKey() const { return (rkey_ & ~0xffu) | ((rkey_ + 1) & 0xffu); }
  void set_rkey(uint32_t key) { rkey_ = key; }

 private:
  std::shared_ptr<MrTable> table_;
  uint32_t index_;
  uint32_t rkey_;
};

// ---- connection -------------------------------------------------------------

class EmuConnection final : public Connection {
 public:
  EmuConnection(UniqueFd fd, bool listener_side, std::string peer, EmulatedOptions opts)
      : fd_(std::move(fd)),
        listener_side_(listener_side),
        peer_(std::move(peer)),
        opts_(std::move(opts)),
        mrs_(std::make_shared<MrTable>()),
        rbuf_(new uint8_t[kReadBufSize]) {
    // Blocking socket: every call passes MSG_DONTWAIT except the blocking
    // receive of PollCompletions (one syscall instead of poll + receive).
    int fl = ::fcntl(fd_.get(), F_GETFL);
    if (fl >= 0) ::fcntl(fd_.get(), F_SETFL, fl & ~O_NONBLOCK);
  }

  ~EmuConnection() override { Disconnect().IgnoreError(); }

  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override;
  Status PostSend(std::span<const SendRequest> requests) override;
  Status PostRecv(uint64_t wr_id, const LocalBuffer& buffer) override;
  Result<size_t> PollCompletions(std::span<Completion> out, Deadline deadline) override;
  Status RequestNotify(NotifyMode mode) override;
  Result<bool> WaitNotify(Deadline deadline) override;
  Result<size_t> TryPollCompletions(std::span<Completion> out) override;
  int notify_fd() override;
  Status Disconnect() override;
  std::string peer_name() const override { return peer_; }
  std::string down_reason() const override { return broken_ ? broken_reason_ : std::string(); }
  uint32_t send_queue_depth() const override { return opts_.send_queue_depth; }
  uint32_t max_send_sge() const override { return std::max<uint32_t>(opts_.max_send_sge, 1); }
  Result<std::unique_ptr<MemoryWindow>> AllocateWindow() override;
  bool supports_memory_windows() const override { return true; }

 private:
  // What a send WR puts on the wire. Fault injection may change it, move it
  // to the next WR (kSwapWithNext) or send a copy (kDuplicate).
  struct WireMessage {
    WorkOpcode opcode = WorkOpcode::kSend;  // kRdmaWrite for a lost WRITE_WITH_IMM
    bool solicited = false;
    bool delayed = false;
    uint32_t len = 0;
    const uint8_t* payload = nullptr;
    // A gather list's bytes, gathered when posted (SendRequest::sg_list).
    std::shared_ptr<const std::vector<uint8_t>> gathered;
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint32_t imm = 0;
    uint32_t corrupt_off = UINT32_MAX;
    uint32_t stall_after = UINT32_MAX;  // kStallMidMessage: payload bytes sent
    Clock::time_point not_before{};
  };
  struct SendWr {
    uint64_t wr_id = 0;
    uint64_t seq = 0;         // of its request frame
    uint64_t post_index = 0;  // 1-based among posted WRs; a duplicate has its original's
    WorkOpcode opcode = WorkOpcode::kSend;  // as posted (its completion's)
    uint32_t len = 0;                       // as posted (its completion's byte_len)
    bool signaled = true;
    bool duplicate = false;  // injected copy: no completion, no send-queue slot
    bool held = false;       // kSwapWithNext: waits for the next posted WR
    WireMessage msg;
    CompletionStatus fail = CompletionStatus::kSuccess;  // local failure
    uint32_t vendor_err = 0;
    int rnr_retries = 0;
  };
  // A local work request (kBindWindow, kLocalInvalidate): no frame; it
  // executes once every frame posted before it (seq <= after_seq) has been
  // queued for the wire, and frames posted after it wait for it.
  struct LocalWr {
    uint64_t wr_id = 0;
    uint64_t after_seq = 0;
    uint64_t post_index = 0;
    WorkOpcode opcode = WorkOpcode::kBindWindow;
    bool signaled = true;
    bool executed = false;
    CompletionStatus fail = CompletionStatus::kSuccess;
    uint32_t vendor_err = 0;
    std::string fail_reason;
    uint32_t window_index = 0;
    uint32_t key = 0;  // bind: the new key; invalidate: the key to invalidate
    uint32_t mr_index = 0;
    uint64_t addr = 0, len = 0;
    uint32_t access = 0;
  };
  struct RecvWr {
    uint64_t wr_id = 0;
    uint8_t* addr = nullptr;
    uint32_t len = 0;
    uint32_t mr_index = 0;  // 0: zero-length buffer
    uint32_t error = 0;     // EmulatedVendorError found at post time
  };
  struct OutFrame {
    uint8_t hdr[kHdrSize];
    const uint8_t* payload = nullptr;
    std::shared_ptr<const std::vector<uint8_t>> gathered;  // keeps `payload` alive
    uint32_t len = 0;
    uint32_t corrupt_off = UINT32_MAX;
    uint8_t corrupt_byte = 0;
    bool is_ctrl = false;
    uint64_t seq = 0;  // request frames only
    uint64_t sent = 0;
    uint64_t stall_at = UINT64_MAX;  // kStallMidMessage: nothing is sent past it
    uint64_t total() const { return kHdrSize + len; }
  };

  Status DownError() const {
    return DisconnectedError("emulated transport: connection to " + peer_ +
                             " is down: " + broken_reason_);
  }
  void CheckDisconnectRequest() {
    if (!broken_ && disconnect_requested_.load(std::memory_order_acquire)) {
      Break("disconnected locally");
    }
  }
  SendWr& WrAt(uint64_t seq) { return sq_[seq - sq_.front().seq]; }

  // post_index: the completed send WR's SendWr::post_index (0 for receives);
  // polling its completion frees it and every earlier send WR
  // (send_queue_depth).
  void Complete(uint64_t wr_id, WorkOpcode op, CompletionStatus st, uint32_t len,
                uint32_t vendor, uint64_t post_index) {
    Completion c;
    c.wr_id = wr_id;
    c.opcode = op;
    c.status = st;
    c.byte_len = len;
    c.vendor_err = vendor;
    AddCqe(c, post_index, /*solicited=*/false);
  }
  // The sender's completion of `w`; none for an injected duplicate.
  void CompleteSend(const SendWr& w, CompletionStatus st, uint32_t vendor) {
    if (w.duplicate) return;
    Complete(w.wr_id, w.opcode, st, w.len, vendor, w.post_index);
  }
  // Queues a completion and raises the notification event if the CQ is
  // armed for it (ibv_req_notify_cq semantics: error completions count as
  // solicited).
  void AddCqe(const Completion& c, uint64_t post_index, bool solicited) {
    cq_.push_back({c, post_index});
    const bool raise = armed_ == Armed::kAny ||
                       (armed_ == Armed::kSolicited &&
                        (solicited || c.status != CompletionStatus::kSuccess));
    if (raise) {
      armed_ = Armed::kNone;
      event_pending_ = true;
    }
  }
  // Takes up to out.size() queued completions. REQUIRES: op_mu_ held.
  size_t DrainCq(std::span<Completion> out) {
    const size_t n = std::min(out.size(), cq_.size());
    for (size_t i = 0; i < n; ++i) {
      out[i] = cq_.front().completion;
      freed_post_index_ = std::max(freed_post_index_, cq_.front().post_index);
      cq_.pop_front();
    }
    return n;
  }
  // Makes progress (pushes queued bytes, reads and applies frames, runs
  // timers) until `ready()` holds, the connection breaks, or the deadline
  // passes; sleeps in the kernel meanwhile. REQUIRES: op_mu_ held.
  template <typename Ready>
  void ProgressUntil(Deadline deadline, Ready&& ready);

  void UpdateNotifyFd();
  void Break(std::string reason);
  void ResponderFail(uint64_t seq, CompletionStatus st, uint32_t vendor, std::string reason);
  void Pump();
  std::optional<Clock::time_point> NextTimer() const;
  // (Re)arms the stall deadline of a message in progress; `looked`: a read
  // (or a poll for input) has just been made, so a deadline already passed
  // means its bytes really stopped: the connection breaks. Only then: a
  // receiver that was busy elsewhere reads what came first.
  void WatchStall(bool looked);
  void EnqueueFrame(const SendWr& w);
  void UpdateCtrl();
  bool Push();
  void ReadInput(bool block = false);
  bool BlockingRead(Deadline deadline);
  void ParseBuffered();
  void ProcessHeader(const Header& h);
  void ProcessRequest(const Header& h);
  void FinishRequest();
  void HandleAck(uint64_t count);
  void HandleNak(const Header& h);
  void HandleRnrNak(const Header& h);
  void QueueUrgent(OutFrame f);
  bool InDestValid();
  // Executes the local WRs posted before frame `before_seq` (after_seq <
  // before_seq); false while one must wait (an invalidate whose window an
  // incoming write is landing through) or has failed.
  bool RunLocal(uint64_t before_seq);
  void ExecuteLocal(LocalWr& l);
  // Completes executed local WRs whose preceding frames have completed (in
  // send-queue order); a failed one then breaks the connection.
  void RetireLocal();
  Status CheckLocalRequest(const SendRequest& r) const;

  const UniqueFd fd_;
  const bool listener_side_;
  const std::string peer_;
  const EmulatedOptions opts_;
  std::shared_ptr<MrTable> mrs_;

  std::mutex op_mu_;  // held by every operation; Disconnect only try-locks
  std::atomic<bool> disconnect_requested_{false};

  bool broken_ = false;
  bool reading_after_send_error_ = false;  // Push's ReadInput after EPIPE/ECONNRESET
  bool output_stalled_ = false;  // fault injection: a sender stopped mid-message
  // EmulatedOptions::stall_timeout: when the message being received ends,
  // unless its bytes progress; the message (seq) and bytes it last saw.
  std::optional<Clock::time_point> stall_deadline_;
  uint64_t stall_seq_ = 0;
  uint32_t stall_done_ = 0;
  std::string broken_reason_;
  struct CqEntry {
    Completion completion;
    uint64_t post_index;  // 0 for receives
  };
  RingQueue<CqEntry> cq_;
  // Completion notification (RequestNotify / WaitNotify).
  enum class Armed : uint8_t { kNone, kSolicited, kAny };
  Armed armed_ = Armed::kNone;
  bool event_pending_ = false;
  uint64_t freed_post_index_ = 0;  // send WRs up to this post_index are freed (polled)

  // Send queue: posted, not yet completed WRs, in posting order.
  RingQueue<SendWr> sq_;
  RingQueue<LocalWr> local_q_;  // posted local WRs not yet completed, in order
  uint64_t next_seq_ = 1;     // seq of the next request frame
  uint64_t next_tx_seq_ = 1;  // next WR to put into outq_
  uint64_t posted_ = 0;       // send WRs posted (injected duplicates excluded)
  // kSwapWithNext: seq of the WR held until the next one is posted.
  std::optional<uint64_t> held_for_swap_;
  // After an RNR NAK: no request leaves before this time.
  std::optional<Clock::time_point> rnr_pause_until_;

  RingQueue<OutFrame> outq_;
  // Requests processed (cumulative ack) and the value last queued in a CTRL.
  uint64_t acked_ = 0, sent_acked_ = 0;

  RingQueue<RecvWr> rq_;

  // Input: staging buffer [rpos_, wpos_) and the request being received.
  std::unique_ptr<uint8_t[]> rbuf_;
  size_t rpos_ = 0, wpos_ = 0;
  uint64_t in_expected_seq_ = 1;
  bool in_rnr_ = false;  // NAKed in_expected_seq_ for RNR: drop until it is resent
  bool in_payload_ = false;
  Header in_hdr_;
  uint8_t* in_dest_ = nullptr;
  uint32_t in_mr_index_ = 0;
  uint32_t in_window_index_ = 0;  // the window the request lands through, 0: none
  uint32_t in_done_ = 0;
  int64_t rcvtimeo_ms_ = 0;  // current SO_RCVTIMEO (0 = none)

  // notify_fd(): an epoll set of the socket and a timerfd, created on first
  // use, with what the timer and the socket's EPOLLOUT are set to.
  UniqueFd notify_ep_, notify_timer_;
  std::optional<Clock::time_point> notify_timer_at_;
  bool notify_out_ = false;
};

Result<std::unique_ptr<MemoryRegion>> EmuConnection::RegisterMemory(void* addr,
                                                                    size_t length,
                                                                    uint32_t access) {
  constexpr uint32_t kKnown =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessMwBind;
  if (access & ~kKnown) {
    return InvalidArgumentError("emulated transport: unknown access flags " + Hex(access));
  }
  if ((access & kAccessRemoteWrite) && !(access & kAccessLocalWrite)) {
    return InvalidArgumentError(
        "emulated transport: kAccessRemoteWrite requires kAccessLocalWrite (as in ibverbs)");
  }
  if (addr == nullptr && length > 0) {
    return InvalidArgumentError("emulated transport: null address");
  }
  uint32_t index;
  {
    std::lock_guard<std::mutex> lock(mrs_->mu);
    if (mrs_->next_index > MrTable::kMaxIndex) {
      return ResourceExhaustedError("emulated transport: memory keys exhausted");
    }
    index = mrs_->next_index++;
    mrs_->regions[index] = {static_cast<uint8_t*>(addr), length, access};
  }
  return std::unique_ptr<MemoryRegion>(new EmuMemoryRegion(mrs_, index, addr, length));
}

Result<std::unique_ptr<MemoryWindow>> EmuConnection::AllocateWindow() {
  std::lock_guard<std::mutex> lock(mrs_->mu);
  if (mrs_->next_index > MrTable::kMaxIndex) {
    return ResourceExhaustedError("emulated transport: memory keys exhausted");
  }
  const uint32_t index = mrs_->next_index++;
  mrs_->windows[index] = {};
  return std::unique_ptr<MemoryWindow>(new EmuMemoryWindow(mrs_, index));
}

// What ibv_post_send refuses (EINVAL) for a bind or invalidate.
Status EmuConnection::CheckLocalRequest(const SendRequest& r) const {
  // The message is built only on refusal (this runs for every bind/invalidate).
  auto refuse = [&](const std::string& why) {
    return InvalidArgumentError("emulated transport: wr_id " + std::to_string(r.wr_id) + ": " +
                                why);
  };
  if (r.opcode == WorkOpcode::kLocalInvalidate) {
    return r.solicited ? refuse("the solicited bit on a LOCAL_INV") : Status::Ok();
  }
  const auto* w = dynamic_cast<const EmuMemoryWindow*>(r.window);
  if (w == nullptr || w->table() != mrs_.get()) {
    return refuse("BIND_MW without a window of this connection");
  }
  const auto* mr = dynamic_cast<const EmuMemoryRegion*>(r.window_region);
  if (mr == nullptr || mr->table() != mrs_.get()) {
    return refuse("BIND_MW without a region of this connection");
  }
  if (r.local.length == 0) return refuse("BIND_MW of 0 bytes");
  if ((r.window_access & ~(kAccessRemoteWrite | kAccessRemoteRead)) != 0 ||
      r.window_access == 0) {
    return refuse("BIND_MW access " + Hex(r.window_access) +
                  " (kAccessRemoteWrite and/or kAccessRemoteRead)");
  }
  if (r.solicited) return refuse("the solicited bit on a BIND_MW");
  return Status::Ok();
}

Status EmuConnection::PostRecv(uint64_t wr_id, const LocalBuffer& buffer) {
  std::lock_guard<std::mutex> lock(op_mu_);
  CheckDisconnectRequest();
  if (broken_) return DownError();
  if (opts_.recv_queue_depth != 0 && rq_.size() >= opts_.recv_queue_depth) {
    // As ibv_post_recv on a full receive queue (ENOMEM).
    return ResourceExhaustedError("emulated transport: receive queue full (depth " +
                                  std::to_string(opts_.recv_queue_depth) + ")");
  }
  RecvWr r;
  r.wr_id = wr_id;
  r.addr = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(buffer.addr));
  r.len = buffer.length;
  if (buffer.length > 0) {
    r.error = mrs_->Check(buffer.lkey, MrTable::kLkeyTag, buffer.addr, buffer.length,
                          kAccessLocalWrite, &r.mr_index);
  }
  rq_.push_back(r);
  return Status::Ok();
}

Status EmuConnection::PostSend(std::span<const SendRequest> requests) {
  std::lock_guard<std::mutex> lock(op_mu_);
  CheckDisconnectRequest();
  if (broken_) return DownError();
  for (const SendRequest& r : requests) {
    if (r.opcode == WorkOpcode::kBindWindow || r.opcode == WorkOpcode::kLocalInvalidate) {
      if (Status st = CheckLocalRequest(r); !st.ok()) return st;
      continue;
    }
    if (r.opcode != WorkOpcode::kSend && r.opcode != WorkOpcode::kRdmaWrite &&
        r.opcode != WorkOpcode::kRdmaWriteWithImm) {
      return InvalidArgumentError("emulated transport: PostSend with a receive opcode");
    }
    if (r.solicited && r.opcode == WorkOpcode::kRdmaWrite) {
      return InvalidArgumentError(
          "emulated transport: the solicited-event bit applies to SEND and "
          "RDMA_WRITE_WITH_IMM only (wr_id " + std::to_string(r.wr_id) + ")");
    }
    if (r.sg_list.size() > max_send_sge()) {
      return InvalidArgumentError(
          "emulated transport: wr_id " + std::to_string(r.wr_id) + " has " +
          std::to_string(r.sg_list.size()) + " gather entries; the queue pair takes " +
          std::to_string(max_send_sge()) + " (max_send_sge): chain work requests");
    }
  }
  // Like an RC send queue: a slot is freed only by polling the completion of
  // its WR or of a later one (unsignaled WRs alone never free slots).
  const uint64_t unfreed = posted_ - freed_post_index_;
  if (opts_.send_queue_depth != 0 && unfreed + requests.size() > opts_.send_queue_depth) {
    return ResourceExhaustedError(
        "emulated transport: send queue full (depth " + std::to_string(opts_.send_queue_depth) +
        ", " + std::to_string(unfreed) + " posted requests not yet freed by a polled completion, " +
        std::to_string(requests.size()) + " more)");
  }
  bool drop = false;
  for (const SendRequest& r : requests) {
    if (r.opcode == WorkOpcode::kBindWindow || r.opcode == WorkOpcode::kLocalInvalidate) {
      LocalWr l;
      l.wr_id = r.wr_id;
      l.after_seq = next_seq_ - 1;
      l.post_index = ++posted_;
      l.opcode = r.opcode;
      l.signaled = r.signaled;
      if (r.opcode == WorkOpcode::kBindWindow) {
        auto* w = static_cast<EmuMemoryWindow*>(r.window);
        l.window_index = w->index();
        l.key = w->NextKey();
        w->set_rkey(l.key);  // the consumer's key for this bind, as ibv_inc_rkey
        l.mr_index = static_cast<const EmuMemoryRegion*>(r.window_region)->index();
        l.addr = r.local.addr;
        l.len = r.local.length;
        l.access = r.window_access;
      } else {
        l.window_index = r.rkey >> 8;
        l.key = r.rkey;
      }
      local_q_.push_back(std::move(l));
      continue;
    }
    SendWr w;
    w.wr_id = r.wr_id;
    w.seq = next_seq_;
    w.post_index = ++posted_;
    w.opcode = r.opcode;
    w.len = r.local.length;
    w.signaled = r.signaled;
    w.msg.opcode = r.opcode;
    w.msg.solicited = r.solicited;
    w.msg.len = r.local.length;
    w.msg.remote_addr = r.remote_addr;
    w.msg.rkey = r.rkey;
    w.msg.imm = r.imm_data;
    if (!r.sg_list.empty()) {
      // Every entry checked like `local` (an HCA fails the WR with a local
      // protection error), then gathered into one payload.
      uint64_t total = 0;
      uint32_t err = kEmuErrNone;
      for (const LocalBuffer& b : r.sg_list) {
        uint32_t index;
        if (b.length > 0) err = mrs_->Check(b.lkey, MrTable::kLkeyTag, b.addr, b.length, 0, &index);
        if (err != kEmuErrNone) break;
        total += b.length;
      }
      if (err == kEmuErrNone && total > UINT32_MAX) err = kEmuErrBadLkey;
      w.len = w.msg.len = static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX));
      if (err != kEmuErrNone) {
        w.fail = CompletionStatus::kLocalProtectionError;
        w.vendor_err = err;
      } else {
        auto bytes = std::make_shared<std::vector<uint8_t>>(total);
        uint8_t* at = bytes->data();
        for (const LocalBuffer& b : r.sg_list) {
          if (b.length == 0) continue;
          std::memcpy(at, reinterpret_cast<const void*>(static_cast<uintptr_t>(b.addr)), b.length);
          at += b.length;
        }
        w.msg.payload = bytes->data();
        w.msg.gathered = std::move(bytes);
      }
    } else if (w.len > 0) {
      uint32_t index;
      uint32_t err = mrs_->Check(r.local.lkey, MrTable::kLkeyTag, r.local.addr, w.len, 0, &index);
      if (err != kEmuErrNone) {
        w.fail = CompletionStatus::kLocalProtectionError;
        w.vendor_err = err;
      } else {
        w.msg.payload = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(r.local.addr));
      }
    }
    const bool sendable = w.fail == CompletionStatus::kSuccess;
    bool duplicate = false, hold = false;
    if (opts_.faults && !drop) {
      FaultPoint p;
      p.is_listener_side = listener_side_;
      p.sequence = w.post_index - 1;
      p.opcode = w.opcode;
      p.length = w.len;
      p.has_imm = w.opcode == WorkOpcode::kRdmaWriteWithImm;
      p.imm_data = p.has_imm ? r.imm_data : 0;
      FaultAction a = opts_.faults->OnPost(p);
      switch (a.kind) {
        case FaultAction::Kind::kNone:
          break;
        case FaultAction::Kind::kDropConnection:
          // Send what precedes this WR, then drop.
          Pump();
          Push();
          drop = true;
          break;
        case FaultAction::Kind::kDelay:
          w.msg.delayed = true;
          w.msg.not_before = Clock::now() + a.delay;
          break;
        case FaultAction::Kind::kCorruptPayload:
          w.msg.corrupt_off = a.corrupt_offset;
          break;
        case FaultAction::Kind::kLoseMessage:
          if (w.opcode == WorkOpcode::kRdmaWriteWithImm) {
            w.msg.opcode = WorkOpcode::kRdmaWrite;
            w.msg.solicited = false;
            w.msg.imm = 0;
          }
          break;
        case FaultAction::Kind::kDuplicate:
          duplicate = sendable;
          break;
        case FaultAction::Kind::kSwapWithNext:
          hold = sendable;
          break;
        case FaultAction::Kind::kStallMidMessage:
          w.msg.stall_after = a.corrupt_offset;
          break;
      }
    }
    // The copy: its own request frame, right after the original's.
    std::optional<SendWr> copy;
    if (duplicate) {
      copy = w;
      copy->signaled = false;
      copy->duplicate = true;
    }
    if (held_for_swap_) {
      // The held WR and this one exchange their messages: the held message
      // goes on the wire right after this one's.
      SendWr& held = WrAt(*held_for_swap_);
      if (sendable) std::swap(held.msg, w.msg);
      held.held = false;
      held_for_swap_.reset();
    }
    if (hold) {
      w.held = true;
      held_for_swap_ = w.seq;
    }
    sq_.push_back(w);
    ++next_seq_;
    if (copy) {
      copy->seq = next_seq_++;
      sq_.push_back(*copy);
    }
  }
  if (drop) {
    Break("fault injection dropped the connection");
    return Status::Ok();
  }
  Pump();
  // Only binds/invalidates (no frame) and nothing queued: Pump executed
  // them; pushing would send a coalesced ack alone and wake the peer for it.
  const bool frames = std::any_of(requests.begin(), requests.end(), [](const SendRequest& r) {
    return r.opcode != WorkOpcode::kBindWindow && r.opcode != WorkOpcode::kLocalInvalidate;
  });
  if (!frames && outq_.empty()) return Status::Ok();
  // Blocked output: keep reading so a peer that is sending to us too can
  // make progress (no deadlock between two big senders).
  if (Push()) ReadInput();
  return Status::Ok();
}

template <typename Ready>
void EmuConnection::ProgressUntil(Deadline deadline, Ready&& ready) {
  for (;;) {
    CheckDisconnectRequest();
    if (ready() || broken_) return;
    Pump();
    if (ready() || broken_) return;
    const bool want_out = Push();  // also flushes coalesced acks
    if (broken_) return;
    WatchStall(/*looked=*/false);  // a message in progress: its deadline is a timer
    std::optional<Clock::time_point> timer = NextTimer();
    if (!want_out && !timer && BlockingRead(deadline)) {
      if (ready() || broken_ || deadline.expired()) return;
      continue;
    }
    Clock::time_point wake = deadline.when();
    if (timer) wake = std::min(wake, *timer);
    pollfd p{fd_.get(), static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0};
    int r = PollUntil(&p, 1, wake);
    if (r < 0) {
      Break("poll failed: " + Errno(errno));
      return;
    }
    if (r > 0) {
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) ReadInput();
      if (!broken_ && (p.revents & POLLOUT)) Push();
    }
    WatchStall(/*looked=*/true);
    Pump();
    if (ready() || broken_ || deadline.expired()) return;
  }
}

Result<size_t> EmuConnection::PollCompletions(std::span<Completion> out, Deadline deadline) {
  std::lock_guard<std::mutex> lock(op_mu_);
  if (out.empty()) return InvalidArgumentError("emulated transport: empty completion array");
  ProgressUntil(deadline, [this] { return !cq_.empty(); });
  if (!cq_.empty()) return DrainCq(out);
  if (broken_) return DownError();
  return size_t{0};
}

Status EmuConnection::RequestNotify(NotifyMode mode) {
  std::lock_guard<std::mutex> lock(op_mu_);
  const Armed want = mode == NotifyMode::kNextCompletion ? Armed::kAny : Armed::kSolicited;
  armed_ = std::max(armed_, want);
  return Status::Ok();
}

Result<bool> EmuConnection::WaitNotify(Deadline deadline) {
  std::lock_guard<std::mutex> lock(op_mu_);
  ProgressUntil(deadline, [this] { return event_pending_; });
  const bool event = std::exchange(event_pending_, false);
  UpdateNotifyFd();  // its push may break the connection and raise one
  if (event || std::exchange(event_pending_, false)) return true;
  if (broken_) return DownError();
  return false;
}

Result<size_t> EmuConnection::TryPollCompletions(std::span<Completion> out) {
  std::lock_guard<std::mutex> lock(op_mu_);
  if (out.empty()) return InvalidArgumentError("emulated transport: empty completion array");
  CheckDisconnectRequest();
  if (cq_.empty() && !broken_) {
    // What a NIC would have done meanwhile: one non-blocking progress step.
    Pump();
    Push();
    if (!broken_) ReadInput();
    WatchStall(/*looked=*/true);
    Pump();
  }
  if (!cq_.empty()) return DrainCq(out);
  if (broken_) return DownError();
  return size_t{0};
}

Status EmuConnection::Disconnect() {
  if (disconnect_requested_.exchange(true, std::memory_order_acq_rel)) return Status::Ok();
  // From the owning thread: flush pending acks, then flush the queues now.
  // From another thread (the owner may be blocked in poll): the shutdown
  // below wakes it and it breaks the connection itself.
  if (op_mu_.try_lock()) {
    if (!broken_) {
      Push();
      Break("disconnected locally");
    }
    UpdateNotifyFd();
    op_mu_.unlock();
  }
  ::shutdown(fd_.get(), SHUT_RDWR);
  return Status::Ok();
}

int EmuConnection::notify_fd() {
  std::lock_guard<std::mutex> lock(op_mu_);
  if (notify_ep_.get() >= 0) return notify_ep_.get();
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (ep.get() < 0 || timer.get() < 0) return -1;
  epoll_event sock{}, tick{};
  sock.events = EPOLLIN | EPOLLRDHUP;
  tick.events = EPOLLIN;
  if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd_.get(), &sock) != 0 ||
      ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, timer.get(), &tick) != 0) {
    return -1;
  }
  notify_ep_ = std::move(ep);
  notify_timer_ = std::move(timer);
  UpdateNotifyFd();
  return notify_ep_.get();
}

// With a notify fd, at the end of WaitNotify (the owner's last call before
// it sleeps on the fd, transport.h) and of Disconnect: pushes queued bytes
// and coalesced acks, then makes the fd wait for what the next progress
// step needs: input or a disconnect (always), room in the socket while
// output is queued, the next timer, or at once while an event is pending
// (raised by that push or by Disconnect). Other calls leave the fd alone:
// no system call for it per operation. Re-arming the timerfd clears its
// expirations. REQUIRES: op_mu_ held.
void EmuConnection::UpdateNotifyFd() {
  if (notify_ep_.get() < 0) return;
  Pump();
  const bool want_out = Push();
  if (want_out != notify_out_) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u);
    if (::epoll_ctl(notify_ep_.get(), EPOLL_CTL_MOD, fd_.get(), &ev) == 0) notify_out_ = want_out;
  }
  // Clock is CLOCK_MONOTONIC; 1 ns after its epoch is long past.
  const std::optional<Clock::time_point> at =
      event_pending_ ? std::optional(Clock::time_point(std::chrono::nanoseconds(1))) : NextTimer();
  if (at != notify_timer_at_ && SetTimerFd(notify_timer_.get(), at)) notify_timer_at_ = at;
}

void EmuConnection::Break(std::string reason) {
  if (broken_) return;
  broken_ = true;
  broken_reason_ = std::move(reason);
  // Outstanding send-queue work flushed in posting order.
  size_t li = 0;
  for (const SendWr& w : sq_) {
    for (; li < local_q_.size() && local_q_[li].post_index < w.post_index; ++li) {
      Complete(local_q_[li].wr_id, local_q_[li].opcode, CompletionStatus::kFlushed, 0, 0,
               local_q_[li].post_index);
    }
    CompleteSend(w, CompletionStatus::kFlushed, 0);
  }
  for (; li < local_q_.size(); ++li) {
    Complete(local_q_[li].wr_id, local_q_[li].opcode, CompletionStatus::kFlushed, 0, 0,
             local_q_[li].post_index);
  }
  local_q_.clear();
  sq_.clear();
  in_window_index_ = 0;
  held_for_swap_.reset();
  for (const RecvWr& r : rq_) Complete(r.wr_id, WorkOpcode::kRecv, CompletionStatus::kFlushed, 0, 0, 0);
  rq_.clear();
  outq_.clear();
  in_payload_ = false;
  in_dest_ = nullptr;
  ::shutdown(fd_.get(), SHUT_RDWR);
}

// A request from the peer failed here: NAK it and enter the error state.
void EmuConnection::ResponderFail(uint64_t seq, CompletionStatus st, uint32_t vendor,
                                  std::string reason) {
  // The NAK can only go out at a frame boundary; if we are in the middle of
  // a frame the peer just sees the disconnect.
  if (outq_.empty() || outq_.front().sent == 0) {
    outq_.clear();
    OutFrame f;
    Header h;
    h.type = kFrameNak;
    h.seq = seq;
    h.key = static_cast<uint32_t>(st);
    h.imm = vendor;
    EncodeHeader(h, f.hdr);
    outq_.push_back(f);
    Push();
  }
  Break(std::move(reason));
}

// Moves eligible WRs into the output queue, in order, and retires a head WR
// that failed locally.
void EmuConnection::Pump() {
  if (broken_) return;
  std::optional<Clock::time_point> now;
  auto Now = [&] {
    if (!now) now = Clock::now();
    return *now;
  };
  if (rnr_pause_until_) {
    if (next_tx_seq_ < next_seq_ && Now() < *rnr_pause_until_) return;
    rnr_pause_until_.reset();
  }
  while (next_tx_seq_ < next_seq_) {
    if (!RunLocal(next_tx_seq_)) break;
    SendWr& w = WrAt(next_tx_seq_);
    if (w.fail != CompletionStatus::kSuccess || w.held) break;
    if (w.msg.delayed) {
      if (Now() < w.msg.not_before) break;
      w.msg.delayed = false;
    }
    EnqueueFrame(w);
    ++next_tx_seq_;
  }
  RunLocal(next_tx_seq_);
  RetireLocal();
  if (broken_) return;
  // A failed WR is reported once everything before it has completed.
  if (!sq_.empty() && sq_.front().seq == next_tx_seq_ &&
      (local_q_.empty() || local_q_.front().after_seq >= next_tx_seq_) &&
      sq_.front().fail != CompletionStatus::kSuccess) {
    SendWr w = sq_.front();
    sq_.pop_front();
    ++next_tx_seq_;
    CompleteSend(w, w.fail, w.vendor_err);
    Break(std::string(CompletionStatusName(w.fail)) + " on wr_id " + std::to_string(w.wr_id));
  }
}

std::optional<Clock::time_point> EmuConnection::NextTimer() const {
  if (broken_) return std::nullopt;
  std::optional<Clock::time_point> send;
  if (next_tx_seq_ < next_seq_) {
    const SendWr& w = sq_[next_tx_seq_ - sq_.front().seq];
    if (rnr_pause_until_) {
      send = rnr_pause_until_;
    } else if (w.fail == CompletionStatus::kSuccess && !w.held && w.msg.delayed) {
      send = w.msg.not_before;
    }
  }
  if (!stall_deadline_) return send;
  return send ? std::min(*send, *stall_deadline_) : stall_deadline_;
}

void EmuConnection::WatchStall(bool looked) {
  if (broken_ || opts_.stall_timeout.count() <= 0 || !in_payload_) {
    stall_deadline_.reset();
    return;
  }
  const Clock::time_point now = Clock::now();
  if (!stall_deadline_ || in_hdr_.seq != stall_seq_ || in_done_ != stall_done_) {
    stall_deadline_ = now + opts_.stall_timeout;
    stall_seq_ = in_hdr_.seq;
    stall_done_ = in_done_;
    return;
  }
  if (!looked || now < *stall_deadline_) return;
  Break("the peer stopped sending in the middle of a message: " + std::to_string(in_done_) +
        " of its " + std::to_string(in_hdr_.length) + " bytes, nothing more for " +
        std::to_string(opts_.stall_timeout.count()) + " ms (EmulatedOptions::stall_timeout)");
}

void EmuConnection::EnqueueFrame(const SendWr& w) {
  const WireMessage& m = w.msg;
  OutFrame f;
  Header h;
  switch (m.opcode) {
    case WorkOpcode::kSend: h.type = kFrameSend; break;
    case WorkOpcode::kRdmaWrite: h.type = kFrameWrite; break;
    default: h.type = kFrameWriteImm; break;
  }
  h.length = m.len;
  h.seq = w.seq;
  h.addr = m.remote_addr;
  h.key = m.rkey;
  h.imm = m.imm;
  h.flags = m.solicited ? kFrameFlagSolicited : 0;
  EncodeHeader(h, f.hdr);
  f.payload = m.payload;
  f.gathered = m.gathered;
  f.len = m.len;
  f.seq = w.seq;
  if (m.stall_after != UINT32_MAX) f.stall_at = kHdrSize + std::min(m.stall_after, m.len);
  if (m.corrupt_off < m.len) {
    f.corrupt_off = m.corrupt_off;
    f.corrupt_byte = static_cast<uint8_t>(m.payload[m.corrupt_off] ^ 0xff);
  }
  outq_.push_back(f);
}

// Puts a small frame ahead of every frame not yet started.
void EmuConnection::QueueUrgent(OutFrame f) {
  size_t pos = 0;
  while (pos < outq_.size() && (outq_[pos].sent > 0 || outq_[pos].seq == 0)) ++pos;
  outq_.insert(outq_.begin() + static_cast<std::ptrdiff_t>(pos), f);
}

// Queues a CTRL frame if the ack changed (an unsent one is updated in place;
// acks are cumulative, so one frame covers many requests).
void EmuConnection::UpdateCtrl() {
  if (acked_ == sent_acked_) return;
  Header h;
  h.type = kFrameCtrl;
  h.seq = acked_;
  sent_acked_ = acked_;
  for (OutFrame& f : outq_) {
    if (f.sent > 0) continue;
    if (f.seq != 0) break;  // control frames precede unstarted request frames
    if (f.is_ctrl) {
      EncodeHeader(h, f.hdr);
      return;
    }
  }
  OutFrame f;
  f.is_ctrl = true;
  EncodeHeader(h, f.hdr);
  QueueUrgent(f);
}

// Writes as much of the output queue as the socket takes. Returns true if
// bytes remain (wait for POLLOUT).
bool EmuConnection::Push() {
  if (broken_ || output_stalled_) return false;
  UpdateCtrl();
  while (!outq_.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    size_t total = 0;
    for (const OutFrame& f : outq_) {
      if (n > kMaxIov - 4 || total >= kMaxBytesPerSend) break;
      // Segments of the frame: header, payload (one byte replaced if corrupt).
      const uint8_t* seg_ptr[4] = {f.hdr, f.payload, &f.corrupt_byte, nullptr};
      uint64_t seg_len[4] = {kHdrSize, f.len, 0, 0};
      if (f.corrupt_off != UINT32_MAX) {
        seg_len[1] = f.corrupt_off;
        seg_len[2] = 1;
        seg_ptr[3] = f.payload + f.corrupt_off + 1;
        seg_len[3] = f.len - f.corrupt_off - 1;
      }
      // A stalled message ends what goes out: its first bytes, then nothing.
      const uint64_t limit = std::min(f.stall_at, f.total());
      for (uint64_t upto = 0; uint64_t& l : seg_len) {
        l = std::min(l, limit - upto);
        upto += l;
      }
      uint64_t skip = f.sent;
      for (int s = 0; s < 4; ++s) {
        if (skip >= seg_len[s]) {
          skip -= seg_len[s];
          continue;
        }
        size_t len = static_cast<size_t>(
            std::min<uint64_t>(seg_len[s] - skip, kMaxBytesPerSend - total));
        iov[n].iov_base = const_cast<uint8_t*>(seg_ptr[s] + skip);
        iov[n].iov_len = len;
        ++n;
        total += len;
        skip = 0;
        if (total >= kMaxBytesPerSend) break;
      }
      if (limit < f.total()) break;  // nothing after a stalled message
    }
    if (n == 0) {  // all that is left is behind a stalled message
      output_stalled_ = true;
      return false;
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<size_t>(n);
    ssize_t sent = ::sendmsg(fd_.get(), &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      const int send_errno = errno;
      if ((send_errno == EPIPE || send_errno == ECONNRESET) && !reading_after_send_error_) {
        // The peer closed. A NAK it sent before closing must still reach
        // us, as an HCA's NAK reaches the requester: read what is queued
        // (it completes the failed request with its real status) first.
        reading_after_send_error_ = true;
        ReadInput(/*block=*/false);
        reading_after_send_error_ = false;
        if (broken_) return false;
      }
      Break("send failed: " + Errno(send_errno));
      return false;
    }
    for (uint64_t left = static_cast<uint64_t>(sent); left > 0;) {
      OutFrame& f = outq_.front();
      uint64_t take = std::min(left, f.total() - f.sent);
      f.sent += take;
      left -= take;
      if (f.sent == f.total()) outq_.pop_front();
    }
    if (!outq_.empty() && outq_.front().sent == std::min(outq_.front().stall_at,
                                                         outq_.front().total())) {
      output_stalled_ = true;  // a stopped sender: nothing more, ever
      return false;
    }
    if (static_cast<size_t>(sent) < total) return true;
  }
  return false;
}

// The region a payload lands in is still registered (it may be
// deregistered between two calls while a large write is arriving).
bool EmuConnection::InDestValid() {
  if (in_window_index_ != 0 &&
      !mrs_->WindowOpen(in_window_index_, static_cast<uint8_t>(in_hdr_.key & 0xff))) {
    // Only a deallocated window (or its region) closes under a landing
    // write: an invalidate waits for it (RunLocal).
    ResponderFail(in_hdr_.seq, CompletionStatus::kRemoteAccessError, kEmuErrWindowInvalid,
                  "memory window deallocated while data arrived through it");
    return false;
  }
  if (in_mr_index_ == 0 || mrs_->Exists(in_mr_index_)) return true;
  ResponderFail(in_hdr_.seq,
                in_hdr_.type == kFrameSend ? CompletionStatus::kRemoteInvalidRequest
                                           : CompletionStatus::kRemoteAccessError,
                kEmuErrRegionGone, "target region deregistered while data arrived");
  return false;
}

// Waits for input in the receive call itself (nothing to send, no timer):
// one syscall instead of poll + receive. SO_RCVTIMEO is a power-of-two
// number of ms, kMargin short of the deadline (the kernel rounds it up to
// jiffies), so it rarely changes; returns false (use the precise ppoll) when
// the deadline is close.
bool EmuConnection::BlockingRead(Deadline deadline) {
  constexpr int64_t kMarginMs = 20;
  int64_t want = 0;
  if (!deadline.infinite()) {
    // The coarse clock (cheap to read; at most a tick, ~1-10 ms, behind):
    // the margin below keeps the socket's wait within the deadline.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.when() -
                                                                      Deadline::CoarseNow());
    const int64_t usable = left.count() - kMarginMs;
    if (usable < 4) return false;
    want = 1;
    while (want * 2 <= usable && want < (int64_t{1} << 40)) want *= 2;
  }
  if (want != rcvtimeo_ms_) {
    timeval tv{static_cast<time_t>(want / 1000), static_cast<suseconds_t>(want % 1000 * 1000)};
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) return false;
    rcvtimeo_ms_ = want;
  }
  ReadInput(/*block=*/true);
  return true;
}

// Reads until the socket is drained (or a bound), applying frames. With
// `block`, the first receive waits (up to SO_RCVTIMEO).
void EmuConnection::ReadInput(bool block) {
  for (int i = 0; i < kMaxReadsPerCall && !broken_; ++i) {
    ParseBuffered();
    if (broken_) return;
    const int flags = (block && i == 0) ? 0 : MSG_DONTWAIT;
    ssize_t n;
    size_t asked;
    if (in_payload_ && in_dest_ != nullptr) {
      // Staging is empty: receive the payload straight into its target, and
      // whatever follows into staging, in one call.
      if (!InDestValid()) return;
      rpos_ = wpos_ = 0;
      uint32_t remaining = in_hdr_.length - in_done_;
      iovec iov[2] = {{in_dest_ + in_done_, remaining}, {rbuf_.get(), kReadBufSize}};
      asked = remaining + kReadBufSize;
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = 2;
      n = ::recvmsg(fd_.get(), &mh, flags);
      if (n > 0) {
        uint32_t take = static_cast<uint32_t>(std::min<size_t>(static_cast<size_t>(n), remaining));
        in_done_ += take;
        wpos_ = static_cast<size_t>(n) - take;
        if (in_done_ == in_hdr_.length) FinishRequest();
      }
    } else {
      if (rpos_ > 0) {
        std::memmove(rbuf_.get(), rbuf_.get() + rpos_, wpos_ - rpos_);
        wpos_ -= rpos_;
        rpos_ = 0;
      }
      asked = kReadBufSize - wpos_;
      n = ::recv(fd_.get(), rbuf_.get() + wpos_, asked, flags);
      if (n > 0) wpos_ += static_cast<size_t>(n);
    }
    if (n == 0) {
      ParseBuffered();
      Break(disconnect_requested_.load() ? "disconnected locally" : "connection closed by peer");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Break("receive failed: " + Errno(errno));
      return;
    }
    if (static_cast<size_t>(n) < asked) break;  // drained
  }
  ParseBuffered();
}

void EmuConnection::ParseBuffered() {
  while (!broken_) {
    if (in_payload_) {
      size_t avail = wpos_ - rpos_;
      if (avail == 0) return;
      if (!InDestValid()) return;
      uint32_t take = static_cast<uint32_t>(std::min<size_t>(avail, in_hdr_.length - in_done_));
      if (in_dest_ != nullptr) std::memcpy(in_dest_ + in_done_, rbuf_.get() + rpos_, take);
      rpos_ += take;
      in_done_ += take;
      if (in_done_ == in_hdr_.length) FinishRequest();
      continue;
    }
    if (wpos_ - rpos_ < kHdrSize) return;
    Header h = DecodeHeader(rbuf_.get() + rpos_);
    rpos_ += kHdrSize;
    ProcessHeader(h);
  }
}

void EmuConnection::ProcessHeader(const Header& h) {
  switch (h.type) {
    case kFrameCtrl:
      HandleAck(h.seq);
      return;
    case kFrameNak:
      HandleNak(h);
      return;
    case kFrameRnrNak:
      HandleRnrNak(h);
      return;
    case kFrameSend:
    case kFrameWrite:
    case kFrameWriteImm: {
      const uint8_t allowed = h.type == kFrameWrite ? 0 : kFrameFlagSolicited;
      if ((h.flags & ~allowed) != 0) {
        Break("protocol error: request frame with flags " + Hex(h.flags));
        return;
      }
      ProcessRequest(h);
      return;
    }
    default:
      Break("protocol error: unknown frame type " + std::to_string(h.type));
  }
}

void EmuConnection::ProcessRequest(const Header& h) {
  in_hdr_ = h;
  in_done_ = 0;
  in_dest_ = nullptr;
  in_mr_index_ = 0;
  in_window_index_ = 0;
  const bool retransmitted = in_rnr_ && h.seq == in_expected_seq_;
  if (in_rnr_ && h.seq > in_expected_seq_) {  // sent before our RNR NAK: drop
    in_payload_ = h.length > 0;
    return;
  }
  if (h.seq != in_expected_seq_) {
    Break("protocol error: request sequence " + std::to_string(h.seq) + ", expected " +
          std::to_string(in_expected_seq_));
    return;
  }
  if (retransmitted) in_rnr_ = false;
  if ((h.type == kFrameSend || h.type == kFrameWriteImm) && rq_.empty()) {
    // RNR: NAK it, drop its payload and everything after it until resent.
    OutFrame f;
    Header nak;
    nak.type = kFrameRnrNak;
    nak.seq = h.seq;
    EncodeHeader(nak, f.hdr);
    QueueUrgent(f);
    in_rnr_ = true;
    in_payload_ = h.length > 0;
    return;
  }
  ++in_expected_seq_;
  if (h.type == kFrameSend) {
    RecvWr& r = rq_.front();
    if (h.length > 0) {
      uint32_t err = r.error;
      if (err == kEmuErrNone && r.mr_index != 0 && !mrs_->Exists(r.mr_index)) {
        err = kEmuErrBadLkey;
      }
      if (err == kEmuErrNone && h.length > r.len) {
        Complete(r.wr_id, WorkOpcode::kRecv, CompletionStatus::kLocalLengthError, h.length,
                 kEmuErrRecvTooSmall, 0);
        rq_.pop_front();
        ResponderFail(h.seq, CompletionStatus::kRemoteInvalidRequest, kEmuErrRecvTooSmall,
                      "SEND of " + std::to_string(h.length) +
                          " bytes into a receive buffer of " + std::to_string(r.len));
        return;
      }
      if (err != kEmuErrNone) {
        Complete(r.wr_id, WorkOpcode::kRecv, CompletionStatus::kLocalProtectionError, 0, err, 0);
        rq_.pop_front();
        ResponderFail(h.seq, CompletionStatus::kRemoteInvalidRequest, kEmuErrRecvBufferInvalid,
                      "receive buffer with an invalid lkey or access");
        return;
      }
      in_dest_ = r.addr;
      in_mr_index_ = r.mr_index;
    }
  } else if (h.length > 0) {  // WRITE / WRITE_IMM
    uint32_t err = mrs_->Check(h.key, MrTable::kRkeyTag, h.addr, h.length, kAccessRemoteWrite,
                               &in_mr_index_, &in_window_index_);
    if (err != kEmuErrNone) {
      ResponderFail(h.seq, CompletionStatus::kRemoteAccessError, err,
                    "remote access error (rkey " + Hex(h.key) + ", addr " + Hex(h.addr) +
                        ", length " + std::to_string(h.length) + ")");
      return;
    }
    in_dest_ = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(h.addr));
  }
  if (h.length == 0) {
    FinishRequest();
  } else {
    in_payload_ = true;
  }
}

void EmuConnection::FinishRequest() {
  in_payload_ = false;
  in_dest_ = nullptr;
  in_window_index_ = 0;
  if (in_rnr_ || in_hdr_.type == 0) return;  // a dropped request
  if (in_hdr_.type != kFrameWrite) {
    RecvWr r = rq_.front();
    rq_.pop_front();
    Completion c;
    c.wr_id = r.wr_id;
    c.byte_len = in_hdr_.length;
    if (in_hdr_.type == kFrameSend) {
      c.opcode = WorkOpcode::kRecv;
    } else {
      c.opcode = WorkOpcode::kRecvRdmaWithImm;
      c.has_imm = true;
      c.imm_data = in_hdr_.imm;
    }
    AddCqe(c, 0, (in_hdr_.flags & kFrameFlagSolicited) != 0);
  }
  acked_ = in_hdr_.seq;
}

bool EmuConnection::RunLocal(uint64_t before_seq) {
  for (LocalWr& l : local_q_) {
    if (l.after_seq >= before_seq) return true;
    if (l.executed) {
      if (l.fail != CompletionStatus::kSuccess) return false;
      continue;
    }
    // Verbs ordering: an invalidate takes effect after a write landing
    // through the window has been placed whole (a write either lands
    // completely before the invalidate completes or fails completely).
    if (l.opcode == WorkOpcode::kLocalInvalidate && in_payload_ &&
        in_window_index_ == l.window_index) {
      return false;
    }
    ExecuteLocal(l);
    if (l.fail != CompletionStatus::kSuccess) return false;
  }
  return true;
}

void EmuConnection::ExecuteLocal(LocalWr& l) {
  l.executed = true;
  auto fail = [&](std::string why) {
    l.fail = CompletionStatus::kLocalProtectionError;
    l.vendor_err = kEmuErrWindowBind;
    l.fail_reason = std::move(why);
  };
  std::lock_guard<std::mutex> lock(mrs_->mu);
  auto w = mrs_->windows.find(l.window_index);
  if (l.opcode == WorkOpcode::kLocalInvalidate) {
    if (w == mrs_->windows.end()) return fail("LOCAL_INV of key " + Hex(l.key) + ": no such window");
    if (!w->second.bound || w->second.key != (l.key & 0xff)) {
      return fail("LOCAL_INV of key " + Hex(l.key) + ": the window is not bound under that key");
    }
    w->second.bound = false;
    return;
  }
  if (w == mrs_->windows.end()) return fail("BIND_MW: window deallocated");
  // o10-36.2.2: a type-2 window is bound only from the free state.
  if (w->second.bound) return fail("BIND_MW of a window still bound (invalidate it first)");
  auto mr = mrs_->regions.find(l.mr_index);
  if (mr == mrs_->regions.end()) return fail("BIND_MW over a deregistered region");
  const MrTable::Entry& e = mr->second;
  const uint64_t base = reinterpret_cast<uintptr_t>(e.addr);
  if (!(e.access & kAccessMwBind)) return fail("BIND_MW over a region without kAccessMwBind");
  if (l.addr < base || l.len > e.len || l.addr - base > e.len - l.len) {
    return fail("BIND_MW range " + Hex(l.addr) + "+" + std::to_string(l.len) +
                " outside its region");
  }
  if ((l.access & kAccessRemoteWrite) && !(e.access & kAccessLocalWrite)) {
    return fail("BIND_MW with remote write over a region without local write");
  }
  w->second = {static_cast<uint8_t>(l.key & 0xff), true, l.mr_index, l.addr, l.len, l.access};
}

void EmuConnection::RetireLocal() {
  while (!broken_ && !local_q_.empty()) {
    const LocalWr& l = local_q_.front();
    if (!l.executed) return;
    if (!sq_.empty() && sq_.front().seq <= l.after_seq) return;  // an earlier frame is pending
    LocalWr done = std::move(local_q_.front());
    local_q_.pop_front();
    if (done.fail != CompletionStatus::kSuccess) {
      Complete(done.wr_id, done.opcode, done.fail, 0, done.vendor_err, done.post_index);
      Break(done.fail_reason + " (wr_id " + std::to_string(done.wr_id) + ")");
      return;
    }
    if (done.signaled) {
      Complete(done.wr_id, done.opcode, CompletionStatus::kSuccess, 0, 0, done.post_index);
    }
  }
}

void EmuConnection::HandleAck(uint64_t count) {
  if (count >= next_tx_seq_) {
    Break("protocol error: ack for a request not sent");
    return;
  }
  while (!sq_.empty() && sq_.front().seq <= count) {
    RetireLocal();  // local WRs posted before this frame complete first
    if (broken_) return;
    const SendWr& w = sq_.front();
    if (w.signaled) CompleteSend(w, CompletionStatus::kSuccess, 0);
    sq_.pop_front();
  }
  RetireLocal();
}

void EmuConnection::HandleNak(const Header& h) {
  if (h.seq == 0 || h.seq >= next_tx_seq_) {
    Break("protocol error: NAK for a request not sent");
    return;
  }
  HandleAck(h.seq - 1);  // everything before it succeeded
  if (broken_ || sq_.empty() || sq_.front().seq != h.seq) {
    Break("protocol error: unexpected NAK");
    return;
  }
  CompletionStatus st = h.key <= static_cast<uint32_t>(CompletionStatus::kGeneralError)
                            ? static_cast<CompletionStatus>(h.key)
                            : CompletionStatus::kGeneralError;
  SendWr w = sq_.front();
  sq_.pop_front();
  CompleteSend(w, st, h.imm);
  Break("peer reported " + std::string(CompletionStatusName(st)) + " for " +
        (w.duplicate ? "a duplicate injected by fault injection of " : "") + "wr_id " +
        std::to_string(w.wr_id));
}

void EmuConnection::HandleRnrNak(const Header& h) {
  if (h.seq == 0 || h.seq >= next_tx_seq_) {
    Break("protocol error: RNR NAK for a request not sent");
    return;
  }
  HandleAck(h.seq - 1);
  if (broken_ || sq_.empty() || sq_.front().seq != h.seq) {
    Break("protocol error: unexpected RNR NAK");
    return;
  }
  SendWr& w = sq_.front();
  if (opts_.rnr_retry_count >= 0 && w.rnr_retries >= opts_.rnr_retry_count) {
    SendWr failed = w;
    sq_.pop_front();
    CompleteSend(failed, CompletionStatus::kRnrRetryExceeded, kEmuErrNoReceive);
    Break(std::string("RNR retry exceeded on ") +
          (failed.duplicate ? "a duplicate injected by fault injection of " : "") + "wr_id " +
          std::to_string(failed.wr_id) + " (no receive posted at the peer)");
    return;
  }
  ++w.rnr_retries;
  // Go back: drop request frames not started yet, resend from h.seq later.
  for (size_t i = 0; i < outq_.size();) {
    if (outq_[i].seq != 0 && outq_[i].sent == 0) {
      outq_.erase(outq_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  next_tx_seq_ = h.seq;
  rnr_pause_until_ = Clock::now() + opts_.rnr_delay;
}

// ---- listener / transport ---------------------------------------------------

// Accepts with every hello exchange in progress at once: a peer that is
// slow, silent or hostile never delays another. At most
// EmulatedOptions::max_pending_handshakes are in progress; past that the
// oldest is dropped (a flood of idle sockets cannot lock legitimate hosts
// out). Each has handshake_timeout to finish.
class EmuListener final : public Listener {
 public:
  EmuListener(UniqueFd fd, UniqueFd event_fd, uint16_t port, EmulatedOptions opts)
      : fd_(std::move(fd)), event_fd_(std::move(event_fd)), port_(port), opts_(std::move(opts)) {}

  // Concurrent callers take turns (the handshakes in progress are shared);
  // each still returns by its own deadline.
  Result<std::unique_ptr<Connection>> Accept(Deadline deadline) override {
    {
      std::unique_lock<std::mutex> lock(turn_mu_);
      if (!turn_cv_.wait_until(lock, deadline.when(), [this] { return !accepting_; })) {
        return DeadlineExceededError("emulated transport: accept timed out");
      }
      accepting_ = true;
    }
    struct EndTurn {
      EmuListener* l;
      ~EndTurn() {
        {
          std::lock_guard<std::mutex> lock(l->turn_mu_);
          l->accepting_ = false;
        }
        l->turn_cv_.notify_one();
      }
    } end_turn{this};
    std::vector<pollfd> fds;
    for (;;) {
      if (shutdown_.load(std::memory_order_acquire)) {
        return UnavailableError("emulated transport: listener shut down");
      }
      // Finished and timed-out handshakes first: each is one accept.
      const Clock::time_point now = Clock::now();
      for (size_t i = 0; i < pending_.size(); ++i) {
        Pending& h = pending_[i];
        if (!h.result && h.deadline <= now) {
          h.result = DeadlineExceededError("emulated transport: hello exchange with " + h.peer +
                                           " timed out");
        }
        if (!h.result) continue;
        Pending done = std::move(h);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        NAARPC_RETURN_IF_ERROR(*done.result);
        std::unique_ptr<Connection> conn(
            new EmuConnection(std::move(done.fd), /*listener_side=*/true, done.peer, opts_));
        // Before the connection's first progress step: nothing the peer
        // sent has been taken off the socket yet, so the hook's receives are
        // there for its first messages, as they are before rdma_accept.
        if (hook_) {
          auto context = hook_(*conn);
          if (!context.ok()) {
            --i;  // pending_[i] is the next one now
            continue;  // refused: closed
          }
          conn->SetAcceptContext(std::move(context).value());
        }
        return conn;
      }
      Clock::time_point wake = deadline.when();
      fds.clear();
      fds.push_back({fd_.get(), POLLIN, 0});
      fds.push_back({event_fd_.get(), POLLIN, 0});
      for (const Pending& h : pending_) {
        fds.push_back({h.fd.get(), static_cast<short>(POLLIN | (h.sent < kHelloSize ? POLLOUT : 0)), 0});
        wake = std::min(wake, h.deadline);
      }
      int r = PollUntil(fds.data(), fds.size(), wake);
      if (r < 0) return UnavailableError("emulated transport: poll failed: " + Errno(errno));
      if (fds[1].revents & POLLIN) return UnavailableError("emulated transport: listener shut down");
      // Progress on the handshakes polled (new ones come after them).
      for (size_t k = 0; k + 2 < fds.size(); ++k) {
        if (fds[2 + k].revents != 0) Step(pending_[k]);
      }
      if (fds[0].revents & POLLIN) NAARPC_RETURN_IF_ERROR(AcceptNew());
      if (r == 0 && deadline.expired()) {
        return DeadlineExceededError("emulated transport: accept timed out");
      }
    }
  }

  uint16_t port() const override { return port_; }

  bool SetAcceptHook(AcceptHook hook) override {
    hook_ = std::move(hook);
    return true;
  }

  void Shutdown() override {
    shutdown_.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
    (void)n;
  }

 private:
  struct Pending {
    UniqueFd fd;
    std::string peer;
    Clock::time_point deadline;
    size_t sent = 0;  // of our hello
    size_t got = 0;   // of theirs
    uint8_t in[kHelloSize] = {};
    std::optional<Status> result;  // set once finished: OK, or why it failed
  };

  // Takes every connection waiting in the backlog; sends each our hello.
  Status AcceptNew() {
    for (;;) {
      int cfd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (cfd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          return ResourceExhaustedError("emulated transport: accept failed: " + Errno(errno));
        }
        return UnavailableError("emulated transport: accept failed: " + Errno(errno));
      }
      if (opts_.max_pending_handshakes > 0 && pending_.size() >= opts_.max_pending_handshakes) {
        pending_.erase(pending_.begin());  // the oldest: most likely a stalled peer
      }
      Pending h;
      h.fd = UniqueFd(cfd);
      SetNoDelay(cfd);
      h.peer = PeerName(cfd);
      h.deadline = Clock::now() + opts_.handshake_timeout;
      pending_.push_back(std::move(h));
      Step(pending_.back());  // usually sends our hello at once
    }
  }

  // Sends what is left of our hello and reads theirs; sets h.result once
  // both are through (OK if theirs is valid) or the exchange failed.
  static void Step(Pending& h) {
    if (!h.result) {
      Result<bool> done = Exchange(h);
      if (!done.ok()) {
        h.result = done.status();
      } else if (*done) {
        h.result = Status::Ok();
      }
    }
  }
  static Result<bool> Exchange(Pending& h) {
    uint8_t out[kHelloSize] = {};
    PutLe<uint32_t>(out, kHelloMagic);
    PutLe<uint16_t>(out + 4, kWireVersion);
    while (h.sent < kHelloSize) {
      ssize_t n = ::send(h.fd.get(), out + h.sent, kHelloSize - h.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        h.sent += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else if (!(n < 0 && errno == EINTR)) {
        return UnavailableError("emulated transport: sending hello to " + h.peer + " failed: " +
                                Errno(errno));
      }
    }
    while (h.got < kHelloSize) {
      ssize_t n = ::recv(h.fd.get(), h.in + h.got, kHelloSize - h.got, MSG_DONTWAIT);
      if (n > 0) {
        h.got += static_cast<size_t>(n);
      } else if (n == 0) {
        return UnavailableError("emulated transport: " + h.peer +
                                " closed the connection during the hello exchange");
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return false;
      } else if (errno != EINTR) {
        return UnavailableError("emulated transport: reading hello from " + h.peer +
                                " failed: " + Errno(errno));
      }
    }
    NAARPC_RETURN_IF_ERROR(CheckHello(h.in, h.peer));
    return h.sent == kHelloSize;
  }

  UniqueFd fd_, event_fd_;
  uint16_t port_;
  EmulatedOptions opts_;
  AcceptHook hook_;
  std::atomic<bool> shutdown_{false};
  // One Accept at a time (a turn); pending_ belongs to the caller whose
  // turn it is.
  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  bool accepting_ = false;  // guarded by turn_mu_
  std::vector<Pending> pending_;
};

class EmuTransport final : public Transport {
 public:
  explicit EmuTransport(EmulatedOptions opts) : opts_(std::move(opts)) {}

  std::string_view name() const override { return "emulated"; }

  Result<std::unique_ptr<Transport>> WithLocalAddress(
      const std::string& local_address) const override {
    EmulatedOptions o = opts_;
    o.source_address = local_address;
    return NewEmulatedTransport(std::move(o));
  }

  using Transport::Connect;
  Result<std::unique_ptr<Connection>> Connect(const std::string& host, uint16_t port,
                                              Deadline deadline,
                                              const ConnectOptions& options) override {
    if (port == 0) return InvalidArgumentError("emulated transport: Connect to port 0");
    NAARPC_ASSIGN_OR_RETURN(std::vector<SockAddr> addrs, Resolve(host, port, /*passive=*/false));
    const std::string target = HostPort(host, port);
    std::optional<SockAddr> source;
    if (!opts_.source_address.empty()) {
      auto local = Resolve(opts_.source_address, 0, /*passive=*/false);
      if (!local.ok()) return local.status().WithContext("emulated transport: source address");
      source = local->front();
    }
    for (int attempt = 0;; ++attempt) {
      // Each address in turn (a name may have IPv6 and IPv4 ones); the
      // first that accepts wins, otherwise the first address's error.
      ConnectAttempt c;
      int first_err = 0;
      for (const SockAddr& addr : addrs) {
        c = ConnectTo(addr, source ? &*source : nullptr, deadline);
        if (c.timed_out) {
          return DeadlineExceededError("emulated transport: connecting to " + target +
                                       " timed out");
        }
        if (c.err == 0) break;
        if (first_err == 0) first_err = c.err;
        if (c.err == EMFILE || c.err == ENFILE || c.err == ENOBUFS || c.err == ENOMEM) {
          return ResourceExhaustedError("emulated transport: socket: " + Errno(c.err));
        }
      }
      const int err = c.err == 0 ? 0 : first_err;
      if (err == ECONNREFUSED && options.retry_refused && attempt < opts_.connect_retries) {
        auto wake = std::min(deadline.when(), Clock::now() + opts_.connect_retry_delay);
        std::this_thread::sleep_until(wake);
        if (!deadline.expired()) continue;
      }
      if (err != 0) {
        return UnavailableError("emulated transport: cannot connect to " + target + ": " +
                                Errno(err));
      }
      UniqueFd fd = std::move(c.fd);
      SetNoDelay(fd.get());
      std::string peer = PeerName(fd.get());
      NAARPC_RETURN_IF_ERROR(Handshake(fd.get(), peer, deadline, -1));
      return std::unique_ptr<Connection>(
          new EmuConnection(std::move(fd), /*listener_side=*/false, peer, opts_));
    }
  }

  Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port) override {
    NAARPC_ASSIGN_OR_RETURN(std::vector<SockAddr> addrs, Resolve(host, port, /*passive=*/true));
    const SockAddr& addr = addrs.front();  // as the verbs transport: the preferred one
    UniqueFd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return ResourceExhaustedError("emulated transport: socket: " + Errno(errno));
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), addr.get(), addr.length) != 0) {
      return UnavailableError("emulated transport: cannot listen on " +
                              SockaddrToString(addr.get()) + ": " + Errno(errno));
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      return UnavailableError("emulated transport: listen: " + Errno(errno));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    UniqueFd efd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (efd.get() < 0) return ResourceExhaustedError("emulated transport: eventfd: " + Errno(errno));
    return std::unique_ptr<Listener>(
        new EmuListener(std::move(fd), std::move(efd), PortOf(bound), opts_));
  }

 private:
  EmulatedOptions opts_;
};

}  // namespace

std::unique_ptr<Transport> NewEmulatedTransport(EmulatedOptions options) {
  return std::make_unique<EmuTransport>(std::move(options));
}

}  // namespace naarpc
