#include "runtime/wire/mrsp.h"
#include "runtime/wire/byte_order.h"
#include "runtime/wire/stream_frame.h"

#include <cstdio>
#include <string>
#include <type_traits>

// GCC 12 with -fsanitize=address reports a false -Wmaybe-uninitialized when a
// std::variant holding vectors is moved into Result<> (GCC PR 105562 family).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace naarpc {
namespace {

// printf-style formatting for error messages (messages are short).
template <typename... Args>
std::string Fmt(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

// Entry offsets inside the message, for error messages.
size_t RequestEntryOffset(size_t i) {
  return kMrspHeaderSize + i * kAdvertisementRequestEntrySize;
}
size_t AdvertisementEntryOffset(size_t i) {
  return kMrspHeaderSize + i * kAdvertisementEntrySize;
}

bool SizeInRange(uint32_t size) { return size >= 1 && size <= kMaxRegionSize; }

// ---- Encoding ---------------------------------------------------------------

Status CheckRequest(const AdvertisementRequestMessage& m) {
  const size_t n = m.regions.size();
  if (n == 0 || n > kMaxRegionsPerMessage) {
    return OutOfRangeError(Fmt(
        "MRSP advertisement+request: %zu regions (must be 1..%zu)", n,
        kMaxRegionsPerMessage));
  }
  for (size_t i = 0; i < n; ++i) {
    const RegionRequest& r = m.regions[i];
    if ((r.flags & ~kRegionFlagsKnown) != 0) {
      return InvalidArgumentError(Fmt(
          "MRSP advertisement+request entry %zu: unknown flag bits 0x%02x in "
          "flags 0x%02x (known: 0x%02x)",
          i, unsigned(r.flags & ~kRegionFlagsKnown), unsigned(r.flags),
          unsigned(kRegionFlagsKnown)));
    }
    if (r.flags & (kRegionFlagStream | kRegionFlagStreamSequenced)) {
      if (std::string why = CheckStreamEntry(r.flags, r.requested_naa_address, r.size);
          !why.empty()) {
        return InvalidArgumentError(Fmt("MRSP advertisement+request entry %zu: %s", i, why.c_str()));
      }
    }
    if (r.requested_naa_address > kMaxNaaAddress) {
      return OutOfRangeError(Fmt(
          "MRSP advertisement+request entry %zu: requested NAA address "
          "0x%llx does not fit in 56 bits",
          i, static_cast<unsigned long long>(r.requested_naa_address)));
    }
    if (!SizeInRange(r.size)) {
      return OutOfRangeError(Fmt(
          "MRSP advertisement+request entry %zu: size %u (must be 1..%llu)", i,
          unsigned(r.size), static_cast<unsigned long long>(kMaxRegionSize)));
    }
  }
  return Status::Ok();
}

Status CheckAdvertisement(const AdvertisementMessage& m) {
  const size_t n = m.regions.size();
  if (n > kMaxRegionsPerMessage) {
    return OutOfRangeError(Fmt("MRSP advertisement: %zu regions (must be 0..%zu)",
                               n, kMaxRegionsPerMessage));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!SizeInRange(m.regions[i].size)) {
      return OutOfRangeError(Fmt(
          "MRSP advertisement entry %zu: size %u (must be 1..%llu)", i,
          unsigned(m.regions[i].size),
          static_cast<unsigned long long>(kMaxRegionSize)));
    }
  }
  return Status::Ok();
}

Status CheckError(const ErrorMessage& m) {
  if (m.code == 0) {
    return InvalidArgumentError("MRSP error message: error code 0 (must be non-zero)");
  }
  return Status::Ok();
}

void PutHeader(uint8_t* p, MrspType type, uint8_t second, uint8_t capabilities = 0) {
  p[0] = static_cast<uint8_t>(type);
  p[1] = second;
  p[2] = capabilities & kMrspCapsKnown;
  p[3] = 0;  // padding
}

void Write(const AdvertisementRequestMessage& m, uint8_t* p) {
  PutHeader(p, MrspType::kAdvertisementRequest, uint8_t(m.regions.size()), m.capabilities);
  p += kMrspHeaderSize;
  for (const RegionRequest& r : m.regions) {
    p[0] = r.flags;
    PutBe56(p + 1, r.requested_naa_address);
    PutBe64(p + 8, r.addr);
    PutBe32(p + 16, r.rkey);
    PutBe32(p + 20, r.size);
    p += kAdvertisementRequestEntrySize;
  }
}

void Write(const AdvertisementMessage& m, uint8_t* p) {
  PutHeader(p, MrspType::kAdvertisement, uint8_t(m.regions.size()), m.capabilities);
  p += kMrspHeaderSize;
  for (const RegionAdvertisement& r : m.regions) {
    PutBe64(p, r.addr);
    PutBe32(p + 8, r.rkey);
    PutBe32(p + 12, r.size);
    p += kAdvertisementEntrySize;
  }
}

void Write(const ErrorMessage& m, uint8_t* p) {
  PutHeader(p, MrspType::kError, m.code);
}

// ---- Decoding ---------------------------------------------------------------

// Checks `len == header + count * entry` for a message with `count` entries.
Status CheckLength(const char* what, size_t len, size_t count, size_t entry) {
  const size_t expected = kMrspHeaderSize + count * entry;
  if (len != expected) {
    return ProtocolError(Fmt(
        "MRSP %s message length %zu does not match count %zu (expected %zu "
        "bytes)",
        what, len, count, expected));
  }
  return Status::Ok();
}

Result<MrspMessage> DecodeRequest(std::span<const uint8_t> b) {
  const size_t count = b[1];
  if (count == 0) {
    return ProtocolError(
        "MRSP advertisement+request: count 0 at offset 1 (must be 1..255)");
  }
  NAARPC_RETURN_IF_ERROR(CheckLength("advertisement+request", b.size(), count,
                                     kAdvertisementRequestEntrySize));
  AdvertisementRequestMessage m;
  m.capabilities = b[2] & kMrspCapsKnown;
  m.regions.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t off = RequestEntryOffset(i);
    const uint8_t* p = b.data() + off;
    RegionRequest& r = m.regions[i];
    r.flags = p[0];
    r.requested_naa_address = GetBe56(p + 1);
    r.addr = GetBe64(p + 8);
    r.rkey = GetBe32(p + 16);
    r.size = GetBe32(p + 20);
    if ((r.flags & ~kRegionFlagsKnown) != 0) {
      return ProtocolError(Fmt(
          "MRSP advertisement+request entry %zu at offset %zu: unknown flag "
          "bits 0x%02x in flags 0x%02x (known: 0x%02x)",
          i, off, unsigned(r.flags & ~kRegionFlagsKnown), unsigned(r.flags),
          unsigned(kRegionFlagsKnown)));
    }
    if (!SizeInRange(r.size)) {
      return ProtocolError(Fmt(
          "MRSP advertisement+request entry %zu at offset %zu: size %u (must "
          "be 1..%llu)",
          i, off, unsigned(r.size),
          static_cast<unsigned long long>(kMaxRegionSize)));
    }
    if (r.flags & (kRegionFlagStream | kRegionFlagStreamSequenced)) {
      if (std::string why = CheckStreamEntry(r.flags, r.requested_naa_address, r.size);
          !why.empty()) {
        return ProtocolError(Fmt("MRSP advertisement+request entry %zu at offset %zu: %s", i, off,
                                 why.c_str()));
      }
    }
  }
  return MrspMessage(std::move(m));
}

Result<MrspMessage> DecodeAdvertisement(std::span<const uint8_t> b) {
  const size_t count = b[1];
  NAARPC_RETURN_IF_ERROR(
      CheckLength("advertisement", b.size(), count, kAdvertisementEntrySize));
  AdvertisementMessage m;
  m.capabilities = b[2] & kMrspCapsKnown;
  m.regions.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t off = AdvertisementEntryOffset(i);
    const uint8_t* p = b.data() + off;
    RegionAdvertisement& r = m.regions[i];
    r.addr = GetBe64(p);
    r.rkey = GetBe32(p + 8);
    r.size = GetBe32(p + 12);
    if (!SizeInRange(r.size)) {
      return ProtocolError(Fmt(
          "MRSP advertisement entry %zu at offset %zu: size %u (must be "
          "1..%llu)",
          i, off, unsigned(r.size),
          static_cast<unsigned long long>(kMaxRegionSize)));
    }
  }
  return MrspMessage(std::move(m));
}

Result<MrspMessage> DecodeError(std::span<const uint8_t> b) {
  if (b.size() != kErrorMessageSize) {
    return ProtocolError(Fmt(
        "MRSP error message length %zu (must be exactly %zu bytes)", b.size(),
        kErrorMessageSize));
  }
  if (b[1] == 0) {
    return ProtocolError(
        "MRSP error message: error code 0 at offset 1 (must be non-zero)");
  }
  return MrspMessage(ErrorMessage{b[1]});
}

}  // namespace

size_t EncodedSize(const MrspMessage& msg) {
  if (const auto* r = std::get_if<AdvertisementRequestMessage>(&msg)) {
    return kMrspHeaderSize + r->regions.size() * kAdvertisementRequestEntrySize;
  }
  if (const auto* a = std::get_if<AdvertisementMessage>(&msg)) {
    return kMrspHeaderSize + a->regions.size() * kAdvertisementEntrySize;
  }
  return kErrorMessageSize;
}

Result<size_t> EncodeMrsp(const MrspMessage& msg, std::span<uint8_t> out) {
  NAARPC_RETURN_IF_ERROR(std::visit(
      [](const auto& m) -> Status {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, AdvertisementRequestMessage>) {
          return CheckRequest(m);
        } else if constexpr (std::is_same_v<T, AdvertisementMessage>) {
          return CheckAdvertisement(m);
        } else {
          return CheckError(m);
        }
      },
      msg));
  const size_t n = EncodedSize(msg);
  if (out.size() < n) {
    return OutOfRangeError(Fmt(
        "MRSP encode: output buffer of %zu bytes too small for a %zu-byte "
        "message",
        out.size(), n));
  }
  std::visit([&](const auto& m) { Write(m, out.data()); }, msg);
  return n;
}

Result<std::vector<uint8_t>> EncodeMrsp(const MrspMessage& msg) {
  std::vector<uint8_t> out(EncodedSize(msg));
  NAARPC_ASSIGN_OR_RETURN(size_t n, EncodeMrsp(msg, std::span<uint8_t>(out)));
  out.resize(n);
  return out;
}

Result<MrspMessage> DecodeMrsp(std::span<const uint8_t> bytes) {
  if (bytes.empty()) {
    return ProtocolError("MRSP message is empty (0 bytes; the header needs 4)");
  }
  if (bytes.size() < kMrspHeaderSize) {
    return ProtocolError(Fmt(
        "MRSP message too short: %zu bytes (the header needs %zu)",
        bytes.size(), kMrspHeaderSize));
  }
  // Byte 2: capabilities (types 0x01, 0x02; unknown bits ignored), byte 3:
  // padding, ignored on receipt.
  switch (bytes[0]) {
    case static_cast<uint8_t>(MrspType::kAdvertisementRequest):
      return DecodeRequest(bytes);
    case static_cast<uint8_t>(MrspType::kAdvertisement):
      return DecodeAdvertisement(bytes);
    case static_cast<uint8_t>(MrspType::kError):
      return DecodeError(bytes);
  }
  return ProtocolError(Fmt(
      "MRSP message: unknown type 0x%02x at offset 0 (expected 0x00, 0x01 or "
      "0x02)",
      unsigned(bytes[0])));
}

}  // namespace naarpc
