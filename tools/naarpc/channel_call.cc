#include "tools/naarpc/channel_call.h"

#include <cstdlib>
#include <utility>

#include "naarpc/discovery.h"

namespace naarpc::cli {

Result<std::unique_ptr<ChannelDynamicCall>> ChannelDynamicCall::Open(
    Transport& transport, std::vector<Target> targets, const idl::Service& service,
    const idl::Routine& routine, const ClientOptions& options, Deadline first) {
  std::unique_ptr<ChannelDynamicCall> c(
      new ChannelDynamicCall(transport, service, routine, options));
  std::vector<NaaAddress> naas;
  for (const Target& t : targets) naas.push_back({t.host, t.port});
  NAARPC_ASSIGN_OR_RETURN(c->channel_, Channel::Create(std::move(naas)));
  c->calls_.resize(targets.size());
  if (targets.size() == 1) {
    NAARPC_ASSIGN_OR_RETURN(c->calls_[0], DynamicCall::Open(transport, targets[0].host,
                                                            targets[0].port, service, routine,
                                                            options, first));
  }
  return c;
}

Status ChannelDynamicCall::Invoke(const std::map<std::string, Value>& inputs,
                                  std::map<std::string, Value>* outputs, Deadline deadline) {
  const std::string name = service_.name + "." + routine_.name;
  Channel::Attempts attempts(*channel_, name, routine_.idempotent, std::nullopt, deadline);
  while (true) {
    NAARPC_ASSIGN_OR_RETURN(size_t i, attempts.Next());
    std::unique_ptr<DynamicCall>& call = calls_[i];
    Status s;
    if (!call) {
      const NaaAddress a = channel_->naa(i);
      ClientOptions options = options_;
      options.retry_refused_connect =
          options.retry_refused_connect && channel_->retry_refused_connect();
      auto opened = DynamicCall::Open(transport_, a.host, a.port, service_, routine_, options,
                                      attempts.attempt_deadline());
      if (opened.ok()) {
        call = std::move(*opened);
      } else {
        s = opened.status();
      }
    }
    if (call) {
      s = call->Invoke(inputs, outputs, attempts.attempt_deadline());
      last_sent_ = call->last_bytes_sent();
      last_received_ = call->last_bytes_received();
      // A connection that failed is opened anew next time.
      if (!s.ok() && Channel::IsNaaFailure(s) && calls_.size() > 1) call.reset();
    }
    Status final;
    if (!attempts.End(std::move(s), &final)) return final;
  }
}

void ChannelDynamicCall::Close() {
  for (auto& c : calls_) {
    if (c) c->session().Close().IgnoreError();
  }
}

}  // namespace naarpc::cli
