// libFuzzer target for the small decoders of peer-supplied values:
//  * the request immediate (the NAA decodes the host's), the status
//    immediate (the host decodes the NAA's), the stream frames (docs/protocol.md
//    15.2): decoding is total, and every
//    value that decodes re-encodes to itself in the dialect it names;
//    encoding then decoding any status gives it back in both dialects, and
//    the NAAICE reference host (status in bits 8..15) reads the reference
//    dialect's status immediate right;
//  * the spec dialect's metadata region (ResolveMetadataReturns), checked
//    against a plain model of docs/protocol.md 4.4: 8-byte big-endian host
//    addresses in write-back order, zero ending the list, a byte-swapped
//    address accepted, duplicates once, anything else refused.
// The first input byte selects the decoder.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "runtime/wire/metadata.h"
#include "naarpc/protocol.h"
#include "runtime/wire/stream_frame.h"

namespace {

using namespace naarpc;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "wire_values_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

void CheckImmediates(const uint8_t* p) {
  const uint32_t imm = Be32(p);
  if (auto r = DecodeRequestImmediate(imm)) {
    if (r->function_code < kMinFunctionCode || r->function_code > kMaxFunctionCode) {
      Fail("decoded function code out of range");
    }
    if (r->user_bits >= (1u << 24)) Fail("user bits wider than 24");
    const Dialect d = r->host_to_naa_bit ? Dialect::kReference : Dialect::kSpec;
    if (EncodeRequestImmediate(d, r->function_code, r->user_bits) != imm) {
      Fail("request immediate does not re-encode to itself");
    }
  } else if ((imm & 0x7f) != 0 && ((imm & kImmHostToNaaBit) != 0 || (imm >> 8) == 0)) {
    Fail("a valid request immediate was refused");
  }
  // Encode -> decode of a request, for the function code and bits given.
  const uint8_t code = static_cast<uint8_t>(p[0] % kMaxFunctionCode + 1);
  const uint32_t bits = imm & 0xffffffu;
  for (Dialect d : {Dialect::kSpec, Dialect::kReference}) {
    auto r = DecodeRequestImmediate(EncodeRequestImmediate(d, code, d == Dialect::kSpec ? 0 : bits));
    if (!r || r->function_code != code || r->host_to_naa_bit != (d == Dialect::kReference) ||
        r->user_bits != (d == Dialect::kSpec ? 0 : bits)) {
      Fail("request immediate round trip");
    }
  }
  // Stream frames (docs/protocol.md 15.2): total; what decodes re-encodes.
  if (auto f = DecodeStreamFrame(imm)) {
    const uint32_t again = f->credit ? EncodeStreamCredit(f->stream, f->value, f->stop)
                                     : EncodeStreamChunk(f->stream, f->value, f->end);
    if (again != imm) Fail("stream frame does not re-encode to itself");
  } else if (IsStreamFrame(imm)) {
    Fail("a valid stream frame was refused");
  }
  // Status immediates: any value decodes (total); round trips.
  const uint8_t any = DecodeStatusImmediate(imm);
  if ((imm & 0xff) != 0 && any != (imm & 0xff)) Fail("status: low byte not preferred");
  if ((imm & 0xff) == 0 && any != ((imm >> 8) & 0xff)) Fail("status: bits 8..15 not read");
  const uint8_t status = p[1];
  for (Dialect d : {Dialect::kSpec, Dialect::kReference}) {
    if (DecodeStatusImmediate(EncodeStatusImmediate(d, status)) != status) Fail("status round trip");
  }
  if (((EncodeStatusImmediate(Dialect::kReference, status) >> 8) & 0xff) != status) {
    Fail("the reference host would misread the status");
  }
}

// The plain model of the metadata rules.
std::optional<std::vector<size_t>> ModelMetadata(std::span<const uint8_t> m,
                                                 const std::vector<uint64_t>& regions) {
  if (m.size() % 8 != 0) return std::nullopt;
  std::vector<size_t> out;
  for (size_t off = 0; off < m.size(); off += 8) {
    uint64_t be = 0, le = 0;
    for (int i = 0; i < 8; ++i) {
      be = be << 8 | m[off + i];
      le = le << 8 | m[off + 7 - i];
    }
    if (be == 0) break;
    std::optional<size_t> hit;
    for (size_t r = 0; r < regions.size() && !hit; ++r) {
      if (regions[r] == be) hit = r;
    }
    for (size_t r = 0; r < regions.size() && !hit; ++r) {
      if (regions[r] == le) hit = r;
    }
    if (!hit) return std::nullopt;
    bool seen = false;
    for (size_t x : out) seen = seen || x == *hit;
    if (!seen) out.push_back(*hit);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

void CheckMetadata(std::span<const uint8_t> in) {
  // Region start addresses: the first byte picks how many (1..4) come from
  // the input (so that entries can match them), the rest are fixed.
  std::vector<uint64_t> regions = {0x00007f0012345000ull, 0x1000, 0x0102030405060708ull,
                                   0xffffffffffffff00ull};
  if (in.empty()) return;
  const size_t from_input = std::min<size_t>(in[0] % 5, (in.size() - 1) / 8);
  for (size_t i = 0; i < from_input; ++i) {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v = v << 8 | in[1 + 8 * i + b];
    if (v != 0) regions[i] = v;
  }
  const auto metadata = in.subspan(1 + 8 * from_input);
  std::vector<size_t> got;
  const bool ok = ResolveMetadataReturns(
      metadata,
      [&](uint64_t addr) -> size_t {
        for (size_t r = 0; r < regions.size(); ++r) {
          if (regions[r] == addr) return r;
        }
        return SIZE_MAX;
      },
      got);
  const auto want = ModelMetadata(metadata, regions);
  if (ok != want.has_value()) Fail("metadata accepted/refused unlike the model");
  if (ok && got != *want) Fail("metadata resolved unlike the model");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> in(data + 1, data + size);  // exact size: ASan sees over-reads
  if (data[0] % 2 == 0) {
    if (in.size() >= 4) CheckImmediates(in.data());
  } else {
    CheckMetadata(in);
  }
  return 0;
}
