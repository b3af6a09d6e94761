// Hosts that break the protocol, leave mid-call, stall, or send calls the
// NAA refuses: each is logged once, naming the peer and the reason
// (docs/server.md, "Log"). The host is a raw TCP peer speaking the emulated
// transport's wire (runtime/transport_impl/emulated/frame.h), so it can send
// what no conforming transport would. Waits end on the awaited log line or
// event; deadlines only guard against hangs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/wire/mrsp.h"
#include "tests/testing/log_capture.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kEcho = 1;
constexpr uint8_t kBlock = 2;    // waits until Release()
constexpr uint8_t kSlow = 3;     // as kBlock, with a time limit
constexpr uint8_t kUnknown = 5;  // answered 0x03 by the handler

class Handler final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    if (call.function_code == kUnknown) return kNaaStatusUnknownFunction;
    if (call.function_code == kBlock || call.function_code == kSlow) {
      std::unique_lock<std::mutex> lock(mu_);
      ++blocked_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    }
    return kNaaStatusSuccess;
  }
  std::chrono::milliseconds KernelTimeout(uint8_t code) const override {
    return code == kSlow ? 50ms : 0ms;
  }
  std::string_view RoutineName(uint8_t code) const override {
    switch (code) {
      case kEcho: return "Test.Echo";
      case kBlock: return "Test.Block";
      case kSlow: return "Test.Slow";
      default: return {};
    }
  }
  bool WaitBlocked() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 60s, [&] { return blocked_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int blocked_ = 0;        // guarded by mu_
  bool released_ = false;  // guarded by mu_
};

// Frame types and header layout: runtime/transport_impl/emulated/frame.h.
enum : uint8_t { kSend = 1, kWrite = 2, kWriteImm = 3, kCtrl = 4 };
constexpr size_t kHdr = 32;

struct Frame {
  uint8_t type = 0, flags = 0;
  uint32_t length = 0;
  uint64_t seq = 0, addr = 0;
  uint32_t key = 0, imm = 0;
  std::vector<uint8_t> payload;
};

// A frame of `type`; a request of `length` > 0 carries that many zero bytes.
Frame MakeFrame(uint8_t type, uint8_t flags = 0, uint64_t seq = 0, uint64_t addr = 0,
                uint32_t key = 0, uint32_t length = 0) {
  Frame f;
  f.type = type;
  f.flags = flags;
  f.seq = seq;
  f.addr = addr;
  f.key = key;
  f.length = length;
  f.payload.assign(length, 0);
  return f;
}

std::vector<uint8_t> EncodeFrame(const Frame& f) {
  std::vector<uint8_t> b(kHdr + f.payload.size());
  b[0] = f.type;
  b[1] = f.flags;
  std::memcpy(&b[4], &f.length, 4);  // little-endian hosts only (x86, arm64)
  std::memcpy(&b[8], &f.seq, 8);
  std::memcpy(&b[16], &f.addr, 8);
  std::memcpy(&b[24], &f.key, 4);
  const uint32_t imm_be = __builtin_bswap32(f.imm);
  std::memcpy(&b[28], &imm_be, 4);
  if (!f.payload.empty()) std::memcpy(&b[kHdr], f.payload.data(), f.payload.size());
  return b;
}

// A host on raw TCP: the hello, the MRSP (reference dialect, one 64-byte
// in/out region), then whatever a test sends.
class RawPeer {
 public:
  ~RawPeer() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // TCP connect and the hello exchange.
  bool Connect(uint16_t port) {
    static_assert(std::endian::native == std::endian::little);
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    timeval tv{60, 0};  // hang guard of every read
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return false;
    uint8_t hello[16] = {0x45, 0x45, 0x41, 0x4e, 1, 0};  // "NAEE", version 1
    if (!SendBytes(hello, sizeof(hello))) return false;
    uint8_t theirs[16];
    return ReadBytes(theirs, sizeof(theirs)) && std::memcmp(theirs, hello, 6) == 0;
  }
  // The MRSP; on success region() is the NAA's region.
  bool Mrsp() {
    AdvertisementRequestMessage req;
    req.regions.push_back({kRegionFlagInput | kRegionFlagOutput, 0, 0x1000, 0x100, 64});
    auto bytes = EncodeMrsp(MrspMessage(req));
    if (!bytes.ok()) return false;
    Frame f;
    f.type = kSend;
    f.length = static_cast<uint32_t>(bytes->size());
    f.payload = *bytes;
    if (!Send(f)) return false;
    for (;;) {
      Frame in;
      if (!Read(in)) return false;
      if (in.type != kSend) continue;
      auto msg = DecodeMrsp(in.payload);
      if (!msg.ok()) return false;
      const auto* adv = std::get_if<AdvertisementMessage>(&*msg);
      if (adv == nullptr || adv->regions.empty()) return false;
      region_ = adv->regions.front();
      return true;
    }
  }
  // A request frame with the next sequence number.
  bool Send(Frame f) {
    if (f.type == kSend || f.type == kWrite || f.type == kWriteImm) f.seq = ++seq_;
    const std::vector<uint8_t> b = EncodeFrame(f);
    return SendBytes(b.data(), b.size());
  }
  // A call's WRITE_WITH_IMM (no data) to the NAA's region.
  bool Call(uint32_t imm) {
    Frame f;
    f.type = kWriteImm;
    f.addr = region_.addr;
    f.key = region_.rkey;
    f.imm = imm;
    return Send(f);
  }
  // Reads frames (acknowledging requests) until the call's status arrives.
  bool ReadStatus(uint8_t* status) {
    for (;;) {
      Frame in;
      if (!Read(in)) return false;
      if (in.type == kWriteImm) {
        *status = static_cast<uint8_t>((in.imm & 0xff) != 0 ? in.imm & 0xff : (in.imm >> 8) & 0xff);
        return true;
      }
    }
  }
  bool SendBytes(const void* p, size_t n) {
    return ::send(fd_, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  const RegionAdvertisement& region() const { return region_; }

 private:
  bool ReadBytes(uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t got = ::recv(fd_, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  // One frame; a request is acknowledged (a CTRL with its sequence).
  bool Read(Frame& f) {
    uint8_t h[kHdr];
    if (!ReadBytes(h, kHdr)) return false;
    f.type = h[0];
    std::memcpy(&f.length, &h[4], 4);
    std::memcpy(&f.seq, &h[8], 8);
    std::memcpy(&f.imm, &h[28], 4);
    f.imm = __builtin_bswap32(f.imm);
    f.payload.assign(f.type >= kSend && f.type <= kWriteImm ? f.length : 0, 0);
    if (!f.payload.empty() && !ReadBytes(f.payload.data(), f.payload.size())) return false;
    if (f.type >= kSend && f.type <= kWriteImm) {
      Frame ack;
      ack.type = kCtrl;
      ack.seq = f.seq;
      return Send(ack);
    }
    return true;
  }

  int fd_ = -1;
  uint64_t seq_ = 0;
  RegionAdvertisement region_;
};

class HostilePeerTest : public ::testing::Test {
 protected:
  void Start(EmulatedOptions naa = {}) {
    transport_ = NewEmulatedTransport(naa);
    ServerOptions options;
    options.log = lines_.Sink();
    auto s = NaaServer::Start(*transport_, "127.0.0.1", 0, handler_, options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  // A peer past its MRSP.
  void Open(RawPeer& peer) {
    ASSERT_TRUE(peer.Connect(server_->port()));
    ASSERT_TRUE(peer.Mrsp());
  }
  void TearDown() override {
    handler_.Release();  // Shutdown waits for an overrun kernel (shutdown_grace)
    server_.reset();
  }

  std::unique_ptr<Transport> transport_;
  Handler handler_;
  testing::LogCapture lines_;
  std::unique_ptr<NaaServer> server_;
};

// What each violation sends after the MRSP (or instead of it), and the
// transport's reason the NAA's line must carry.
struct Violation {
  const char* name;
  bool before_mrsp;
  Frame frame;
  const char* reason;
};

class ProtocolViolationTest : public HostilePeerTest,
                              public ::testing::WithParamInterface<Violation> {};

TEST_P(ProtocolViolationTest, IsLoggedWithThePeerAndTheTransportsReason) {
  Start();
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_->port()));
  if (!GetParam().before_mrsp) {
    ASSERT_TRUE(peer.Mrsp());
  }
  Frame f = GetParam().frame;
  if (f.type == kWriteImm && f.key == 0) f.key = peer.region().rkey ^ 0xffff00;  // wrong key
  if (f.type == kWriteImm) f.addr = peer.region().addr;
  ASSERT_TRUE(peer.Send(f));
  ASSERT_TRUE(lines_.WaitFor(std::string("]: disconnected: ") + GetParam().reason)) << lines_.All();
  EXPECT_TRUE(lines_.WaitFor("naarpc NAA [127.0.0.1:")) << lines_.All();
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(60s)));
}

INSTANTIATE_TEST_SUITE_P(
    Violations, ProtocolViolationTest,
    ::testing::Values(
        Violation{"UnknownFrameType", false, MakeFrame(9), "protocol error: unknown frame type 9"},
        // (A zero-length write is not checked, as in the IB spec: one byte.)
        Violation{"WriteImmWithAWrongRkey", false, MakeFrame(kWriteImm, 0, 0, 0, 0, 1),
                  "remote access error (rkey"},
        Violation{"BadFlags", false, MakeFrame(kWrite, 0x40),
                  "protocol error: request frame with flags 0x40"},
        Violation{"AckOfASequenceNeverSent", false, MakeFrame(kCtrl, 0, 99),
                  "protocol error: ack for a request not sent"},
        Violation{"WriteBeforeTheMrsp", true, MakeFrame(kWrite, 0, 0, 0x1000, 0x42, 1),
                  "remote access error (rkey"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(HostilePeerTest, AHostThatLeavesMidCallIsLoggedWithTheRoutine) {
  Start();
  RawPeer peer;
  Open(peer);
  ASSERT_TRUE(peer.Call(0x80 | kBlock));
  ASSERT_TRUE(handler_.WaitBlocked());
  peer.Close();  // as kill -9 would
  handler_.Release();
  // (Seen when its results go unacknowledged, or when they cannot be sent.)
  EXPECT_TRUE(lines_.WaitFor("]: disconnected before acknowledging the results of Test.Block "
                             "(function 2): ") ||
              lines_.WaitFor("]: disconnected during a call of Test.Block (function 2): ", 0ms))
      << lines_.All();
}

TEST_F(HostilePeerTest, AHostThatLeavesBetweenCallsIsNotLogged) {
  Start();
  {
    RawPeer peer;
    Open(peer);
    ASSERT_TRUE(peer.Call(0x80 | kEcho));
    uint8_t status = 0xff;
    ASSERT_TRUE(peer.ReadStatus(&status));
    EXPECT_EQ(status, kNaaStatusSuccess);
  }
  ASSERT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(60s)));
  EXPECT_EQ(lines_.Count("disconnected"), 0u) << lines_.All();
}

TEST_F(HostilePeerTest, RefusedImmediatesAreLogged) {
  Start();
  RawPeer peer;
  Open(peer);
  uint8_t status = 0;
  // A spec-dialect immediate on a reference-dialect connection.
  ASSERT_TRUE(peer.Call(kEcho));
  ASSERT_TRUE(peer.ReadStatus(&status));
  EXPECT_EQ(status, kNaaStatusBadRegionLayout);
  EXPECT_TRUE(lines_.WaitFor("call of function 1 refused (0x04): request immediate 0x00000001 is "
                             "of the spec dialect (bit 7 clear); the MRSP chose the reference "
                             "dialect (bit 7 set expected)"))
      << lines_.All();
  // No function code.
  ASSERT_TRUE(peer.Call(0x80));
  ASSERT_TRUE(peer.ReadStatus(&status));
  EXPECT_EQ(status, kNaaStatusUnknownFunction);
  EXPECT_TRUE(lines_.WaitFor("call refused (0x03): request immediate 0x00000080 names no function"))
      << lines_.All();
  // A code the handler does not serve.
  ASSERT_TRUE(peer.Call(0x80 | kUnknown));
  ASSERT_TRUE(peer.ReadStatus(&status));
  EXPECT_EQ(status, kNaaStatusUnknownFunction);
  EXPECT_TRUE(lines_.WaitFor("call of function 5 answered 0x03 (unknown function)"))
      << lines_.All();
}

// A frame header that stops part-way is a stalled message too.
TEST_F(HostilePeerTest, AHeaderThatStopsPartWayIsBrokenAndLogged) {
  EmulatedOptions naa;
  naa.stall_timeout = 100ms;
  Start(naa);
  RawPeer peer;
  Open(peer);
  Frame f;
  f.type = kWriteImm;
  f.seq = 2;
  const std::vector<uint8_t> b = EncodeFrame(f);
  ASSERT_TRUE(peer.SendBytes(b.data(), 20));  // 20 of its 32 bytes, then nothing
  EXPECT_TRUE(lines_.WaitFor("]: disconnected: the peer stopped sending in the middle of a frame "
                             "header: 20 of its 32 bytes"))
      << lines_.All();
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(60s)));
}

TEST_F(HostilePeerTest, AKernelOverrunNamesTheRoutine) {
  Start();
  RawPeer peer;
  Open(peer);
  ASSERT_TRUE(peer.Call(0x80 | kSlow));
  uint8_t status = 0;
  ASSERT_TRUE(peer.ReadStatus(&status));
  EXPECT_EQ(status, kNaaStatusKernelTimeout);
  EXPECT_TRUE(lines_.WaitFor("]: kernel of Test.Slow (function 3) exceeded 50 ms")) << lines_.All();
}

}  // namespace
}  // namespace naarpc
