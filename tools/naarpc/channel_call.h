// `naarpc call` over several NAAs: a naarpc::Channel (round robin) over the
// --target values (or every NAA_SPEC entry of the routine's function code),
// one DynamicCall per NAA opened on first use. A failed NAA is ejected; a
// routine declared idempotent is retried on another NAA. With one target
// it is one DynamicCall, opened at once, as `naarpc call` always did.
#ifndef NAARPC_TOOLS_NAARPC_CHANNEL_CALL_H_
#define NAARPC_TOOLS_NAARPC_CHANNEL_CALL_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "idl/ir.h"
#include "naarpc/channel.h"
#include "naarpc/client_session.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/target.h"
#include "tools/naarpc/values.h"

namespace naarpc::cli {

class ChannelDynamicCall {
 public:
  // REQUIRES: `targets` not empty; transport, service and routine outlive
  // the call. One target: connects now (within `first`), as DynamicCall.
  static Result<std::unique_ptr<ChannelDynamicCall>> Open(Transport& transport,
                                                          std::vector<Target> targets,
                                                          const idl::Service& service,
                                                          const idl::Routine& routine,
                                                          const ClientOptions& options,
                                                          Deadline first);
  // As DynamicCall::Invoke, on the NAA the channel picks.
  Status Invoke(const std::map<std::string, Value>& inputs, std::map<std::string, Value>* outputs,
                Deadline deadline);
  uint64_t last_bytes_sent() const { return last_sent_; }
  uint64_t last_bytes_received() const { return last_received_; }
  void Close();
  size_t size() const { return calls_.size(); }
  std::vector<NaaCounters> Counters() const { return channel_->Counters(); }

 private:
  ChannelDynamicCall(Transport& transport, const idl::Service& service,
                     const idl::Routine& routine, const ClientOptions& options)
      : transport_(transport), service_(service), routine_(routine), options_(options) {}

  Transport& transport_;
  const idl::Service& service_;
  const idl::Routine& routine_;
  const ClientOptions options_;
  std::shared_ptr<Channel> channel_;
  std::vector<std::unique_ptr<DynamicCall>> calls_;  // per NAA, opened on first use
  uint64_t last_sent_ = 0, last_received_ = 0;
};

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_CHANNEL_CALL_H_
