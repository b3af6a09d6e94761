// Frames of an emulated connection (connection.h, the wire: frame.h):
// queued and written with scatter-gather straight from registered memory,
// read into a staging buffer or straight into the target memory, parsed.
#include "runtime/transport_impl/emulated/connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

namespace naarpc {
namespace emulated {

namespace {

constexpr int kMaxIov = 64;
constexpr size_t kMaxBytesPerSend = size_t{256} << 20;
constexpr int kMaxReadsPerCall = 64;

// REQUIRES: offset < m.len; `pieces`: m's gather list, if any.
uint8_t PayloadByte(const WireMessage& m, const std::vector<GatherPiece>* pieces,
                    uint32_t offset) {
  if (pieces == nullptr) return m.payload[offset];
  for (const GatherPiece& p : *pieces) {
    if (offset < p.len) return p.data[offset];
    offset -= p.len;
  }
  return 0;  // unreachable: the pieces add up to m.len
}

}  // namespace

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
  EncodeHeader(h, f.hdr.bytes);
  f.payload = m.payload;
  f.pieces = gathers_.Get(m.gather);
  f.len = m.len;
  f.seq = w.seq;
  if (m.stall_after != UINT32_MAX) f.stall_at = kHdrSize + std::min(m.stall_after, m.len);
  if (m.corrupt_off < m.len) {
    f.corrupt_off = m.corrupt_off;
    f.corrupt_byte = static_cast<uint8_t>(PayloadByte(m, f.pieces, m.corrupt_off) ^ 0xff);
  }
  out_.frames.push_back(std::move(f));
}

// Puts a small frame ahead of every frame not yet started.
void EmuConnection::QueueUrgent(OutFrame&& f) {
  size_t pos = 0;
  while (pos < out_.frames.size() && (out_.frames[pos].sent > 0 || out_.frames[pos].seq == 0)) ++pos;
  out_.frames.insert(out_.frames.begin() + static_cast<std::ptrdiff_t>(pos), std::move(f));
}

// Queues a CTRL frame if the ack changed (an unsent one is updated in place;
// acks are cumulative, so one frame covers many requests).
void EmuConnection::UpdateCtrl() {
  if (out_.acked == out_.sent_acked) return;
  Header h;
  h.type = kFrameCtrl;
  h.seq = out_.acked;
  out_.sent_acked = out_.acked;
  if (out_.lead_ctrl || out_.frames.empty() ||
      (out_.frames.front().sent == 0 && out_.frames.front().seq != 0)) {
    EncodeHeader(h, out_.lead_ctrl_hdr.bytes);
    out_.lead_ctrl = true;
    return;
  }
  for (OutFrame& f : out_.frames) {
    if (f.sent > 0) continue;
    if (f.seq != 0) break;  // control frames precede unstarted request frames
    if (f.is_ctrl) {
      EncodeHeader(h, f.hdr.bytes);
      return;
    }
  }
  OutFrame f;
  f.is_ctrl = true;
  EncodeHeader(h, f.hdr.bytes);
  QueueUrgent(std::move(f));
}

// One write of `n` pieces, `total` bytes (what sendmsg would return). A
// small write in several pieces (a call's header and payload) is copied
// into one buffer and sent with send(), which skips sendmsg's msghdr and
// iovec import.
ssize_t EmuConnection::SendPieces(const iovec* iov, int n, size_t total) {
  constexpr int kFlags = MSG_DONTWAIT | MSG_NOSIGNAL;
  if (n == 1) return ::send(fd_.get(), iov[0].iov_base, iov[0].iov_len, kFlags);
  if (total <= kCoalesceBytes) {
    uint8_t* p = out_.coalesced;
    for (int i = 0; i < n; ++i) {
      std::memcpy(p, iov[i].iov_base, iov[i].iov_len);
      p += iov[i].iov_len;
    }
    return ::send(fd_.get(), out_.coalesced, total, kFlags);
  }
  msghdr mh{};
  mh.msg_iov = const_cast<iovec*>(iov);
  mh.msg_iovlen = static_cast<size_t>(n);
  return ::sendmsg(fd_.get(), &mh, kFlags);
}

// Writes as much of the output queue as the socket takes. Returns true if
// bytes remain (wait for POLLOUT).
bool EmuConnection::PushQueued() {
  if (broken_ || out_.stalled) return false;
  UpdateCtrl();
  while (out_.lead_ctrl || !out_.frames.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    size_t total = 0;
    if (out_.lead_ctrl) {
      iov[n++] = {out_.lead_ctrl_hdr.bytes, kHdrSize};
      total += kHdrSize;
    }
    for (const OutFrame& f : out_.frames) {
      if (n > kMaxIov - 4 || total >= kMaxBytesPerSend) break;
      // A stalled message ends what goes out: its first bytes, then nothing.
      const uint64_t limit = std::min(f.stall_at, f.total());
      if (f.sent == 0 && limit == f.total() && !f.pieces && f.corrupt_off == UINT32_MAX &&
          total + limit <= kMaxBytesPerSend) {  // the common frame: header and payload, whole
        iov[n++] = {const_cast<uint8_t*>(f.hdr.bytes), kHdrSize};
        if (f.len > 0) iov[n++] = {const_cast<uint8_t*>(f.payload), f.len};
        total += limit;
        continue;
      }
      uint64_t pos = 0;   // the frame offset of the next segment
      bool full = false;  // the rest of the frame goes with the next sendmsg
      // Frame bytes [pos, pos + len) at `p`, less what is sent or past the limit.
      auto segment = [&](const uint8_t* p, uint64_t len) {
        const uint64_t start = pos;
        pos += len;
        const uint64_t begin = std::max(start, f.sent), end = std::min(pos, limit);
        if (begin >= end || full) return;
        if (n == kMaxIov || total >= kMaxBytesPerSend) {
          full = true;
          return;
        }
        const size_t take = static_cast<size_t>(std::min(end - begin, kMaxBytesPerSend - total));
        iov[n].iov_base = const_cast<uint8_t*>(p + (begin - start));
        iov[n].iov_len = take;
        ++n;
        total += take;
        full = take < end - begin;
      };
      // Payload bytes, the corrupted one (fault injection) replaced.
      const uint64_t corrupt_at =
          f.corrupt_off == UINT32_MAX ? UINT64_MAX : kHdrSize + uint64_t{f.corrupt_off};
      auto payload = [&](const uint8_t* p, uint64_t len) {
        if (corrupt_at < pos || corrupt_at >= pos + len) return segment(p, len);
        const uint64_t before = corrupt_at - pos;
        segment(p, before);
        segment(&f.corrupt_byte, 1);
        segment(p + before + 1, len - before - 1);
      };
      segment(f.hdr.bytes, kHdrSize);
      if (f.pieces) {
        for (const GatherPiece& piece : *f.pieces) payload(piece.data, piece.len);
      } else {
        payload(f.payload, f.len);
      }
      if (full || limit < f.total()) break;  // nothing after a stalled message
    }
    if (n == 0) {  // all that is left is behind a stalled message
      out_.stalled = true;
      return false;
    }
    ssize_t sent = SendPieces(iov, n, total);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      const int send_errno = errno;
      if ((send_errno == EPIPE || send_errno == ECONNRESET) && !out_.reading_after_send_error) {
        // The peer closed. A NAK it sent before closing must still reach
        // us, as an HCA's NAK reaches the requester: read what is queued
        // (it completes the failed request with its real status) first.
        out_.reading_after_send_error = true;
        ReadInput(/*block=*/false);
        out_.reading_after_send_error = false;
        if (broken_) return false;
      }
      // The peer is gone (closed or reset): not a fault of ours or its.
      Break("send failed: " + Errno(send_errno),
            /*fault=*/send_errno != EPIPE && send_errno != ECONNRESET);
      return false;
    }
    uint64_t left = static_cast<uint64_t>(sent);
    if (out_.lead_ctrl && left > 0) {
      out_.lead_ctrl = false;
      if (left < kHdrSize) {  // the rest goes as a frame
        OutFrame f;
        f.hdr = out_.lead_ctrl_hdr;
        f.is_ctrl = true;
        f.sent = left;
        out_.frames.push_front(std::move(f));
      }
      left -= std::min<uint64_t>(left, kHdrSize);
    }
    while (left > 0) {
      OutFrame& f = out_.frames.front();
      uint64_t take = std::min(left, f.total() - f.sent);
      f.sent += take;
      left -= take;
      if (f.sent == f.total()) {
        // In sequence only: after an RNR go-back, a frame that was half
        // out goes on, ahead of the resent ones before it.
        if (f.seq == out_.sent_seq + 1) out_.sent_seq = f.seq;
        out_.frames.pop_front();
      }
    }
    if (!out_.frames.empty() && out_.frames.front().sent == std::min(out_.frames.front().stall_at,
                                                         out_.frames.front().total())) {
      out_.stalled = true;  // a stopped sender: nothing more, ever
      return false;
    }
    if (static_cast<size_t>(sent) < total) return true;
  }
  return false;
}

// Waits for input in the receive call itself (nothing to send): one
// syscall instead of poll + receive. SO_RCVTIMEO is a power-of-two
// number of ms, kMargin short of the deadline (the kernel rounds it up to
// jiffies), and stays while it ends the wait in time and at most
// kMaxEarlyWakes times too early, so waits for a call's deadline and for a
// payload's stall watch share one value; returns false (use the precise
// ppoll) when the deadline is close.
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
    constexpr int64_t kMaxEarlyWakes = 64;
    if (in_.rcvtimeo_ms > 0 && in_.rcvtimeo_ms <= usable &&
        in_.rcvtimeo_ms * kMaxEarlyWakes >= usable) {
      want = in_.rcvtimeo_ms;
    } else {  // the largest power of two not above it (at most 2^40 ms)
      want = static_cast<int64_t>(
          std::bit_floor(std::min<uint64_t>(static_cast<uint64_t>(usable), uint64_t{1} << 40)));
    }
  }
  if (want != in_.rcvtimeo_ms) {
    timeval tv{static_cast<time_t>(want / 1000), static_cast<suseconds_t>(want % 1000 * 1000)};
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) return false;
    in_.rcvtimeo_ms = want;
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
    if (in_.payload_pending && in_.dest != nullptr) {
      // Staging is empty: receive the payload straight into its target, and
      // whatever follows into staging, in one call.
      if (!InDestValid()) return;
      in_.rpos = in_.wpos = 0;
      uint32_t remaining = in_.hdr.length - in_.done;
      iovec iov[2] = {{in_.dest + in_.done, remaining}, {in_.buf.get(), kStagingRead}};
      asked = remaining + kStagingRead;
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = 2;
      n = ::recvmsg(fd_.get(), &mh, flags);
      if (n > 0) {
        uint32_t take = static_cast<uint32_t>(std::min<size_t>(static_cast<size_t>(n), remaining));
        in_.done += take;
        in_.wpos = static_cast<size_t>(n) - take;
        if (in_.done == in_.hdr.length) FinishRequest();
      }
    } else {
      if (in_.rpos > 0) {
        std::memmove(in_.buf.get(), in_.buf.get() + in_.rpos, in_.wpos - in_.rpos);
        in_.wpos -= in_.rpos;
        in_.rpos = 0;
      }
      asked = std::min(kReadBufSize - in_.wpos, kStagingRead);
      n = ::recv(fd_.get(), in_.buf.get() + in_.wpos, asked, flags);
      if (n > 0) in_.wpos += static_cast<size_t>(n);
    }
    if (n == 0) {
      ParseBuffered();
      Break(disconnect_requested_.load() ? "disconnected locally" : "connection closed by peer",
            /*fault=*/false);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      const int err = errno;
      Break("receive failed: " + Errno(err), /*fault=*/err != ECONNRESET);
      return;
    }
    if (static_cast<size_t>(n) < asked) break;  // drained
  }
  ParseBuffered();
}

void EmuConnection::ParseBuffered() {
  while (!broken_) {
    if (in_.payload_pending) {
      size_t avail = in_.wpos - in_.rpos;
      if (avail == 0) return;
      if (!InDestValid()) return;
      uint32_t take = static_cast<uint32_t>(std::min<size_t>(avail, in_.hdr.length - in_.done));
      if (in_.dest != nullptr) {
        std::memcpy(in_.dest + in_.done, in_.buf.get() + in_.rpos, take);
        in_.payload_bytes_staged += take;
      }
      in_.rpos += take;
      in_.done += take;
      if (in_.done == in_.hdr.length) FinishRequest();
      continue;
    }
    if (in_.wpos - in_.rpos < kHdrSize) return;
    Header h = DecodeHeader(in_.buf.get() + in_.rpos);
    in_.rpos += kHdrSize;
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

}  // namespace emulated
}  // namespace naarpc
