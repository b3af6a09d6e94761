// The emulated transport's listener: accepts TCP connections and runs their
// hello exchanges side by side. Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_LISTENER_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_LISTENER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/emulated_options.h"

namespace naarpc {
namespace emulated {

// Transport::Listen: binds the first address `host` resolves to.
Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port,
                                         const EmulatedOptions& opts);

}  // namespace emulated
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_LISTENER_H_
