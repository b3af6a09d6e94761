#include "naarpc/channel.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <utility>

#include "naarpc/discovery.h"

namespace naarpc {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashText(std::string_view s) {  // FNV-1a: stable across runs and hosts
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

Status WithNaa(const Status& s, const std::string& naa) {
  Status out(s.code(), "NAA " + naa + ": " + s.message());
  if (s.wire_code()) out.set_wire_code(*s.wire_code());
  return out;
}

}  // namespace

std::string NaaAddress::ToString() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

struct Channel::Naa {
  NaaAddress address;
  std::string name;     // address.ToString()
  uint64_t hash = 0;    // of the name, for rendezvous hashing
  uint64_t calls = 0, errors = 0, failures = 0, in_flight = 0, ejections = 0;
  uint32_t failures_in_a_row = 0;
  bool ejected = false;
  Deadline::Clock::time_point ejected_until{};
  bool probing = false;  // an attempt is probing the ejected NAA
  bool retired = false;
};

Channel::Channel(std::vector<NaaAddress> naas, ChannelOptions options, Resolver resolver)
    : options_(std::move(options)), resolver_(std::move(resolver)) {
  for (NaaAddress& a : naas) {
    auto n = std::make_unique<Naa>();
    n->name = a.ToString();
    n->hash = HashText(n->name);
    n->address = std::move(a);
    naas_.push_back(std::move(n));
  }
}

Channel::~Channel() = default;

namespace {
Status CheckNaas(const std::vector<NaaAddress>& naas, std::string_view what) {
  if (naas.empty()) return InvalidArgumentError(std::string(what) + " names no NAA");
  for (size_t i = 0; i < naas.size(); ++i) {
    if (naas[i].host.empty()) {
      return InvalidArgumentError(std::string(what) + ": NAA " + std::to_string(i + 1) +
                                  " has an empty host");
    }
    for (size_t j = 0; j < i; ++j) {
      if (naas[j] == naas[i]) {
        return InvalidArgumentError(std::string(what) + ": NAA " + naas[i].ToString() +
                                    " is named twice");
      }
    }
  }
  return Status::Ok();
}

// The local address without brackets, checked (CheckLocalIp).
Status CheckOptions(ChannelOptions& options) {
  std::string& a = options.local_address;
  if (a.empty()) return Status::Ok();
  NAARPC_RETURN_IF_ERROR(CheckLocalIp(a));
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  return Status::Ok();
}
}  // namespace

Result<std::shared_ptr<Channel>> Channel::Create(std::vector<NaaAddress> naas,
                                                 ChannelOptions options) {
  NAARPC_RETURN_IF_ERROR(CheckNaas(naas, "channel"));
  NAARPC_RETURN_IF_ERROR(CheckOptions(options));
  return std::shared_ptr<Channel>(new Channel(std::move(naas), std::move(options), nullptr));
}

Result<std::shared_ptr<Channel>> Channel::FromNaaSpec(std::string_view spec,
                                                      std::span<const uint8_t> function_codes,
                                                      ChannelOptions options) {
  NAARPC_RETURN_IF_ERROR(CheckOptions(options));
  NAARPC_ASSIGN_OR_RETURN(std::vector<NaaEndpoint> entries, ParseNaaSpec(spec));
  std::vector<NaaAddress> naas;
  for (const NaaEndpoint& e : entries) {
    if (!function_codes.empty() &&
        std::find(function_codes.begin(), function_codes.end(), e.function_code) ==
            function_codes.end()) {
      continue;
    }
    NaaAddress a{e.address, e.port};
    if (std::find(naas.begin(), naas.end(), a) == naas.end()) naas.push_back(std::move(a));
  }
  if (naas.empty()) {
    std::string codes;
    for (uint8_t c : function_codes) codes += (codes.empty() ? "" : ", ") + std::to_string(c);
    return NotFoundError("NAA_SPEC names no NAA for function code(s) " + codes);
  }
  return std::shared_ptr<Channel>(new Channel(std::move(naas), std::move(options), nullptr));
}

Result<std::shared_ptr<Channel>> Channel::FromEnvironment(std::span<const uint8_t> function_codes,
                                                          ChannelOptions options) {
  const char* spec = std::getenv("NAA_SPEC");
  if (spec == nullptr || *spec == '\0') {
    return NotFoundError(
        "NAA_SPEC is not set (<address>:<port>:<fncode>:<param_count>[,...]; under Slurm the "
        "job step's prolog sets it, docs/slurm.md)");
  }
  const char* local = std::getenv("NAA_LOCAL_IP");
  if (options.local_address.empty() && local != nullptr) options.local_address = local;
  return FromNaaSpec(spec, function_codes, std::move(options));
}

Result<std::shared_ptr<Channel>> Channel::FromResolver(Resolver resolver, ChannelOptions options) {
  if (!resolver) return InvalidArgumentError("channel: the resolver is empty");
  NAARPC_RETURN_IF_ERROR(CheckOptions(options));
  NAARPC_ASSIGN_OR_RETURN(std::vector<NaaAddress> naas, resolver());
  NAARPC_RETURN_IF_ERROR(CheckNaas(naas, "the resolver's answer"));
  return std::shared_ptr<Channel>(new Channel(std::move(naas), std::move(options),
                                              std::move(resolver)));
}

Status Channel::Refresh() {
  if (!resolver_) return FailedPreconditionError("channel: Refresh() needs a resolver");
  NAARPC_ASSIGN_OR_RETURN(std::vector<NaaAddress> naas, resolver_());
  NAARPC_RETURN_IF_ERROR(CheckNaas(naas, "the resolver's answer"));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& n : naas_) {
    n->retired = std::find(naas.begin(), naas.end(), n->address) == naas.end();
  }
  for (NaaAddress& a : naas) {
    const bool known = std::any_of(naas_.begin(), naas_.end(),
                                   [&](const auto& n) { return n->address == a; });
    if (known) continue;
    auto n = std::make_unique<Naa>();
    n->name = a.ToString();
    n->hash = HashText(n->name);
    n->address = std::move(a);
    naas_.push_back(std::move(n));
  }
  return Status::Ok();
}

size_t Channel::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return naas_.size();
}

NaaAddress Channel::naa(size_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return naas_.at(index)->address;
}

std::vector<NaaCounters> Channel::Counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NaaCounters> out;
  for (const auto& n : naas_) {
    out.push_back({.naa = n->address,
                   .calls = n->calls,
                   .errors = n->errors,
                   .failures = n->failures,
                   .in_flight = n->in_flight,
                   .ejections = n->ejections,
                   .ejected = n->ejected,
                   .retired = n->retired});
  }
  return out;
}

Deadline::Clock::time_point Channel::Now() const {
  return options_.clock ? options_.clock() : Deadline::Clock::now();
}

bool Channel::IsNaaFailure(const Status& s) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kDisconnected:
    case StatusCode::kTransportError:
    case StatusCode::kProtocolError:
    case StatusCode::kMrspError:
      return true;
    default:
      return false;
  }
}

bool Channel::NeverSent(const Status& s) { return s.code() == StatusCode::kUnavailable; }

std::optional<size_t> Channel::Pick(const std::optional<uint64_t>& key,
                                    const std::vector<size_t>& tried) {
  const auto now = Now();
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = naas_.size();
  auto untried = [&](size_t i) {
    return !naas_[i]->retired && std::find(tried.begin(), tried.end(), i) == tried.end();
  };
  // Healthy, or ejected with its back-off over and no probe running (then
  // this attempt is the probe).
  auto eligible = [&](size_t i) {
    const Naa& a = *naas_[i];
    return untried(i) && (!a.ejected || (now >= a.ejected_until && !a.probing));
  };
  std::optional<size_t> best;
  switch (options_.policy) {
    case BalancePolicy::kRoundRobin: {
      const uint64_t start = round_robin_++;
      for (size_t k = 0; k < n && !best; ++k) {
        if (eligible((start + k) % n)) best = (start + k) % n;
      }
      break;
    }
    case BalancePolicy::kLeastOutstanding: {
      const uint64_t start = round_robin_++;  // ties go round
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (start + k) % n;
        if (eligible(i) && (!best || naas_[i]->in_flight < naas_[*best]->in_flight)) best = i;
      }
      break;
    }
    case BalancePolicy::kKeyAffinity: {
      const uint64_t k = Mix(key.value_or(0));
      uint64_t top = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t score = Mix(k ^ naas_[i]->hash);
        if (eligible(i) && (!best || score > top)) best = i, top = score;
      }
      break;
    }
  }
  if (!best) {
    // Every untried NAA is ejected (or being probed): rather than fail
    // without trying, take the one whose back-off ends first (a channel of
    // one always tries its NAA, as a client of one NAA does).
    for (size_t i = 0; i < n; ++i) {
      if (untried(i) && (!best || naas_[i]->ejected_until < naas_[*best]->ejected_until)) best = i;
    }
    // A first attempt always gets an NAA, even if the resolver retired all.
    if (!best && tried.empty() && n > 0) best = 0;
    if (!best) return std::nullopt;
  }
  Naa& a = *naas_[*best];
  if (a.ejected && !a.probing) a.probing = true;
  ++a.calls;
  ++a.in_flight;
  return best;
}

void Channel::Report(size_t index, const Status& status, bool naa_involved) {
  const auto now = Now();
  std::lock_guard<std::mutex> lock(mu_);
  Naa& a = *naas_[index];
  --a.in_flight;
  if (a.ejected) a.probing = false;
  if (!naa_involved) return;
  if (status.ok() || !IsNaaFailure(status)) {
    // The NAA answered (maybe with an error of the call): it is healthy.
    if (!status.ok()) ++a.errors;
    a.failures_in_a_row = 0;
    a.ejected = false;
    return;
  }
  ++a.errors;
  ++a.failures;
  ++a.failures_in_a_row;
  auto backoff = options_.eject_base;
  for (uint32_t i = 1; i < a.failures_in_a_row && backoff < options_.eject_max; ++i) backoff *= 2;
  backoff = std::min(backoff, options_.eject_max);
  if (!a.ejected) ++a.ejections;
  a.ejected = true;
  a.ejected_until = now + backoff;
}

// ----- Attempts ----------------------------------------------------------------

Channel::Attempts::Attempts(Channel& channel, std::string_view routine, bool idempotent,
                            std::optional<uint64_t> key, Deadline deadline)
    : channel_(channel),
      routine_(routine),
      idempotent_(idempotent),
      key_(key),
      deadline_(deadline) {}

Channel::Attempts::~Attempts() {
  if (open_) channel_.Report(*open_, CancelledError("abandoned"));
}

Result<size_t> Channel::Attempts::Next() {
  if (open_) return InternalError(routine_ + ": Next() while an attempt is open");
  std::optional<size_t> i = channel_.Pick(key_, tried_);
  if (!i) {
    if (!last_.ok()) return last_;
    return UnavailableError(routine_ + ": the channel has no NAA to call");
  }
  tried_.push_back(*i);
  open_ = i;
  attempt_deadline_ = deadline_;
  if (idempotent_ && channel_.options_.attempt_timeout.count() > 0) {
    attempt_deadline_ =
        Deadline::Earlier(deadline_, Deadline::After(channel_.options_.attempt_timeout));
  }
  return *i;
}

bool Channel::Attempts::End(Status status, Status* final) {
  const size_t i = *open_;
  open_.reset();
  channel_.Report(i, status);
  if (status.ok()) {
    *final = std::move(status);
    return false;
  }
  const bool several = channel_.size() > 1;
  last_ = several ? WithNaa(status, channel_.naa(i).ToString()) : status;
  const bool may_retry = IsNaaFailure(status) && (idempotent_ || NeverSent(status)) && several &&
                         !deadline_.expired() && tried_.size() < channel_.size();
  if (!may_retry) {
    *final = last_;
    return false;
  }
  return true;
}

void Channel::Attempts::EndWithoutNaa(Status status, Status* final) {
  const size_t i = *open_;
  open_.reset();
  channel_.Report(i, status, /*naa_involved=*/false);
  *final = channel_.size() > 1 ? WithNaa(status, channel_.naa(i).ToString()) : std::move(status);
}

}  // namespace naarpc
