#include "runtime/transport_impl/emulated/fault_injection.h"

#include <utility>

namespace naarpc {

ScriptedFaultInjector::ScriptedFaultInjector(std::vector<FaultRule> rules)
    : rules_(std::move(rules)) {}

void ScriptedFaultInjector::AddRule(FaultRule rule) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back(std::move(rule));
}

FaultAction ScriptedFaultInjector::OnPost(const FaultPoint& point) {
  std::lock_guard<std::mutex> lock(mu_);
  seen_.push_back(point);
  for (FaultRule& r : rules_) {
    if (r.times == 0) continue;
    if (r.listener_side && *r.listener_side != point.is_listener_side) continue;
    if (r.opcode && *r.opcode != point.opcode) continue;
    if (r.sequence && *r.sequence != point.sequence) continue;
    if (r.match && !r.match(point)) continue;
    if (r.times > 0) --r.times;
    ++injected_;
    return r.action;
  }
  return {};
}

uint64_t ScriptedFaultInjector::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

std::vector<FaultPoint> ScriptedFaultInjector::seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seen_;
}

}  // namespace naarpc
