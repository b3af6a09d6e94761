// What tests/channel's where_peer and its tests agree on.
#ifndef NAARPC_TESTS_CHANNEL_CHANNEL_PEER_H_
#define NAARPC_TESTS_CHANNEL_CHANNEL_PEER_H_

#include <cstdint>

namespace naarpc::testing {

// A call with this x is held by where_peer until it is told "release".
inline constexpr uint32_t kHold = 0x401d;

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_CHANNEL_CHANNEL_PEER_H_
