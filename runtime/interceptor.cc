// Interceptor chains, and the two interceptors naarpc ships
// (naarpc/interceptor.h, naarpc/logging_interceptor.h).
#include "naarpc/interceptor.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "naarpc/logging_interceptor.h"
#include "naarpc/stats_registry.h"

namespace naarpc {

InterceptorChain::~InterceptorChain() = default;

InterceptorChain::Id InterceptorChain::Add(std::shared_ptr<Interceptor> interceptor) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id = next_id_++;
  entries_.emplace_back(id, std::move(interceptor));
  PublishLocked(std::make_unique<List>(List{entries_}));
  return id;
}

bool InterceptorChain::Remove(Id id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [id](const auto& e) { return e.first == id; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  PublishLocked(entries_.empty() ? nullptr : std::make_unique<List>(List{entries_}));
  return true;
}

size_t InterceptorChain::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void InterceptorChain::PublishLocked(std::unique_ptr<List> next) {
  // Calls in progress may still use the lists published before: they stay
  // until the chain goes (changes are rare; each list is small).
  const List* raw = next.get();
  if (next != nullptr) lists_.push_back(std::move(next));
  current_.store(raw, std::memory_order_release);
}

Status InterceptorChain::RunStart(const List* list, const CallInfo& call, size_t* accepted) {
  *accepted = 0;
  if (list == nullptr) return Status::Ok();
  for (const auto& [id, interceptor] : list->entries) {
    Status s = interceptor->OnCallStart(call);
    if (!s.ok()) {
      RunEnd(list, *accepted, call, s);
      *accepted = 0;
      return s;
    }
    ++*accepted;
  }
  return Status::Ok();
}

void InterceptorChain::RunEnd(const List* list, size_t accepted, const CallInfo& call,
                              const Status& status) {
  if (list == nullptr) return;
  for (size_t i = std::min(accepted, list->entries.size()); i-- > 0;) {
    list->entries[i].second->OnCallEnd(call, status);
  }
}

StatsInterceptor::StatsInterceptor(std::shared_ptr<StatsRegistry> registry)
    : registry_(std::move(registry)) {}

Status StatsInterceptor::OnCallStart(const CallInfo& call) {
  if (registry_ != nullptr) registry_->Get(call.side, call.routine, call.peer).RecordStart();
  return Status::Ok();
}

void StatsInterceptor::OnCallEnd(const CallInfo& call, const Status& status) {
  if (registry_ == nullptr) return;
  registry_->Get(call.side, call.routine, call.peer)
      .RecordEnd(status, call.bytes_sent, call.bytes_received,
                 static_cast<uint64_t>(std::max<int64_t>(0, call.duration.count())));
}

void LoggingInterceptor::OnCallEnd(const CallInfo& call, const Status& status) {
  const LogLevel level = status.ok() ? LogLevel::kDebug : LogLevel::kWarn;
  if (!LogEnabled(LogComponent::kCalls, level)) return;
  uint64_t suppressed = 0;
  if (!status.ok() && !limiter_.Allow(&suppressed)) return;
  char us[32];
  std::snprintf(us, sizeof us, "%.1f", static_cast<double>(call.duration.count()) / 1e3);
  std::string line = std::string(CallSideName(call.side)) + " " + std::string(call.routine) +
                     " peer=" + std::string(call.peer) +
                     " sent=" + std::to_string(call.bytes_sent) +
                     " received=" + std::to_string(call.bytes_received) + " " +
                     (status.ok() ? std::string("OK") : status.ToString()) + " " + us + " us";
  if (suppressed > 0) line += " (" + std::to_string(suppressed) + " failed calls not logged)";
  Log(LogComponent::kCalls, level, line);
}

}  // namespace naarpc
