// Channel: one service's calls spread over a set of NAAs that serve it.
//
// A channel knows the NAAs (from targets, from every matching NAA_SPEC
// entry, or from a resolver callback), picks one per call by its policy,
// counts each NAA's calls, errors and calls in flight, and takes an NAA that
// fails out of rotation (ejects it) for a back-off, after which one call at
// a time probes it back in. Generated clients run over a channel with
// <Service>ChannelClient (docs/channel.md); the channel itself moves no
// bytes. Thread-safe.
#ifndef NAARPC_CHANNEL_H_
#define NAARPC_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/status.h"

namespace naarpc {

// Where one NAA listens.
struct NaaAddress {
  std::string host;  // host name or IP literal (IPv6 without brackets)
  uint16_t port = 12345;
  // "host:port" ("[v6]:port").
  std::string ToString() const;
  friend bool operator==(const NaaAddress&, const NaaAddress&) = default;
};

enum class BalancePolicy {
  kRoundRobin,        // each healthy NAA in turn
  kLeastOutstanding,  // the healthy NAA with the fewest calls in flight
  kKeyAffinity,       // calls with the same key go to the same NAA (rendezvous
                      // hashing: ejecting an NAA moves only that NAA's keys)
};

struct ChannelOptions {
  BalancePolicy policy = BalancePolicy::kRoundRobin;
  // An NAA that fails is ejected for `eject_base`, doubled for each failure
  // in a row, at most `eject_max`; then one call probes it (its success
  // returns the NAA to rotation, its failure ejects it again).
  std::chrono::milliseconds eject_base{200};
  std::chrono::milliseconds eject_max{10000};
  // Bound of one attempt of an idempotent routine (0: the call's deadline),
  // so an NAA that stops answering leaves time to retry on another one.
  // The call's deadline always bounds all attempts together.
  std::chrono::milliseconds attempt_timeout{0};
  // The job's local side (NAA_LOCAL_IP, as the NAAICE reference library
  // uses it): the connections to the NAAs originate from this IP address of
  // this host (on verbs, of an RDMA device). Empty: the route's.
  // FromEnvironment sets it from NAA_LOCAL_IP when it is empty. The
  // channel's clients connect through Transport::WithLocalAddress of the
  // transport they are given.
  std::string local_address;
  // The clock of ejections (tests set a fake one); nullptr: steady_clock.
  std::function<Deadline::Clock::time_point()> clock;
};

// One NAA's counters, as Channel::Counters() reports them.
struct NaaCounters {
  NaaAddress naa;
  uint64_t calls = 0;       // attempts sent to this NAA
  uint64_t errors = 0;      // attempts that failed (any error)
  uint64_t failures = 0;    // of those, failures of the NAA (connection, deadline)
  uint64_t in_flight = 0;   // attempts running now
  uint64_t ejections = 0;   // times taken out of rotation
  bool ejected = false;     // out of rotation now (or being probed)
  bool retired = false;     // no longer named by the resolver
};

class Channel {
 public:
  using Resolver = std::function<Result<std::vector<NaaAddress>>()>;

  // kInvalidArgument if `naas` is empty or names an NAA twice, or if
  // options.local_address is not an IP address of this host.
  static Result<std::shared_ptr<Channel>> Create(std::vector<NaaAddress> naas,
                                                 ChannelOptions options = {});
  // Every NAA_SPEC entry (docs: include/naarpc/discovery.h) whose function
  // code is in `function_codes` (empty: every entry), each address once.
  // kNotFound if none matches.
  static Result<std::shared_ptr<Channel>> FromNaaSpec(std::string_view spec,
                                                      std::span<const uint8_t> function_codes,
                                                      ChannelOptions options = {});
  // FromNaaSpec of the environment's NAA_SPEC (kNotFound if unset), from
  // the environment's NAA_LOCAL_IP (if set, and options.local_address is not).
  static Result<std::shared_ptr<Channel>> FromEnvironment(
      std::span<const uint8_t> function_codes, ChannelOptions options = {});
  // The NAAs `resolver` returns now; Refresh() asks it again.
  static Result<std::shared_ptr<Channel>> FromResolver(Resolver resolver,
                                                       ChannelOptions options = {});

  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Asks the resolver again: new NAAs join, NAAs it no longer names are
  // retired (never picked; their index stays valid). kFailedPrecondition
  // without a resolver; the resolver's error as it is.
  Status Refresh();

  // NAAs ever known (indices are stable; retired ones included).
  size_t size() const;
  NaaAddress naa(size_t index) const;
  std::vector<NaaCounters> Counters() const;
  const ChannelOptions& options() const { return options_; }
  // What a session opened on one of its NAAs sets as
  // ClientOptions::retry_refused_connect: with somewhere else to go (more
  // than one NAA), a refusing NAA fails its attempt at once instead of
  // spending the call's deadline on connect retries; a channel of one
  // retries, as a client of one NAA does.
  bool retry_refused_connect() const { return size() <= 1; }

  // ----- Used by generated clients (one Attempts per call) -----------------

  // Routes one call: Next() picks the NAA of each attempt, End() reports how
  // it went and says whether to try again (on another NAA).
  class Attempts {
   public:
    // `routine` ("Service.Routine") names the call in errors.
    Attempts(Channel& channel, std::string_view routine, bool idempotent,
             std::optional<uint64_t> key, Deadline deadline);
    ~Attempts();  // ends an attempt still open (as cancelled)
    Attempts(const Attempts&) = delete;
    Attempts& operator=(const Attempts&) = delete;

    // The NAA of the next attempt (counted in flight until End). An error
    // (the last attempt's, naming its NAA) if there is nothing left to try.
    Result<size_t> Next();
    // The deadline of the attempt Next() started.
    Deadline attempt_deadline() const { return attempt_deadline_; }
    // REQUIRES: an attempt is open. True: call Next() again (the attempt
    // failed in a way another NAA may not, the routine may run twice, and
    // time and an untried NAA are left). False: `*final` is the call's
    // status (OK, or the error naming the NAA when the channel has several).
    bool End(Status status, Status* final);
    // REQUIRES: an attempt is open. Ends it for a reason of the caller's
    // that never reached the NAA (its deadline passed while it waited for a
    // free session of the NAA's client): the NAA's health and error counts
    // stay as they were, and there is no retry. `*final` as for End.
    void EndWithoutNaa(Status status, Status* final);
    size_t attempts() const { return tried_.size(); }

   private:
    Channel& channel_;
    const std::string routine_;
    const bool idempotent_;
    const std::optional<uint64_t> key_;
    const Deadline deadline_;
    Deadline attempt_deadline_ = Deadline::Infinite();
    std::vector<size_t> tried_;
    std::optional<size_t> open_;
    Status last_;
  };

  // Whether `status` says the NAA (or the way to it) failed, rather than the
  // call: connection, transport, protocol and deadline errors.
  static bool IsNaaFailure(const Status& status);
  // Whether the call never reached the NAA (it could not be connected), so
  // even a routine that is not idempotent may go to another NAA.
  static bool NeverSent(const Status& status);

 private:
  struct Naa;
  Channel(std::vector<NaaAddress> naas, ChannelOptions options, Resolver resolver);
  Deadline::Clock::time_point Now() const;
  // Picks an NAA not in `tried`; nullopt if every NAA was tried.
  std::optional<size_t> Pick(const std::optional<uint64_t>& key, const std::vector<size_t>& tried);
  // `naa_involved` false: only the attempt ends (EndWithoutNaa).
  void Report(size_t index, const Status& status, bool naa_involved = true);

  const ChannelOptions options_;
  const Resolver resolver_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Naa>> naas_;  // guarded by mu_ (the vector; Naa fields too)
  uint64_t round_robin_ = 0;                // guarded by mu_
};

}  // namespace naarpc

#endif  // NAARPC_CHANNEL_H_
