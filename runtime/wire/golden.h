// Golden wire bytes, written by hand. These are exactly the hex examples of
// docs/protocol.md ("Byte-by-byte examples"); protocol_doc_test checks that
// the document and this file agree, mrsp_test/immediate_test check the codec.
#ifndef NAARPC_TESTS_CODEC_GOLDEN_H_
#define NAARPC_TESTS_CODEC_GOLDEN_H_

#include <cstdint>
#include <string_view>
#include <vector>

namespace naarpc::golden {

// Example 1: spec dialect Advertisement+Request, 4 regions: metadata,
// input, result, internal.
inline const std::vector<uint8_t> kRequestSpec = {
    0x01, 0x04, 0x00, 0x00,                                // header
    0x00,                                                  // [0] flags
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,              // [0] NAA address
    0x00, 0x00, 0x7F, 0x3A, 0x5C, 0x00, 0x10, 0x00,        // [0] host addr
    0x00, 0x00, 0x1A, 0x2B,                                // [0] rkey
    0x00, 0x00, 0x00, 0x08,                                // [0] size
    0x00,                                                  // [1] flags
    0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,              // [1] NAA address
    0x00, 0x00, 0x7F, 0x3A, 0x5C, 0x10, 0x00, 0x00,        // [1] host addr
    0x00, 0x00, 0x1A, 0x2C,                                // [1] rkey
    0x00, 0x10, 0x00, 0x00,                                // [1] size
    0x00,                                                  // [2] flags
    0x00, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00,              // [2] NAA address
    0x00, 0x00, 0x7F, 0x3A, 0x5C, 0x20, 0x00, 0x00,        // [2] host addr
    0x00, 0x00, 0x1A, 0x2D,                                // [2] rkey
    0x00, 0x00, 0x10, 0x00,                                // [2] size
    0x01,                                                  // [3] flags
    0x00, 0x00, 0x00, 0x00, 0x13, 0x00, 0x00,              // [3] NAA address
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // [3] host addr
    0x00, 0x00, 0x00, 0x00,                                // [3] rkey
    0x00, 0x04, 0x00, 0x00,                                // [3] size
};

// Example 2: the NAA's Advertisement answering example 1 (3 entries; the
// internal region is not advertised).
inline const std::vector<uint8_t> kAdvertisementSpec = {
    0x02, 0x03, 0x00, 0x00,                                // header
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,        // [0] addr
    0x00, 0x00, 0x01, 0x01,                                // [0] rkey
    0x00, 0x00, 0x00, 0x08,                                // [0] size
    0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,        // [1] addr
    0x00, 0x00, 0x01, 0x02,                                // [1] rkey
    0x00, 0x10, 0x00, 0x00,                                // [1] size
    0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00,        // [2] addr
    0x00, 0x00, 0x01, 0x03,                                // [2] rkey
    0x00, 0x00, 0x10, 0x00,                                // [2] size
};

// Example 3: reference dialect Advertisement+Request, 2 regions, a distinct
// value in every byte position that matters (catches byte-order/offset bugs).
inline const std::vector<uint8_t> kRequestReference = {
    0x01, 0x02, 0x00, 0x00,                                // header
    0x06,                                                  // [0] flags in|single-send
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,              // [0] NAA address
    0x00, 0x00, 0x7F, 0x10, 0x20, 0x30, 0x40, 0x50,        // [0] host addr
    0x0A, 0x0B, 0x0C, 0x0D,                                // [0] rkey
    0x00, 0x01, 0x23, 0x45,                                // [0] size
    0x0C,                                                  // [1] flags in|out
    0x11, 0xA1, 0xB2, 0xC3, 0xD4, 0xE5, 0xF6,              // [1] NAA address
    0x00, 0x00, 0x7F, 0xFE, 0x12, 0x34, 0x56, 0x78,        // [1] host addr
    0x00, 0xC0, 0xFF, 0xEE,                                // [1] rkey
    0x40, 0x00, 0x00, 0x00,                                // [1] size (1 GiB)
};

// Example 4: Advertisement answering example 3, distinct values.
inline const std::vector<uint8_t> kAdvertisementReference = {
    0x02, 0x02, 0x00, 0x00,                                // header
    0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,        // [0] addr
    0x99, 0xAA, 0xBB, 0xCC,                                // [0] rkey
    0x00, 0x01, 0x23, 0x45,                                // [0] size
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,        // [1] addr
    0xDD, 0xEE, 0xFF, 0x01,                                // [1] rkey
    0x40, 0x00, 0x00, 0x00,                                // [1] size
};

// Example 5: Advertisement with no entries (every request region internal).
inline const std::vector<uint8_t> kAdvertisementEmpty = {0x02, 0x00, 0x00, 0x00};

// Example 6: Error, code 0x03 (too many regions).
inline const std::vector<uint8_t> kErrorTooManyRegions = {0x00, 0x03, 0x00, 0x00};

// Example 7: contents of the metadata region of example 1 (k = 1): the host
// address of region 2, big-endian.
inline const std::vector<uint8_t> kMetadataSpec = {
    0x00, 0x00, 0x7F, 0x3A, 0x5C, 0x20, 0x00, 0x00};

// Immediates as they appear on the wire (imm_data, network byte order).
// Example 8: spec dialect request, function code 5.
inline const std::vector<uint8_t> kImmRequestSpec = {0x00, 0x00, 0x00, 0x05};
// Example 9: reference dialect request, function code 0x2A, user bits 0x0A0B0C.
inline const std::vector<uint8_t> kImmRequestReference = {0x0A, 0x0B, 0x0C, 0xAA};
// Example 10: status 0x11 as naarpc's NAA sends it.
inline const std::vector<uint8_t> kImmStatusNaarpc = {0x00, 0x00, 0x00, 0x11};
// Example 11: status 0x11 in the bits 8..15 convention (accepted on receipt).
inline const std::vector<uint8_t> kImmStatusBits8To15 = {0x00, 0x00, 0x11, 0x00};
// Example 12: status 0x11 as naarpc sends it in the reference dialect (both
// bytes, so reference hosts reading bits 8..15 see it too).
inline const std::vector<uint8_t> kImmStatusReference = {0x00, 0x00, 0x11, 0x11};

// Example 13: Advertisement+Request, reference dialect, a routine with a
// 4-byte input and an input stream (chunk 4096, window 4), streams v2.
inline const std::vector<uint8_t> kRequestStream = {
    0x01, 0x02, 0x00, 0x00,                                // header
    0x04,                                                  // [0] flags input
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              // [0] NAA address
    0x00, 0x00, 0x7F, 0x10, 0x20, 0x30, 0x40, 0x50,        // [0] host addr
    0x0A, 0x0B, 0x0C, 0x0D,                                // [0] rkey
    0x00, 0x00, 0x00, 0x04,                                // [0] size
    0x35,                                                  // [1] stream|seq|internal|input
    0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00,              // [1] chunk size 4096
    0x00, 0x00, 0x7F, 0x10, 0x20, 0x31, 0x00, 0x00,        // [1] host ring
    0x00, 0xC0, 0xFF, 0xEE,                                // [1] rkey
    0x00, 0x00, 0x40, 0x00,                                // [1] size 16384 = 4 x 4096
};
// Examples 14-17: stream frames on stream 3 (docs/protocol.md 15.2).
inline const std::vector<uint8_t> kImmStreamChunk = {0x83, 0x00, 0x00, 0x07};     // chunk 7
inline const std::vector<uint8_t> kImmStreamEndChunk = {0xA3, 0x00, 0x00, 0x08};  // chunk 8, the end
inline const std::vector<uint8_t> kImmStreamCredit = {0xC3, 0x00, 0x00, 0x09};    // 9 consumed
inline const std::vector<uint8_t> kImmStreamStopCredit = {0xE3, 0x00, 0x00, 0x02};  // 2, stop

// Examples 18-20: per-call memory windows (docs/protocol.md 3.6, 4.5).
inline const std::vector<uint8_t> kRequestWindows = {
    0x01, 0x02, 0x01, 0x00,                                // header, capabilities 0x01
    0x00,                                                  // [0] flags
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,              // [0] NAA address
    0x00, 0x00, 0x7F, 0x3A, 0x5C, 0x00, 0x10, 0x00,        // [0] host addr
    0x00, 0x00, 0x1A, 0x2B,                                // [0] rkey
    0x00, 0x00, 0x00, 0x10,                                // [0] size 16
    0x00,                                                  // [1] flags
    0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,              // [1] NAA address
    0x00, 0x00, 0x7F, 0x3A, 0x5C, 0x20, 0x00, 0x00,        // [1] host addr
    0x00, 0x00, 0x1A, 0x2D,                                // [1] rkey
    0x00, 0x00, 0x10, 0x00,                                // [1] size
};
inline const std::vector<uint8_t> kAdvertisementWindows = {
    0x02, 0x02, 0x01, 0x00,                                // header, capabilities 0x01
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,        // [0] address
    0x00, 0x00, 0x01, 0x01,                                // [0] rkey
    0x00, 0x00, 0x00, 0x10,                                // [0] size
    0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,        // [1] address
    0x00, 0x00, 0x01, 0x02,                                // [1] rkey
    0x00, 0x00, 0x10, 0x00,                                // [1] size
};
inline const std::vector<uint8_t> kMetadataWindows = {
    0x00, 0x00, 0x7F, 0x3A, 0x5C, 0x20, 0x00, 0x00,        // return address 1
    0x00, 0x12, 0x34, 0x05,                                // window rkey
    0x00, 0x00, 0x00, 0x00,                                // reserved
};

struct NamedExample {
  std::string_view name;  // the "golden:" name in docs/protocol.md
  const std::vector<uint8_t>* bytes;
};
inline const NamedExample kAllExamples[] = {
    {"request_spec", &kRequestSpec},
    {"advertisement_spec", &kAdvertisementSpec},
    {"request_reference", &kRequestReference},
    {"advertisement_reference", &kAdvertisementReference},
    {"advertisement_empty", &kAdvertisementEmpty},
    {"error_too_many_regions", &kErrorTooManyRegions},
    {"metadata_spec", &kMetadataSpec},
    {"imm_request_spec", &kImmRequestSpec},
    {"imm_request_reference", &kImmRequestReference},
    {"imm_status_naarpc", &kImmStatusNaarpc},
    {"imm_status_bits8to15", &kImmStatusBits8To15},
    {"imm_status_reference", &kImmStatusReference},
    {"request_stream", &kRequestStream},
    {"imm_stream_chunk", &kImmStreamChunk},
    {"imm_stream_end_chunk", &kImmStreamEndChunk},
    {"imm_stream_credit", &kImmStreamCredit},
    {"imm_stream_stop_credit", &kImmStreamStopCredit},
    {"request_windows", &kRequestWindows},
    {"advertisement_windows", &kAdvertisementWindows},
    {"metadata_windows", &kMetadataWindows},
};

}  // namespace naarpc::golden

#endif  // NAARPC_TESTS_CODEC_GOLDEN_H_
