// Connection management over rdma_cm (RDMA_PS_TCP): addresses, CM events
// and the connection parameters both sides use. Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_CM_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_CM_H_

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "naarpc/deadline.h"
#include "naarpc/status.h"
#include "runtime/transport_impl/verbs/verbs_options.h"
#include "runtime/transport_impl/verbs/verbs_resources.h"

namespace naarpc {
namespace verbs {

// Resolves host (empty = any) to a socket address with `port`.
Result<sockaddr_storage> ResolveHost(const std::string& host, uint16_t port, bool passive);

// Waits for the next CM event on `channel` (its fd is non-blocking), up to
// `deadline`; `wake_fd` (if >= 0) aborts the wait with kUnavailable.
Result<CmEventPtr> NextCmEvent(rdma_event_channel* channel, Deadline deadline,
                               int wake_fd = -1, std::atomic<bool>* shutdown = nullptr);

std::string CmEventText(const rdma_cm_event* ev);

// Maps an unexpected CM event during connection set-up to a Status.
Status CmEventError(const rdma_cm_event* ev, std::string_view stage);

// With VerbsOptions::device set: the cm_id (address resolved or bound) must
// sit on that device.
Status CheckDevice(const rdma_cm_id* id, const std::string& device, std::string_view what);

// The parameters rdma_connect and rdma_accept pass.
rdma_conn_param ConnParam(const VerbsOptions& opt);

// Creates a non-blocking event channel.
Result<EventChannelPtr> NewEventChannel();

// Waits for `expected` on `channel`; other events become errors.
Status ExpectCmEvent(rdma_event_channel* channel, rdma_cm_event_type expected,
                     Deadline deadline, std::string_view stage);

// The timeout of one resolution step within `deadline`, in ms.
int StepTimeoutMs(Deadline deadline);

}  // namespace verbs
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_CM_H_
