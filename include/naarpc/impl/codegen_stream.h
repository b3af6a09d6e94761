// Streams in generated code (docs/streams.md, docs/idl.md "Streams"): the
// typed sources and sinks a generated client streams from and to, the
// StreamHandler that binds them to a call, and the typed reader and writer a
// generated skeleton hands its kernel. Built on the runtime's stream API
// (naarpc/stream.h on the host, NaaStream on the NAA).
#ifndef NAARPC_IMPL_CODEGEN_STREAM_H_
#define NAARPC_IMPL_CODEGEN_STREAM_H_

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "naarpc/status.h"
#include "naarpc/stream.h"

namespace naarpc::codegen {

namespace stream_internal {
// `bytes` as elements of T; nullopt if not whole elements or misaligned.
template <typename T, typename B>
std::optional<std::span<T>> As(std::span<B> bytes) {
  if (bytes.size() % sizeof(T) != 0) return std::nullopt;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(T) != 0) return std::nullopt;
  return std::span<T>(reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T));
}

// What PipeSource and PipeSink share: one lock and condition variable
// between the call's thread and the user's, waits bounded by the pipe's
// deadline, and the call's end.
class PipeSync {
 protected:
  explicit PipeSync(Deadline deadline) : deadline_(deadline) {}
  // Waits for `ready`; false if the deadline (or `until`, if earlier)
  // passed first.
  template <typename Pred>
  bool Wait(std::unique_lock<std::mutex>& lock, Pred ready,
            Deadline until = Deadline::Infinite()) {
    const Deadline end = Deadline::Earlier(deadline_, until);
    if (end.infinite()) {
      cv_.wait(lock, ready);
      return true;
    }
    return cv_.wait_until(lock, end.when(), ready);
  }
  void EndCall() {
    std::lock_guard<std::mutex> lock(mu_);
    call_ended_ = true;
    cv_.notify_all();
  }

  const Deadline deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool call_ended_ = false;  // guarded by mu_
};
}  // namespace stream_internal

// ----- Host side ------------------------------------------------------------

// Where an input stream's data comes from. Called on the calling thread
// (or the client's async thread) while the call runs.
template <typename T>
class StreamSource {
 public:
  virtual ~StreamSource() = default;
  // Fills `chunk` (one chunk of the stream, in place in the connection's
  // registered ring) with the next elements and returns how many. Fewer than
  // chunk.size() (0 included) ends the stream: Read is not called again for
  // this call. Called only when the NAA has room for the chunk. An error
  // fails the call.
  virtual Result<size_t> Read(std::span<T> chunk) = 0;
  // The call this source was bound to has returned (whatever its status).
  virtual void OnCallEnd() {}
};

// Where an output stream's data goes.
template <typename T>
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // The next chunk, in order and in place (valid until Write returns; its
  // slot goes back to the NAA then); `end` on the last one, which may be
  // empty. An error fails the call.
  virtual Status Write(std::span<const T> chunk, bool end) = 0;
  // The call this sink was bound to has returned (whatever its status).
  virtual void OnCallEnd() {}
};

// Streams a span (copied into each chunk).
template <typename T>
class SpanSource final : public StreamSource<T> {
 public:
  explicit SpanSource(std::span<const T> data) : data_(data) {}
  Result<size_t> Read(std::span<T> chunk) override {
    const size_t n = std::min(chunk.size(), data_.size() - position_);
    if (n != 0) std::memcpy(chunk.data(), data_.data() + position_, n * sizeof(T));
    position_ += n;
    return n;
  }
  size_t position() const { return position_; }  // elements streamed so far

 private:
  std::span<const T> data_;
  size_t position_ = 0;
};

// Streams what a callback writes into each chunk: fn(chunk) returns the
// elements it wrote (fewer than chunk.size() ends the stream) or an error.
template <typename T>
class GeneratorSource final : public StreamSource<T> {
 public:
  using Fn = std::function<Result<size_t>(std::span<T> chunk)>;
  explicit GeneratorSource(Fn fn) : fn_(std::move(fn)) {}
  Result<size_t> Read(std::span<T> chunk) override {
    Result<size_t> n = fn_(chunk);
    if (n.ok() && *n > chunk.size()) {
      return InvalidArgumentError("stream generator wrote " + std::to_string(*n) +
                                  " elements into a chunk of " + std::to_string(chunk.size()));
    }
    return n;
  }

 private:
  Fn fn_;
};

// Streams a file (or pipe, socket) from its current position to its end,
// read straight into the registered chunks. A file that ends inside an
// element is an error.
template <typename T>
class FileSource final : public StreamSource<T> {
 public:
  // Opens `path`; the source owns the descriptor.
  static Result<FileSource> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return UnavailableError("cannot open " + path + ": " + std::strerror(errno));
    FileSource s(fd);
    s.owned_ = true;
    return s;
  }
  // Reads `fd`, which the caller keeps open and closes.
  explicit FileSource(int fd) : fd_(fd) {}
  FileSource(FileSource&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), owned_(std::exchange(o.owned_, false)) {}
  FileSource& operator=(FileSource&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
      owned_ = std::exchange(o.owned_, false);
    }
    return *this;
  }
  ~FileSource() override { Reset(); }

  Result<size_t> Read(std::span<T> chunk) override {
    auto* p = reinterpret_cast<std::byte*>(chunk.data());
    const size_t want = chunk.size_bytes();
    size_t got = 0;
    while (got < want) {
      const ssize_t r = ::read(fd_, p + got, want - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return UnavailableError(std::string("stream source: read: ") + std::strerror(errno));
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    if (got % sizeof(T) != 0) {
      return InvalidArgumentError("stream source: the file ends inside an element (" +
                                  std::to_string(got % sizeof(T)) + " of " +
                                  std::to_string(sizeof(T)) + " bytes)");
    }
    return got / sizeof(T);
  }

 private:
  void Reset() {
    if (owned_ && fd_ >= 0) ::close(fd_);
    fd_ = -1;
    owned_ = false;
  }
  int fd_ = -1;
  bool owned_ = false;
};

// Appends every output chunk to a vector.
template <typename T>
class VectorSink final : public StreamSink<T> {
 public:
  // REQUIRES: `out` outlives the call.
  explicit VectorSink(std::vector<T>* out) : out_(out) {}
  Status Write(std::span<const T> chunk, bool) override {
    out_->insert(out_->end(), chunk.begin(), chunk.end());
    return Status::Ok();
  }

 private:
  std::vector<T>* out_;
};

// Hands every output chunk to a callback.
template <typename T>
class CallbackSink final : public StreamSink<T> {
 public:
  using Fn = std::function<Status(std::span<const T> chunk, bool end)>;
  explicit CallbackSink(Fn fn) : fn_(std::move(fn)) {}
  Status Write(std::span<const T> chunk, bool end) override { return fn_(chunk, end); }

 private:
  Fn fn_;
};

// Writes every output chunk to a file descriptor (the caller's).
template <typename T>
class FileSink final : public StreamSink<T> {
 public:
  explicit FileSink(int fd) : fd_(fd) {}
  Status Write(std::span<const T> chunk, bool) override {
    const auto* p = reinterpret_cast<const std::byte*>(chunk.data());
    size_t done = 0;
    while (done < chunk.size_bytes()) {
      const ssize_t w = ::write(fd_, p + done, chunk.size_bytes() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return UnavailableError(std::string("stream sink: write: ") + std::strerror(errno));
      done += static_cast<size_t>(w);
    }
    return Status::Ok();
  }

 private:
  int fd_;
};

// An input stream written from another thread while the call runs (e.g.
// an Async call): Write() blocks until the call has copied the data into
// its registered chunks, Close() ends the stream. One call per pipe.
// Waits (the call's for data, the writer's for room) end at `deadline`
// (give the call's): a writer that stalls fails the call, and a call that
// has ended (whatever its status) fails Write.
template <typename T>
class PipeSource final : public StreamSource<T>, private stream_internal::PipeSync {
 public:
  explicit PipeSource(Deadline deadline = Deadline::Infinite()) : PipeSync(deadline) {}

  // Writer thread.
  Status Write(std::span<const T> data) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return FailedPreconditionError("PipeSource: Write after Close");
    if (call_ended_) return FailedPreconditionError("PipeSource: the call has ended");
    pending_ = data;
    cv_.notify_all();
    const bool in_time = Wait(lock, [this] { return pending_.empty() || call_ended_; });
    const bool taken = pending_.empty();
    pending_ = {};
    if (taken) return Status::Ok();
    if (!in_time) return DeadlineExceededError("PipeSource: the call did not take the data in time");
    return FailedPreconditionError("PipeSource: the call ended before it took all the data");
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }

  // Call thread.
  Result<size_t> Read(std::span<T> chunk) override {
    std::unique_lock<std::mutex> lock(mu_);
    size_t n = 0;
    while (n < chunk.size()) {
      if (!Wait(lock, [this] { return !pending_.empty() || closed_; })) {
        return DeadlineExceededError("PipeSource: no data from the writer in time");
      }
      if (pending_.empty()) break;  // closed
      const size_t k = std::min(chunk.size() - n, pending_.size());
      std::memcpy(chunk.data() + n, pending_.data(), k * sizeof(T));
      pending_ = pending_.subspan(k);
      n += k;
      if (pending_.empty()) cv_.notify_all();  // the writer's data is taken
    }
    return n;
  }
  void OnCallEnd() override { EndCall(); }

 private:
  std::span<const T> pending_;  // the writer's data not yet taken
  bool closed_ = false;
};

// An output stream read from another thread while the call runs: Next()
// returns each chunk in place (zero-copy: the call waits until the reader
// asks for the next one, which hands the slot back to the NAA). One call per
// pipe; waits end at `deadline` (give the call's).
template <typename T>
class PipeSink final : public StreamSink<T>, private stream_internal::PipeSync {
 public:
  explicit PipeSink(Deadline deadline = Deadline::Infinite()) : PipeSync(deadline) {}

  // Reader thread: the next chunk (valid until the next Next() or Stop());
  // an empty span at the end of the stream; an error if the call ended
  // without ending it.
  Result<std::span<const T>> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    HandBackLocked();
    if (ended_) return std::span<const T>();
    if (!Wait(lock, [this] { return state_ == SlotState::kOffered || call_ended_; })) {
      return DeadlineExceededError("PipeSink: no chunk from the call in time");
    }
    if (state_ != SlotState::kOffered) {
      return FailedPreconditionError("PipeSink: the call ended before its stream did");
    }
    if (end_) ended_ = true;
    if (end_ && chunk_.empty()) {
      state_ = SlotState::kFree;  // nothing to hold: the slot goes back at once
      cv_.notify_all();
      return std::span<const T>();
    }
    state_ = SlotState::kHeld;  // handed back by the next Next() or Stop()
    return chunk_;
  }
  // Reader thread: waits until the call has a chunk for Next(), without
  // taking it; false if the deadline passed or the call ended first, or if
  // the reader still holds the previous chunk (Next() hands it back).
  bool WaitForChunk() {
    std::unique_lock<std::mutex> lock(mu_);
    if (state_ == SlotState::kHeld) return false;
    Wait(lock, [this] { return state_ == SlotState::kOffered || call_ended_; });
    return state_ == SlotState::kOffered;
  }
  // Reader thread, for a reader that must look up now and then: hands the
  // chunk it holds back (as Next() would), then waits until `until` at most
  // for the next; true if Next() will not wait (a chunk, the stream's or
  // the call's end, or the deadline passed), false if `until` came first.
  bool WaitForNextUntil(Deadline until) {
    std::unique_lock<std::mutex> lock(mu_);
    HandBackLocked();
    const bool ready =
        Wait(lock, [this] { return state_ == SlotState::kOffered || call_ended_ || ended_; },
             until);
    return ready || deadline_.expired();
  }
  // Reader thread: no more reading; the call fails at its next chunk.
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    state_ = SlotState::kFree;
    cv_.notify_all();
  }

  // Call thread.
  Status Write(std::span<const T> chunk, bool end) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_) return FailedPreconditionError("PipeSink: the reader stopped");
    chunk_ = chunk;
    end_ = end;
    state_ = SlotState::kOffered;
    cv_.notify_all();
    if (!Wait(lock, [this] { return state_ == SlotState::kFree; })) {
      state_ = SlotState::kFree;
      return DeadlineExceededError("PipeSink: the reader did not take a chunk in time");
    }
    return stopped_ ? FailedPreconditionError("PipeSink: the reader stopped") : Status::Ok();
  }
  void OnCallEnd() override { EndCall(); }

 private:
  // Who has the call's current chunk: a chunk offered by Write() is only
  // handed back after the reader has held it, so a Next() that comes late
  // (the chunk already waiting) returns it instead of giving it back unseen.
  enum class SlotState : uint8_t { kFree, kOffered, kHeld };

  // The chunk the reader held goes back to the call.
  void HandBackLocked() {
    if (state_ != SlotState::kHeld) return;
    state_ = SlotState::kFree;
    cv_.notify_all();
  }

  std::span<const T> chunk_;
  SlotState state_ = SlotState::kFree;
  bool end_ = false;
  bool ended_ = false;      // the reader has seen the end
  bool stopped_ = false;
};

// Calls OnCallEnd() on the sources and sinks of a generated call when the
// stub returns, also when it fails before the call starts (a connection
// that cannot be opened): a pipe's other thread never waits for a call
// that will not come.
template <typename... S>
class CallEndGuard {
 public:
  explicit CallEndGuard(S&... s) : streams_(s...) {}
  CallEndGuard(const CallEndGuard&) = delete;
  CallEndGuard& operator=(const CallEndGuard&) = delete;
  ~CallEndGuard() {
    std::apply([](auto&... s) { (s.OnCallEnd(), ...); }, streams_);
  }

 private:
  std::tuple<S&...> streams_;
};

// The StreamHandler of a generated call: stream i goes to the typed source
// or sink bound to it. Chunks reach them in place, as elements.
class StreamBindings final : public StreamHandler {
 public:
  StreamBindings() = default;
  StreamBindings(const StreamBindings&) = delete;
  StreamBindings& operator=(const StreamBindings&) = delete;
  // The call has returned: tells every bound source and sink.
  ~StreamBindings() override {
    for (auto& end : ends_) end();
  }

  // Stream `stream` (< kMaxStreams) reads from `source`, which must outlive
  // the call.
  template <typename T>
  void Bind(size_t stream, StreamSource<T>& source) {
    if (stream >= produce_.size()) return;  // Produce reports it unbound
    ends_.push_back([&source] { source.OnCallEnd(); });
    produce_[stream] = [&source](std::span<std::byte> slot) -> Result<size_t> {
      const std::optional<std::span<T>> chunk = stream_internal::As<T>(slot);
      if (!chunk) return InternalError("stream slot is not a whole, aligned number of elements");
      NAARPC_ASSIGN_OR_RETURN(const size_t n, source.Read(*chunk));
      if (n > chunk->size()) {
        return InvalidArgumentError("stream source returned " + std::to_string(n) +
                                    " elements for a chunk of " + std::to_string(chunk->size()));
      }
      return n * sizeof(T);
    };
  }
  template <typename T>
  void Bind(size_t stream, StreamSink<T>& sink) {
    if (stream >= consume_.size()) return;  // Consume reports it unbound
    ends_.push_back([&sink] { sink.OnCallEnd(); });
    consume_[stream] = [&sink](std::span<const std::byte> bytes, bool end) -> Status {
      const std::optional<std::span<const T>> chunk = stream_internal::As<const T>(bytes);
      if (!chunk) {
        return ProtocolError("output stream chunk of " + std::to_string(bytes.size()) +
                             " bytes is not a whole number of " + std::to_string(sizeof(T)) +
                             "-byte elements");
      }
      return sink.Write(*chunk, end);
    };
  }

  Result<size_t> Produce(size_t stream, std::span<std::byte> slot) override {
    if (stream >= produce_.size() || !produce_[stream]) {
      return InternalError("no source bound to input stream " + std::to_string(stream));
    }
    return produce_[stream](slot);
  }
  Status Consume(size_t stream, std::span<const std::byte> chunk, bool end) override {
    if (stream >= consume_.size() || !consume_[stream]) {
      return InternalError("no sink bound to output stream " + std::to_string(stream));
    }
    return consume_[stream](chunk, end);
  }
  // StreamHandler::Check runs `check` (none: never ends the call).
  void SetCheck(std::function<Status()> check) { check_ = std::move(check); }
  Status Check() override { return check_ ? check_() : Status::Ok(); }

 private:
  std::function<Status()> check_;
  std::array<std::function<Result<size_t>(std::span<std::byte>)>, kMaxStreams> produce_;
  std::array<std::function<Status(std::span<const std::byte>, bool)>, kMaxStreams> consume_;
  std::vector<std::function<void()>> ends_;
};

// ----- NAA side (kernels of generated skeletons) ------------------------------

// An input stream as a kernel reads it: each chunk in place in the NAA's
// ring (zero-copy), in order.
template <typename T>
class StreamReader {
 public:
  explicit StreamReader(NaaStream& stream) : stream_(stream) {}
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  size_t chunk_size() const { return stream_.chunk_size() / sizeof(T); }  // elements
  uint32_t window() const { return stream_.window(); }
  // The next chunk (valid until the next Next() or the kernel's return);
  // empty at the end of the stream. Asking for the next chunk hands this
  // one's slot back to the host. Waits for the host's data. An error (the
  // host left, the connection failed, a chunk that is not whole elements)
  // comes back from every later call; the kernel should return.
  Result<std::span<const T>> Next() {
    if (!error_.ok()) return error_;
    Result<std::span<const std::byte>> bytes = stream_.Next();
    if (!bytes.ok()) return error_ = bytes.status();
    const std::optional<std::span<const T>> chunk = stream_internal::As<const T>(*bytes);
    if (!chunk) {
      malformed_ = true;
      return error_ = ProtocolError("a chunk of " + std::to_string(bytes->size()) +
                                    " bytes is not a whole number of " +
                                    std::to_string(sizeof(T)) + "-byte elements");
    }
    return *chunk;
  }
  bool ended() const { return stream_.ended(); }
  // The first error of the stream. The skeleton fails the call with it
  // whatever the kernel returns: 0x04 if a chunk was not whole elements
  // (malformed()), else 0x05 (KERNEL_FAILED, the error in the NAA's log).
  const Status& error() const { return error_; }
  bool malformed() const { return malformed_; }

 private:
  NaaStream& stream_;
  Status error_;
  bool malformed_ = false;
};

// An output stream as a kernel writes it: into the host's next slot in
// place (NextSlot + Commit) or by copy (Write + Close).
template <typename T>
class StreamWriter {
 public:
  explicit StreamWriter(NaaStream& stream) : stream_(stream) {}
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  size_t chunk_size() const { return stream_.chunk_size() / sizeof(T); }  // elements
  uint32_t window() const { return stream_.window(); }
  // The next chunk's slot (chunk_size() elements), waiting for the host to
  // free one; Commit(n) sends its first n elements. Fewer than chunk_size()
  // (0 included) end the stream.
  Result<std::span<T>> NextSlot() {
    if (!error_.ok()) return error_;
    Result<std::span<std::byte>> bytes = stream_.NextSlot();
    if (!bytes.ok()) return error_ = bytes.status();
    const std::optional<std::span<T>> slot = stream_internal::As<T>(*bytes);
    if (!slot) return error_ = InternalError("an output slot is not whole, aligned elements");
    return *slot;
  }
  Status Commit(size_t n) {
    if (n > chunk_size()) {
      return error_ = InvalidArgumentError("Commit(" + std::to_string(n) +
                                           ") beyond the chunk size " +
                                           std::to_string(chunk_size()));
    }
    return Keep(stream_.Commit(n * sizeof(T)));
  }
  // Appends `data` (full chunks leave as they fill); Close() sends the rest
  // and ends the stream. A kernel that returns without ending it gets it
  // ended.
  Status Write(std::span<const T> data) { return Keep(stream_.Write(std::as_bytes(data))); }
  Status Close() { return Keep(stream_.Close()); }
  bool ended() const { return stream_.ended(); }
  // The first error; the skeleton then fails the call with 0x05 whatever
  // the kernel returns (the error in the NAA's log).
  const Status& error() const { return error_; }

 private:
  Status Keep(Status s) {
    if (!s.ok() && error_.ok()) error_ = s;
    return s;
  }
  NaaStream& stream_;
  Status error_;
};

}  // namespace naarpc::codegen

#endif  // NAARPC_IMPL_CODEGEN_STREAM_H_
