// The verbs transport's listener: rdma_cm connection requests, set up side
// by side, the accept hook run before rdma_accept. Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_LISTENER_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_LISTENER_H_

#include <memory>

#include "naarpc/transport.h"
#include "runtime/transport_impl/verbs/verbs_options.h"
#include "runtime/transport_impl/verbs/verbs_resources.h"

namespace naarpc {
namespace verbs {

// A listener on `id` (bound and listening on `channel`).
std::unique_ptr<Listener> NewListener(EventChannelPtr channel, CmIdPtr id,
                                      const VerbsOptions& opt);

}  // namespace verbs
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_LISTENER_H_
