// naarpc::Channel without any NAA: the policies, ejection and return on a
// fake clock, the retry rules of Attempts and the counters. The channel
// through generated clients against real software NAAs:
// //tests/channel:channel_e2e_test.
#include "naarpc/channel.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace naarpc {
namespace {

using namespace std::chrono_literals;

std::vector<NaaAddress> Naas(int n) {
  std::vector<NaaAddress> out;
  for (int i = 0; i < n; ++i) out.push_back({"10.0.0." + std::to_string(i + 1), 12345});
  return out;
}

// A clock the test moves.
struct FakeClock {
  Deadline::Clock::time_point now = Deadline::Clock::time_point(1h);
  std::function<Deadline::Clock::time_point()> Fn() {
    return [this] { return now; };
  }
};

std::shared_ptr<Channel> Make(int n, BalancePolicy policy, FakeClock* clock = nullptr) {
  ChannelOptions o;
  o.policy = policy;
  if (clock != nullptr) o.clock = clock->Fn();
  auto c = Channel::Create(Naas(n), o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// One call that succeeds on the NAA the channel picks; returns its index.
size_t CallOk(Channel& c, std::optional<uint64_t> key = std::nullopt) {
  Channel::Attempts a(c, "S.R", false, key, Deadline::Infinite());
  Result<size_t> i = a.Next();
  EXPECT_TRUE(i.ok()) << i.status().ToString();
  Status final;
  EXPECT_FALSE(a.End(Status::Ok(), &final));
  EXPECT_TRUE(final.ok());
  return *i;
}

// One attempt that fails with `s` on the picked NAA (not retried); returns
// the index.
size_t CallFail(Channel& c, Status s) {
  Channel::Attempts a(c, "S.R", false, std::nullopt, Deadline::Infinite());
  Result<size_t> i = a.Next();
  EXPECT_TRUE(i.ok());
  Status final;
  a.End(s, &final);
  return *i;
}

TEST(Channel, CreateRefusesEmptyAndDuplicateSets) {
  EXPECT_EQ(Channel::Create({}).status().code(), StatusCode::kInvalidArgument);
  auto dup = Channel::Create({{"a", 1}, {"b", 1}, {"a", 1}});
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("a:1 is named twice"), std::string::npos)
      << dup.status().ToString();
  EXPECT_EQ(NaaAddress({"fe80::1", 7}).ToString(), "[fe80::1]:7");
}

TEST(Channel, FromNaaSpecTakesEveryEntryOfTheFunctionCodes) {
  const uint8_t codes[] = {1, 2};
  auto c = Channel::FromNaaSpec("n1:4000:1:3,n2:4000:1:3,n1:4000:2:1,n3::9:1", codes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ((*c)->size(), 2u);  // n1 once, n3 serves another code
  EXPECT_EQ((*c)->naa(0).ToString(), "n1:4000");
  EXPECT_EQ((*c)->naa(1).ToString(), "n2:4000");
  auto all = Channel::FromNaaSpec("n1:4000:1:3,n2:4000:1:3,n3::9:1", {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)->size(), 3u);
  EXPECT_EQ((*all)->naa(2).port, 12345);
  const uint8_t other[] = {5};
  auto none = Channel::FromNaaSpec("n1:4000:1:3", other);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("function code(s) 5"), std::string::npos);
  EXPECT_EQ(Channel::FromNaaSpec("n1:x:1:3", {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Channel, FromEnvironmentReadsNaaSpec) {
  unsetenv("NAA_SPEC");
  EXPECT_EQ(Channel::FromEnvironment({}).status().code(), StatusCode::kNotFound);
  setenv("NAA_SPEC", "127.0.0.1:5000:1:3,127.0.0.1:5001:1:3", 1);
  auto c = Channel::FromEnvironment({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->size(), 2u);
  unsetenv("NAA_SPEC");
}

TEST(Channel, RoundRobinTakesEachNaaInTurn) {
  auto c = Make(3, BalancePolicy::kRoundRobin);
  std::vector<size_t> order;
  for (int i = 0; i < 6; ++i) order.push_back(CallOk(*c));
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  for (const NaaCounters& n : c->Counters()) {
    EXPECT_EQ(n.calls, 2u);
    EXPECT_EQ(n.in_flight, 0u);
    EXPECT_EQ(n.errors, 0u);
  }
}

TEST(Channel, LeastOutstandingTakesTheLeastBusyNaa) {
  auto c = Make(3, BalancePolicy::kLeastOutstanding);
  for (size_t freed = 0; freed < 3; ++freed) {
    // One call in flight on each NAA.
    std::map<size_t, std::unique_ptr<Channel::Attempts>> on;
    for (int i = 0; i < 3; ++i) {
      auto a = std::make_unique<Channel::Attempts>(*c, "S.R", false, std::nullopt,
                                                   Deadline::Infinite());
      const size_t naa = *a->Next();
      on[naa] = std::move(a);
    }
    ASSERT_EQ(on.size(), 3u);
    // The call on `freed` ends: the next two calls go there (it is the
    // least busy: 0 calls in flight against 1).
    Status final;
    EXPECT_FALSE(on[freed]->End(Status::Ok(), &final));
    Channel::Attempts next(*c, "S.R", false, std::nullopt, Deadline::Infinite());
    EXPECT_EQ(*next.Next(), freed);
    EXPECT_FALSE(next.End(Status::Ok(), &final));
    for (auto& [naa, a] : on) {
      if (naa != freed) {
        EXPECT_FALSE(a->End(Status::Ok(), &final));
      }
    }
  }
}

TEST(Channel, KeyAffinitySendsAKeyToOneNaaAndSpreadsKeys) {
  auto c = Make(4, BalancePolicy::kKeyAffinity);
  std::map<uint64_t, size_t> owner;
  std::set<size_t> used;
  for (uint64_t key = 0; key < 200; ++key) {
    owner[key] = CallOk(*c, key);
    used.insert(owner[key]);
  }
  EXPECT_EQ(used.size(), 4u);
  for (uint64_t key = 0; key < 200; ++key) EXPECT_EQ(CallOk(*c, key), owner[key]) << key;
}

TEST(Channel, KeyAffinityMovesOnlyTheEjectedNaasKeys) {
  FakeClock clock;
  auto c = Make(4, BalancePolicy::kKeyAffinity, &clock);
  std::map<uint64_t, size_t> owner;
  for (uint64_t key = 0; key < 200; ++key) owner[key] = CallOk(*c, key);
  // NAA 2 fails: only its keys move, each to one new NAA.
  uint64_t key2 = 0;
  while (owner[key2] != 2) ++key2;
  {
    Channel::Attempts a(*c, "S.R", true, key2, Deadline::Infinite());
    ASSERT_EQ(*a.Next(), 2u);
    Status final;
    ASSERT_TRUE(a.End(UnavailableError("refused"), &final));  // idempotent: retry
    const size_t moved_to = *a.Next();
    EXPECT_NE(moved_to, 2u);
    EXPECT_FALSE(a.End(Status::Ok(), &final));
  }
  EXPECT_TRUE(c->Counters()[2].ejected);
  std::map<uint64_t, size_t> during;
  for (uint64_t key = 0; key < 200; ++key) {
    during[key] = CallOk(*c, key);
    if (owner[key] != 2) {
      EXPECT_EQ(during[key], owner[key]) << "key " << key << " moved though its NAA is up";
    } else {
      EXPECT_NE(during[key], 2u);
    }
  }
  for (uint64_t key = 0; key < 200; ++key) EXPECT_EQ(CallOk(*c, key), during[key]);
  // Back-off over, a probe succeeds: every key is home again.
  clock.now += 1h;
  EXPECT_EQ(CallOk(*c, key2), 2u);
  EXPECT_FALSE(c->Counters()[2].ejected);
  for (uint64_t key = 0; key < 200; ++key) EXPECT_EQ(CallOk(*c, key), owner[key]);
}

TEST(Channel, AFailedNaaIsEjectedThenProbedBackWithBackoff) {
  FakeClock clock;
  ChannelOptions o;
  o.clock = clock.Fn();
  o.eject_base = 100ms;
  o.eject_max = 400ms;
  auto c = *Channel::Create(Naas(2), o);
  EXPECT_EQ(CallFail(*c, DisconnectedError("gone")), 0u);
  auto n = c->Counters();
  EXPECT_TRUE(n[0].ejected);
  EXPECT_EQ(n[0].ejections, 1u);
  EXPECT_EQ(n[0].failures, 1u);
  // While ejected, every call goes to NAA 1.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(CallOk(*c), 1u);
  clock.now += 100ms;
  // Back-off over: one call probes NAA 0 (round robin reaches it), and
  // while the probe runs, the others keep away from NAA 0.
  std::unique_ptr<Channel::Attempts> probe;
  for (int i = 0; i < 3 && !probe; ++i) {
    auto a = std::make_unique<Channel::Attempts>(*c, "S.R", false, std::nullopt,
                                                 Deadline::Infinite());
    Status f;
    if (*a->Next() == 0) {
      probe = std::move(a);
    } else {
      EXPECT_FALSE(a->End(Status::Ok(), &f));
    }
  }
  ASSERT_NE(probe, nullptr) << "no call probed the NAA whose back-off is over";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(CallOk(*c), 1u);
  Status final;
  EXPECT_FALSE(probe->End(DisconnectedError("still down"), &final));
  // Failed again: ejected for twice as long (200 ms).
  clock.now += 100ms;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(CallOk(*c), 1u);
  clock.now += 100ms;
  size_t got0 = 0;
  for (int i = 0; i < 4; ++i) got0 += CallOk(*c) == 0;
  EXPECT_EQ(got0, 2u);  // probed, back in rotation: every other call
  EXPECT_FALSE(c->Counters()[0].ejected);
  EXPECT_EQ(c->Counters()[0].ejections, 1u);  // one ejection, renewed by the failed probe
}

TEST(Channel, ErrorsOfTheCallDoNotEjectTheNaa) {
  auto c = Make(2, BalancePolicy::kRoundRobin);
  EXPECT_EQ(CallFail(*c, Status(StatusCode::kNaaError, "kernel said no").set_wire_code(7)), 0u);
  EXPECT_EQ(CallFail(*c, InvalidArgumentError("bad size")), 1u);
  for (const NaaCounters& n : c->Counters()) {
    EXPECT_FALSE(n.ejected);
    EXPECT_EQ(n.errors, 1u);
    EXPECT_EQ(n.failures, 0u);
  }
}

TEST(Channel, OnlyIdempotentCallsAreRetriedAfterTheyWereSent) {
  auto c = Make(3, BalancePolicy::kRoundRobin);
  // Not idempotent, failed mid-call: final, naming the NAA.
  {
    Channel::Attempts a(*c, "S.R", false, std::nullopt, Deadline::Infinite());
    const size_t i = *a.Next();
    Status final;
    EXPECT_FALSE(a.End(DisconnectedError("peer went away"), &final));
    EXPECT_EQ(final.code(), StatusCode::kDisconnected);
    EXPECT_NE(final.message().find("NAA " + c->naa(i).ToString()), std::string::npos)
        << final.ToString();
    EXPECT_EQ(a.attempts(), 1u);
  }
  // Not idempotent, but never sent (could not connect): goes elsewhere.
  {
    Channel::Attempts a(*c, "S.R", false, std::nullopt, Deadline::Infinite());
    const size_t first = *a.Next();
    Status final;
    EXPECT_TRUE(a.End(UnavailableError("connection refused"), &final));
    const size_t second = *a.Next();
    EXPECT_NE(second, first);
    EXPECT_FALSE(a.End(Status::Ok(), &final));
    EXPECT_TRUE(final.ok());
  }
  // Idempotent: each NAA once, then the last error.
  {
    Channel::Attempts a(*c, "S.R", true, std::nullopt, Deadline::Infinite());
    std::set<size_t> tried;
    Status final;
    tried.insert(*a.Next());
    EXPECT_TRUE(a.End(DisconnectedError("x"), &final));
    tried.insert(*a.Next());
    EXPECT_TRUE(a.End(TransportError("y"), &final));
    tried.insert(*a.Next());
    EXPECT_FALSE(a.End(DeadlineExceededError("z"), &final));
    EXPECT_EQ(tried.size(), 3u);
    EXPECT_EQ(final.code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(final.message().find("NAA "), std::string::npos);
  }
}

TEST(Channel, NoRetryOnceTheDeadlinePassed) {
  auto c = Make(2, BalancePolicy::kRoundRobin);
  Channel::Attempts a(*c, "S.R", true, std::nullopt, Deadline::Now());
  ASSERT_TRUE(a.Next().ok());
  Status final;
  EXPECT_FALSE(a.End(DeadlineExceededError("no answer"), &final));
  EXPECT_EQ(final.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a.attempts(), 1u);
}

TEST(Channel, AttemptTimeoutBoundsEachAttemptOfIdempotentRoutines) {
  ChannelOptions o;
  o.attempt_timeout = 50ms;
  auto c = *Channel::Create(Naas(2), o);
  const Deadline call = Deadline::After(1h);
  Channel::Attempts idem(*c, "S.R", true, std::nullopt, call);
  ASSERT_TRUE(idem.Next().ok());
  EXPECT_LT(idem.attempt_deadline().when(), call.when());
  Channel::Attempts other(*c, "S.R", false, std::nullopt, call);
  ASSERT_TRUE(other.Next().ok());
  EXPECT_EQ(other.attempt_deadline().when(), call.when());
}

TEST(Channel, AChannelOfOneAlwaysTriesItsNaaAndKeepsErrorsAsTheyAre) {
  auto c = Make(1, BalancePolicy::kRoundRobin);
  Channel::Attempts a(*c, "S.R", true, std::nullopt, Deadline::Infinite());
  ASSERT_EQ(*a.Next(), 0u);
  Status final;
  EXPECT_FALSE(a.End(DisconnectedError("peer went away"), &final));  // nowhere else to go
  EXPECT_EQ(final, DisconnectedError("peer went away"));
  EXPECT_TRUE(c->Counters()[0].ejected);
  EXPECT_EQ(CallOk(*c), 0u);  // ejected, but the only one: tried
  EXPECT_FALSE(c->Counters()[0].ejected);
}

TEST(Channel, AllEjectedStillTriesTheOneBackSoonest) {
  FakeClock clock;
  ChannelOptions o;
  o.clock = clock.Fn();
  auto c = *Channel::Create(Naas(2), o);
  EXPECT_EQ(CallFail(*c, UnavailableError("a")), 0u);
  clock.now += 1ms;
  EXPECT_EQ(CallFail(*c, UnavailableError("b")), 1u);
  EXPECT_EQ(CallOk(*c), 0u);  // ejected first, back first
}

TEST(Channel, ResolverRefreshAddsAndRetiresNaas) {
  std::vector<NaaAddress> answer = Naas(2);
  auto c = Channel::FromResolver([&]() -> Result<std::vector<NaaAddress>> { return answer; });
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->size(), 2u);
  answer = {Naas(3)[1], Naas(3)[2]};
  ASSERT_TRUE((*c)->Refresh().ok());
  ASSERT_EQ((*c)->size(), 3u);
  EXPECT_TRUE((*c)->Counters()[0].retired);
  for (int i = 0; i < 6; ++i) EXPECT_NE(CallOk(**c), 0u);
  answer = {};
  EXPECT_EQ((*c)->Refresh().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*Channel::Create(Naas(1)))->Refresh().code(), StatusCode::kFailedPrecondition);
}

// NAA_LOCAL_IP: FromEnvironment takes it (an explicit local_address wins);
// every constructor checks it is an IP address of this host.
TEST(Channel, FromEnvironmentTakesNaaLocalIp) {
  setenv("NAA_SPEC", "127.0.0.1:5000:1:3,127.0.0.1:5001:1:3", 1);
  unsetenv("NAA_LOCAL_IP");
  auto c = Channel::FromEnvironment({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->options().local_address, "");
  setenv("NAA_LOCAL_IP", "127.0.0.1", 1);
  c = Channel::FromEnvironment({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->options().local_address, "127.0.0.1");
  ChannelOptions o;
  o.local_address = "127.0.0.2";
  c = Channel::FromEnvironment({}, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->options().local_address, "127.0.0.2");
  setenv("NAA_LOCAL_IP", "192.0.2.1", 1);  // TEST-NET-1: no host's address
  c = Channel::FromEnvironment({});
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("NAA_LOCAL_IP=192.0.2.1: not an address of this host"),
            std::string::npos)
      << c.status().ToString();
  unsetenv("NAA_LOCAL_IP");
  unsetenv("NAA_SPEC");
}

TEST(Channel, ALocalAddressMustBeAnIpAddressOfThisHost) {
  ChannelOptions o;
  o.local_address = "nohost";
  auto c = Channel::Create(Naas(2), o);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("NAA_LOCAL_IP=nohost: not an IPv4 or IPv6 address"),
            std::string::npos)
      << c.status().ToString();
  o.local_address = "192.0.2.1";
  EXPECT_EQ(Channel::FromNaaSpec("127.0.0.1:5000:1:3", {}, o).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Channel::FromResolver([] { return Result<std::vector<NaaAddress>>(Naas(1)); }, o)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  o.local_address = "127.0.0.1";
  EXPECT_TRUE(Channel::Create(Naas(2), o).ok());
}

// A deadline that passed while the call waited for a free session of the
// NAA's client: the attempt ends, the NAA's health and counts stay.
TEST(Channel, EndWithoutNaaLeavesTheNaaAlone) {
  auto c = Make(2, BalancePolicy::kKeyAffinity);
  Channel::Attempts a(*c, "S.R", true, 7, Deadline::Infinite());
  auto naa = a.Next();
  ASSERT_TRUE(naa.ok());
  Status final;
  a.EndWithoutNaa(DeadlineExceededError("S.R: no free session"), &final);
  EXPECT_EQ(final.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(final.message().find("NAA " + c->naa(*naa).ToString()), std::string::npos)
      << final.ToString();
  const NaaCounters n = c->Counters()[*naa];
  EXPECT_EQ(n.calls, 1u);
  EXPECT_EQ(n.errors, 0u);
  EXPECT_EQ(n.failures, 0u);
  EXPECT_EQ(n.in_flight, 0u);
  EXPECT_FALSE(n.ejected);
}

TEST(Channel, AbandonedAttemptIsNoLongerInFlight) {
  auto c = Make(1, BalancePolicy::kRoundRobin);
  {
    Channel::Attempts a(*c, "S.R", false, std::nullopt, Deadline::Infinite());
    ASSERT_TRUE(a.Next().ok());
    EXPECT_EQ(c->Counters()[0].in_flight, 1u);
  }
  EXPECT_EQ(c->Counters()[0].in_flight, 0u);
}

}  // namespace
}  // namespace naarpc
