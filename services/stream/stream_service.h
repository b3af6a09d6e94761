// Software-NAA kernels of services/stream/stream.naa.yaml: each reads its
// input stream chunk by chunk in place in the NAA's ring and writes its
// output stream as it goes, so the data may be far larger than the NAA's
// memory.
#ifndef NAARPC_SERVICES_STREAM_STREAM_SERVICE_H_
#define NAARPC_SERVICES_STREAM_STREAM_SERVICE_H_

#include <cstdint>
#include <span>

#include "services/stream/stream.naa.h"

namespace naarpc::services::stream {

// FNV-1a 64 (the Checksum digest's last word), continued over `bytes`.
uint64_t Fnv1a(uint64_t hash, std::span<const uint8_t> bytes);
inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;

// Byte i of Generate's output.
inline uint8_t GeneratedByte(uint64_t i) { return static_cast<uint8_t>(i * 7); }

class StreamOpsServiceImpl final : public StreamOpsService {
 public:
  StreamOpsError Checksum(const NaaCall& call, codegen::StreamReader<uint8_t>& data,
                          std::span<uint64_t> digest) override;
  StreamOpsError Histogram(const NaaCall& call, uint64_t limit,
                           codegen::StreamReader<uint8_t>& data,
                           std::span<uint64_t> counts) override;
  StreamOpsError Transform(const NaaCall& call, uint32_t factor,
                           codegen::StreamReader<uint32_t>& data,
                           codegen::StreamWriter<uint32_t>& out) override;
  StreamOpsError Generate(const NaaCall& call, uint64_t count,
                          codegen::StreamWriter<uint8_t>& data) override;
};

}  // namespace naarpc::services::stream

#endif  // NAARPC_SERVICES_STREAM_STREAM_SERVICE_H_
