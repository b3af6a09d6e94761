// CommState: the states of the NAAICE API's communication state machine
// (spec 000, "State Machine"), with the spec's numeric values, as
// ClientSession::state() reports them.
#ifndef NAARPC_COMM_STATE_H_
#define NAARPC_COMM_STATE_H_

#include <cstdint>
#include <string_view>

namespace naarpc {

enum class CommState : uint8_t {
  kInit = 0,
  kReady = 1,
  kConnected = 2,
  kDisconnected = 3,
  kMrspSending = 10,
  kMrspReceiving = 11,
  kMrspDone = 12,
  kDataSending = 20,
  kCalculating = 21,
  kDataReceiving = 22,
  kFinished = 30,
  kError = 40,
};
std::string_view CommStateName(CommState s);

}  // namespace naarpc

#endif  // NAARPC_COMM_STATE_H_
