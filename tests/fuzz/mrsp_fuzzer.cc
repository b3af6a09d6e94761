// libFuzzer target for DecodeMrsp. Besides crashes and sanitizer reports it
// aborts if a decodable input breaks decode -> encode -> decode equality or
// does not re-encode to its own bytes (padding zeroed).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/wire/mrsp.h"

namespace {
[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "mrsp_fuzzer: invariant broken: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace naarpc;
  // Copy into an exactly sized heap buffer so ASan catches any over-read.
  std::vector<uint8_t> in(data, data + size);
  Result<MrspMessage> dec = DecodeMrsp(std::span<const uint8_t>(in.data(), in.size()));
  if (!dec.ok()) {
    if (dec.status().code() != StatusCode::kProtocolError) Fail("rejection is not a ProtocolError");
    if (dec.status().message().empty()) Fail("rejection without a message");
    return 0;
  }
  Result<std::vector<uint8_t>> enc = EncodeMrsp(*dec);
  if (!enc.ok()) Fail("decoded message does not encode");
  if (enc->size() != size || enc->size() != EncodedSize(*dec)) Fail("re-encoded size differs");
  if (size >= 4 && (std::memcmp(enc->data(), data, 2) != 0 ||
                    std::memcmp(enc->data() + 4, data + 4, size - 4) != 0)) {
    Fail("re-encoded bytes differ");
  }
  const uint8_t caps = (data[0] == 0x01 || data[0] == 0x02) ? (data[2] & kMrspCapsKnown) : 0;
  if ((*enc)[2] != caps || (*enc)[3] != 0) Fail("padding not zero or capabilities not kept");
  Result<MrspMessage> again = DecodeMrsp(*enc);
  if (!again.ok()) Fail("re-encoded bytes do not decode");
  if (!(*again == *dec)) Fail("decode(encode(decode(x))) != decode(x)");
  return 0;
}
