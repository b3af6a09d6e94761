#include "services/stream/stream_service.h"

#include <algorithm>
#include <array>

namespace naarpc::services::stream {

uint64_t Fnv1a(uint64_t hash, std::span<const uint8_t> bytes) {
  for (uint8_t b : bytes) hash = (hash ^ b) * 0x100000001b3ull;
  return hash;
}

// On a stream error (the host left, the connection failed) a kernel just
// returns: the skeleton fails the call with the stream's error whatever the
// kernel returns, so `return {}` there is never a success.

StreamOpsError StreamOpsServiceImpl::Checksum(const NaaCall&,
                                              codegen::StreamReader<uint8_t>& data,
                                              std::span<uint64_t> digest) {
  uint64_t sum = 0, bytes = 0, chunks = 0, hash = kFnvOffset;
  for (;;) {
    auto chunk = data.Next();  // in place in the NAA's ring
    if (!chunk.ok()) return {};
    if (chunk->empty()) break;
    for (uint8_t b : *chunk) sum += b;
    hash = Fnv1a(hash, *chunk);
    bytes += chunk->size();
    ++chunks;
  }
  digest[0] = sum;
  digest[1] = bytes;
  digest[2] = chunks;
  digest[3] = hash;
  return StreamOpsError::kOk;
}

StreamOpsError StreamOpsServiceImpl::Histogram(const NaaCall&, uint64_t limit,
                                               codegen::StreamReader<uint8_t>& data,
                                               std::span<uint64_t> counts) {
  std::array<uint64_t, 256> local{};
  uint64_t seen = 0;
  for (;;) {
    auto chunk = data.Next();
    if (!chunk.ok()) return {};
    if (chunk->empty()) break;
    seen += chunk->size();
    // Returning early stops the host's stream (a stop credit); the host gets
    // this status once the chunks in flight are drained.
    if (limit != 0 && seen > limit) return StreamOpsError::kLimitExceeded;
    for (uint8_t b : *chunk) ++local[b];
  }
  std::copy(local.begin(), local.end(), counts.begin());
  return StreamOpsError::kOk;
}

StreamOpsError StreamOpsServiceImpl::Transform(const NaaCall&, uint32_t factor,
                                               codegen::StreamReader<uint32_t>& data,
                                               codegen::StreamWriter<uint32_t>& out) {
  // Both streams have the same chunk size (the IDL's): each input chunk is
  // computed straight into the host's next slot, and the input's short end
  // chunk becomes the output's (the skeleton checked both chunk sizes).
  while (!out.ended()) {
    auto chunk = data.Next();
    if (!chunk.ok()) return {};
    auto slot = out.NextSlot();
    if (!slot.ok()) return {};
    for (size_t i = 0; i < chunk->size(); ++i) (*slot)[i] = (*chunk)[i] * factor + 1;
    if (!out.Commit(chunk->size()).ok()) return {};
  }
  return StreamOpsError::kOk;
}

StreamOpsError StreamOpsServiceImpl::Generate(const NaaCall&, uint64_t count,
                                              codegen::StreamWriter<uint8_t>& data) {
  uint64_t i = 0;
  while (!data.ended()) {
    auto slot = data.NextSlot();  // the host's next slot, in place
    if (!slot.ok()) return {};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(slot->size(), count - i));
    for (size_t k = 0; k < n; ++k) (*slot)[k] = GeneratedByte(i + k);
    i += n;
    // A full chunk at the very end is followed by an empty end chunk.
    if (!data.Commit(n).ok()) return {};
  }
  return StreamOpsError::kOk;
}

}  // namespace naarpc::services::stream
