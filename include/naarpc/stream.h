// Streams, host side (docs/protocol.md 15): a StreamHandler produces the
// chunks of a call's input streams and takes those of its output streams,
// while the call runs. Streams are numbered in the order of their
// RegionSpecs (stream 0 is the first RegionSpec with a StreamSpec).
#ifndef NAARPC_STREAM_H_
#define NAARPC_STREAM_H_

#include <chrono>
#include <cstddef>
#include <span>

#include "naarpc/status.h"

namespace naarpc {

class StreamHandler {
 public:
  virtual ~StreamHandler() = default;
  // Input stream `stream`: fills `slot` (chunk_size bytes, in the
  // connection's registered ring) with the next chunk and returns its
  // length; a length below slot.size() (0 included) ends the stream, and
  // Produce is not called for it again. Called only when the NAA has room
  // (flow control), never for a stream the NAA asked to stop. An error
  // fails the call (the session goes to ERROR).
  virtual Result<size_t> Produce(size_t stream, std::span<std::byte> slot) = 0;
  // Output stream `stream`: the next chunk, in place (valid until Consume
  // returns); `end` on the last one (which may be empty). An error fails the
  // call (the session goes to ERROR).
  virtual Status Consume(size_t stream, std::span<const std::byte> chunk, bool end) = 0;
  // Called while the call waits for the NAA, at least every
  // kStreamCheckInterval: an error ends the call with it (the session goes
  // to ERROR), e.g. to let a user's Ctrl-C through a long stream.
  virtual Status Check() { return Status::Ok(); }
};

inline constexpr std::chrono::milliseconds kStreamCheckInterval{50};

}  // namespace naarpc

#endif  // NAARPC_STREAM_H_
