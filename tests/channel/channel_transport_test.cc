// A channel over two software NAAs in processes of their own (where_peer),
// on both transports (the verbs cases run in the Soft-RoCE guest,
// //tools/rxe-vm:verbs_in_guest_test), with each policy: every NAA serves;
// an NAA killed (SIGKILL) while calls are held on both moves its idempotent
// calls to the other NAA, none lost, and fails its other calls naming it;
// a deadline that passes while a call waits for a free session of its NAA
// is the caller's, not a failure of the NAA; the connections go from the
// channel's local address (NAA_LOCAL_IP). Behaviour only: which NAA
// answered, statuses, counters; the peers say when calls are held.
#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "naarpc/channel.h"
#include "tests/channel/channel_peer.h"
#include "tests/channel/where.naa.h"
#include "tests/testing/peer_process.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

namespace ch = naarpc::testing::channel;
using naarpc::testing::kHold;
using naarpc::testing::PeerProcess;
using namespace std::chrono_literals;

// Hang guard of every call: the tests never wait for it to pass.
Deadline Guard() { return Deadline::After(120s); }

// A where_peer process: an NAA of the Where service.
struct PeerNaa {
  std::unique_ptr<PeerProcess> process;
  NaaAddress address;
};

class ChannelTransportBase {
 protected:
  // False (and a failure recorded) if a peer did not start.
  bool StartNaas(const std::string& transport, int n) {
    for (int i = 0; i < n; ++i) {
      PeerNaa naa;
      naa.process = PeerProcess::Start("where_peer",
                                       {"--transport=" + transport, "--address=" + tt_.address,
                                        "--id=" + std::to_string(i)},
                                       "tests/channel");
      if (!naa.process) return false;
      std::string line;
      if (!naa.process->ExpectPrefix("port ", line)) {
        ADD_FAILURE() << "NAA " << i << " did not start";
        return false;
      }
      naa.address = {tt_.address, uint16_t(std::stoi(line.substr(5)))};
      naas_.push_back(std::move(naa));
    }
    return true;
  }
  std::shared_ptr<Channel> MakeChannel(BalancePolicy policy) {
    std::vector<NaaAddress> a;
    for (auto& n : naas_) a.push_back(n.address);
    ChannelOptions o;
    o.policy = policy;
    auto c = Channel::Create(a, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : nullptr;
  }
  // Which(x) through `client`: the id of the NAA that answered, or -1.
  static int Which(ch::WhereClientInterface& client, uint32_t x = 7) {
    uint32_t id = 99, echo = 0;
    Status s = client.Which(x, &id, &echo, Guard());
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(echo, x);
    return s.ok() ? static_cast<int>(id) : -1;
  }

  testing::TestTransport tt_;
  std::vector<PeerNaa> naas_;
};

using Param = std::tuple<std::string, BalancePolicy>;

class ChannelTransportTest : public ChannelTransportBase, public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    tt_ = testing::MakeTestTransport(std::get<0>(GetParam()));
    if (!tt_.transport) GTEST_SKIP() << tt_.unavailable;
    ASSERT_TRUE(StartNaas(std::get<0>(GetParam()), 2));
    channel_ = MakeChannel(policy());
    ASSERT_NE(channel_, nullptr);
    client_ = std::make_unique<ch::WhereChannelClient>(*tt_.transport, channel_);
  }
  void TearDown() override {
    client_.reset();
    naas_.clear();
  }
  BalancePolicy policy() const { return std::get<1>(GetParam()); }
  // The client whose i-th call of a run goes to NAA i % 2: with key
  // affinity, keyed with a key NAA i % 2 owns (found by calling); round
  // robin and least outstanding (while the calls before are all in flight)
  // alternate by themselves from a fresh channel.
  ch::WhereChannelClient For(int i) {
    if (policy() != BalancePolicy::kKeyAffinity) return *client_;
    while (keys_.size() < 2) {
      const uint64_t key = next_key_++;
      auto keyed = client_->with_key(key);
      keys_.emplace(Which(keyed), key);
      if (::testing::Test::HasFailure()) break;
    }
    return client_->with_key(keys_[i % 2]);
  }

  std::shared_ptr<Channel> channel_;
  std::unique_ptr<ch::WhereChannelClient> client_;
  std::map<int, uint64_t> keys_;  // NAA -> a key it owns
  uint64_t next_key_ = 0;
};

TEST_P(ChannelTransportTest, EveryNaaServes) {
  std::map<int, int> by_naa;
  for (int i = 0; i < 6; ++i) {
    auto client = For(i);
    ++by_naa[Which(client)];
  }
  EXPECT_EQ(by_naa.size(), 2u);
  EXPECT_EQ(by_naa.count(-1), 0u);
  if (policy() == BalancePolicy::kKeyAffinity) {
    for (auto& [naa, key] : keys_) {
      auto keyed = client_->with_key(key);
      EXPECT_EQ(Which(keyed), naa);
    }
  }
  for (const NaaCounters& c : channel_->Counters()) {
    EXPECT_EQ(c.errors, 0u);
    EXPECT_EQ(c.in_flight, 0u);
  }
}

TEST_P(ChannelTransportTest, AnNaaKilledMidRunMovesIdempotentCallsAndFailsOthersNamingIt) {
  if (policy() == BalancePolicy::kKeyAffinity) For(0);  // finds the keys first
  // Eight calls held on the NAAs, four on each: Which, Which, Count, Count,
  // ... with the i-th on NAA i % 2.
  struct Held {
    bool idempotent;
    uint32_t id = 99, echo = 0;
    std::future<Status> done;
  };
  std::vector<Held> held(8);
  for (int i = 0; i < 8; ++i) {
    Held& h = held[i];
    h.idempotent = (i / 2) % 2 == 0;
    auto client = For(i);
    h.done = h.idempotent ? client.WhichAsync(kHold, &h.id, &h.echo, Guard())
                          : client.CountAsync(kHold, &h.id, Guard());
  }
  // Both NAAs hold calls (where each call went is the policy's, but a
  // connection that failed under load moves a call, so it is not assumed).
  std::string line;
  for (PeerNaa& n : naas_) ASSERT_TRUE(n.process->ExpectPrefix("held ", line)) << n.address.ToString();
  int held_counts_on_dead = line == "held Count" ? 1 : 0;
  // NAA 1 dies with the calls it holds; NAA 0 lets its calls (and those
  // that move to it) answer.
  const std::string dead = "NAA " + naas_[1].address.ToString();
  naas_[1].process->Kill(SIGKILL);
  naas_[1].process->Wait();
  while (naas_[1].process->ExpectPrefix("held Count", line)) ++held_counts_on_dead;  // to EOF
  naas_[0].process->Send("release");
  int failed = 0;
  for (int i = 0; i < 8; ++i) {
    Held& h = held[i];
    Status s = h.done.get();
    if (h.idempotent) {  // none lost: each answered by NAA 0
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
      EXPECT_EQ(h.id, 0u) << i;
      EXPECT_EQ(h.echo, kHold) << i;
    } else if (!s.ok()) {  // a Count that reached NAA 1: not run again
      ++failed;
      EXPECT_TRUE(Channel::IsNaaFailure(s)) << i << ": " << s.ToString();
      EXPECT_NE(s.message().find(dead), std::string::npos) << i << ": " << s.ToString();
    } else {
      EXPECT_EQ(h.id, 0u) << i;
    }
  }
  // Every Count NAA 1 was running failed (2 when no connection failed).
  EXPECT_GE(failed, held_counts_on_dead);
  EXPECT_LE(failed, 4);
  auto c = channel_->Counters();
  EXPECT_TRUE(c[1].ejected);
  EXPECT_GE(c[1].failures, 1u);
  EXPECT_EQ(c[0].errors, 0u);
  // The run goes on, on NAA 0, for both kinds of routine.
  for (int i = 0; i < 4; ++i) {
    auto client = For(i);
    EXPECT_EQ(Which(client), 0) << i;
    uint32_t id = 99;
    Status s = client.Count(1, &id, Guard());
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    EXPECT_EQ(id, 0u);
  }
  for (const NaaCounters& n : channel_->Counters()) EXPECT_EQ(n.in_flight, 0u);
}

std::string PolicyName(BalancePolicy p) {
  switch (p) {
    case BalancePolicy::kRoundRobin:
      return "round_robin";
    case BalancePolicy::kLeastOutstanding:
      return "least_outstanding";
    case BalancePolicy::kKeyAffinity:
      return "key_affinity";
  }
  return "unknown";
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ChannelTransportTest,
    ::testing::Combine(::testing::Values("emulated", "verbs"),
                       ::testing::Values(BalancePolicy::kRoundRobin,
                                         BalancePolicy::kLeastOutstanding,
                                         BalancePolicy::kKeyAffinity)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + PolicyName(std::get<1>(info.param));
    });

// Two NAAs, on each transport.
class ChannelPairTest : public ChannelTransportBase,
                            public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tt_ = testing::MakeTestTransport(GetParam());
    if (!tt_.transport) GTEST_SKIP() << tt_.unavailable;
    ASSERT_TRUE(StartNaas(GetParam(), 2));
  }
  void TearDown() override { naas_.clear(); }
};

// A call whose deadline passes while it waits for a free session of its
// NAA's client (all in use) ends with kDeadlineExceeded, but the NAA did not
// fail: it stays in rotation, with no error counted.
TEST_P(ChannelPairTest, ADeadlinePassedWaitingForASessionIsNotTheNaas) {
  auto channel = MakeChannel(BalancePolicy::kKeyAffinity);
  ASSERT_NE(channel, nullptr);
  codegen::StubOptions options;
  options.max_sessions_per_routine = 1;
  ch::WhereChannelClient client(*tt_.transport, channel, options);
  auto keyed = client.with_key(42);
  const int owner = Which(keyed);
  ASSERT_GE(owner, 0);
  // The one session of Count on the owner is held...
  uint32_t held_id = 99;
  std::future<Status> held = keyed.CountAsync(kHold, &held_id, Guard());
  ASSERT_TRUE(naas_[owner].process->Expect("held Count"));
  // ... so these wait for it until their deadline, blocking and async.
  uint32_t id = 99;
  Status s = keyed.Count(1, &id, Deadline::After(300ms));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("no free session"), std::string::npos) << s.ToString();
  s = keyed.CountAsync(1, &id, Deadline::After(300ms)).get();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("no free session"), std::string::npos) << s.ToString();
  NaaCounters c = channel->Counters()[owner];
  EXPECT_EQ(c.errors, 0u);
  EXPECT_EQ(c.failures, 0u);
  EXPECT_EQ(c.ejections, 0u);
  EXPECT_FALSE(c.ejected);
  naas_[owner].process->Send("release");
  ASSERT_TRUE(held.get().ok());
  EXPECT_EQ(held_id, uint32_t(owner));
  // Still in rotation: the key stays on its NAA.
  EXPECT_EQ(Which(keyed), owner);
  ASSERT_TRUE(keyed.Count(1, &id, Guard()).ok());
  EXPECT_EQ(id, uint32_t(owner));
}

// NAA_LOCAL_IP (ChannelOptions::local_address): the clients connect from
// it, through Transport::WithLocalAddress; on verbs an address no RDMA
// device has fails every call naming it, and no NAA is blamed.
TEST_P(ChannelPairTest, CallsGoFromTheLocalAddress) {
  ChannelOptions o;
  o.local_address = tt_.address;
  std::vector<NaaAddress> a = {naas_[0].address, naas_[1].address};
  auto channel = Channel::Create(a, o);
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  ch::WhereChannelClient client(*tt_.transport, *channel);
  std::set<int> used;
  for (int i = 0; i < 4; ++i) used.insert(Which(client));
  EXPECT_EQ(used, (std::set<int>{0, 1}));
  if (GetParam() != "verbs") return;
  o.local_address = "127.0.0.1";  // loopback: no RDMA device's
  auto loopback = Channel::Create(a, o);
  ASSERT_TRUE(loopback.ok()) << loopback.status().ToString();
  ch::WhereChannelClient unusable(*tt_.transport, *loopback);
  uint32_t id = 99, echo = 0;
  Status s = unusable.Which(1, &id, &echo, Guard());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("local address (NAA_LOCAL_IP) 127.0.0.1"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("no RDMA device has this address"), std::string::npos)
      << s.ToString();
  for (const NaaCounters& c : (*loopback)->Counters()) {
    EXPECT_EQ(c.errors, 0u);
    EXPECT_FALSE(c.ejected);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ChannelPairTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
