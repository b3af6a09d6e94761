// A generated client over a naarpc::Channel against real software NAAs on
// the emulated transport: each policy, key affinity, an NAA that dies or
// drops its answers (idempotent calls move, others fail naming the NAA),
// deadlines covering retries, async calls, and a channel of one behaving as
// the plain client. Behaviour only: which NAA served each call, statuses,
// counters.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "naarpc/channel.h"
#include "naarpc/naa_server.h"
#include "naarpc/stats_registry.h"
#include "naarpc/transport_factory.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/emulated/fault_injection.h"
#include "tests/channel/where.naa.h"

namespace {

using naarpc::BalancePolicy;
using naarpc::Channel;
using naarpc::ChannelOptions;
using naarpc::Deadline;
using naarpc::NaaAddress;
using naarpc::Status;
using naarpc::StatusCode;
namespace ch = naarpc::testing::channel;
using namespace std::chrono_literals;

class WhereImpl final : public ch::WhereService {
 public:
  explicit WhereImpl(uint32_t id) : id_(id) {}
  ch::WhereError Which(const naarpc::NaaCall&, uint32_t x, uint32_t& id, uint32_t& echo) override {
    id = id_;
    echo = x;
    return ch::WhereError::kOk;
  }
  ch::WhereError Count(const naarpc::NaaCall&, uint32_t, uint32_t& id) override {
    runs.fetch_add(1);
    id = id_;
    return ch::WhereError::kOk;
  }
  std::atomic<int> runs{0};

 private:
  const uint32_t id_;
};

// A software NAA with its own transport, whose answers can be made to drop
// the connection (the NAA "dies" after running the kernel).
struct Naa {
  explicit Naa(uint32_t id) : impl(id) {
    naarpc::EmulatedOptions o;
    faults = std::make_shared<naarpc::ScriptedFaultInjector>();
    naarpc::FaultRule rule;
    rule.listener_side = true;
    rule.opcode = naarpc::WorkOpcode::kRdmaWriteWithImm;
    rule.match = [this](const naarpc::FaultPoint&) { return drop_answers.load(); };
    rule.times = -1;
    rule.action = naarpc::FaultAction::Drop();
    faults->AddRule(std::move(rule));
    o.faults = faults;
    transport = naarpc::NewEmulatedTransport(o);
    naarpc::ServerOptions so;
    so.stats = stats;
    auto s = naarpc::NaaServer::Start(*transport, "127.0.0.1", 0, impl, so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server = std::move(*s);
    port = server->port();
  }
  ~Naa() { Kill(); }
  void Kill() { server.reset(); }  // the port refuses connections from now on
  NaaAddress address() const { return {"127.0.0.1", port}; }

  WhereImpl impl;
  std::atomic<bool> drop_answers{false};
  std::shared_ptr<naarpc::ScriptedFaultInjector> faults;
  // The NAA's statistics: the peer of each call is the host's address.
  std::shared_ptr<naarpc::StatsRegistry> stats = std::make_shared<naarpc::StatsRegistry>();
  std::unique_ptr<naarpc::Transport> transport;
  std::unique_ptr<naarpc::NaaServer> server;
  uint16_t port = 0;
};

// A port that accepts TCP connections into its backlog and never answers:
// an NAA that stopped answering.
struct FrozenNaa {
  FrozenNaa() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd, 16), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~FrozenNaa() { close(fd); }
  NaaAddress address() const { return {"127.0.0.1", port}; }
  int fd = -1;
  uint16_t port = 0;
};

class ChannelE2e : public ::testing::Test {
 protected:
  void Start(int n) {
    for (int i = 0; i < n; ++i) naas_.push_back(std::make_unique<Naa>(static_cast<uint32_t>(i)));
  }
  // Ejections last an hour here: no test waits for one to end (channel_test
  // does, on a fake clock), and a slow machine must not end one early.
  static ChannelOptions LongEjections(ChannelOptions o = {}) {
    o.eject_base = std::chrono::hours(1);
    o.eject_max = std::chrono::hours(1);
    return o;
  }
  std::shared_ptr<Channel> MakeChannel(ChannelOptions o = LongEjections()) {
    std::vector<NaaAddress> a;
    for (auto& n : naas_) a.push_back(n->address());
    auto c = Channel::Create(a, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  }
  // Which() through `client`: the id of the NAA that answered, or -1.
  static int Which(ch::WhereClientInterface& client, uint32_t x = 7) {
    uint32_t id = 99, echo = 0;
    Status s = client.Which(x, &id, &echo);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(echo, x);
    return s.ok() ? static_cast<int>(id) : -1;
  }

  std::unique_ptr<naarpc::Transport> transport_ = naarpc::NewEmulatedTransport();
  std::vector<std::unique_ptr<Naa>> naas_;
};

TEST_F(ChannelE2e, RoundRobinSpreadsCallsEvenly) {
  Start(3);
  auto channel = MakeChannel();
  ch::WhereChannelClient client(*transport_, channel);
  std::map<int, int> by_naa;
  for (int i = 0; i < 9; ++i) ++by_naa[Which(client)];
  EXPECT_EQ(by_naa, (std::map<int, int>{{0, 3}, {1, 3}, {2, 3}}));
  for (const naarpc::NaaCounters& c : channel->Counters()) {
    EXPECT_EQ(c.calls, 3u);
    EXPECT_EQ(c.errors, 0u);
    EXPECT_EQ(c.in_flight, 0u);
    EXPECT_FALSE(c.ejected);
  }
}

TEST_F(ChannelE2e, LeastOutstandingUsesEveryNaaForConcurrentCalls) {
  Start(2);
  ChannelOptions o;
  o.policy = BalancePolicy::kLeastOutstanding;
  auto channel = MakeChannel(LongEjections(o));
  ch::WhereChannelClient client(*transport_, channel);
  std::vector<uint32_t> ids(40), echoes(40);
  std::vector<std::future<Status>> f;
  for (uint32_t i = 0; i < 40; ++i) f.push_back(client.WhichAsync(i, &ids[i], &echoes[i]));
  for (auto& x : f) EXPECT_TRUE(x.get().ok());
  std::set<uint32_t> used(ids.begin(), ids.end());
  EXPECT_EQ(used, (std::set<uint32_t>{0, 1}));
  for (uint32_t i = 0; i < 40; ++i) EXPECT_EQ(echoes[i], i);
  EXPECT_EQ(channel->Counters()[0].calls + channel->Counters()[1].calls, 40u);
}

TEST_F(ChannelE2e, KeyAffinityKeepsAKeyOnOneNaaAndMovesOnlyTheDeadNaasKeys) {
  Start(3);
  ChannelOptions o;
  o.policy = BalancePolicy::kKeyAffinity;
  auto channel = MakeChannel(LongEjections(o));
  ch::WhereChannelClient client(*transport_, channel);
  std::map<uint64_t, int> owner;
  for (uint64_t key = 0; key < 30; ++key) {
    auto keyed = client.with_key(key);
    owner[key] = Which(keyed);
    EXPECT_EQ(Which(keyed), owner[key]);
  }
  std::set<int> used;
  for (auto& [k, o2] : owner) used.insert(o2);
  EXPECT_EQ(used.size(), 3u);
  naas_[1]->Kill();
  for (uint64_t key = 0; key < 30; ++key) {
    auto keyed = client.with_key(key);
    const int now = Which(keyed);  // idempotent: a call that meets NAA 1 moves
    if (owner[key] != 1) {
      EXPECT_EQ(now, owner[key]) << "key " << key;
    } else {
      EXPECT_NE(now, 1);
    }
  }
  EXPECT_TRUE(channel->Counters()[1].ejected);
}

TEST_F(ChannelE2e, IdempotentCallsMoveOffAKilledNaaAndNoneIsLost) {
  Start(2);
  auto channel = MakeChannel();
  ch::WhereChannelClient client(*transport_, channel);
  EXPECT_EQ(Which(client), 0);
  EXPECT_EQ(Which(client), 1);  // a session to each NAA is open
  naas_[0]->Kill();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Which(client), 1);
  auto c = channel->Counters();
  EXPECT_TRUE(c[0].ejected);
  EXPECT_GE(c[0].failures, 1u);
  EXPECT_EQ(c[1].errors, 0u);
}

// A dead NAA refuses connections. Alone, a client retries a refusal (the NAA
// may be starting); in a channel of several the call moves on at once,
// instead of spending its deadline on connect retries (here the client's
// transport and session would retry for longer than the call's deadline).
TEST_F(ChannelE2e, ARefusingNaaIsLeftAtOnceForAnotherOne) {
  Start(2);
  naas_[0]->Kill();
  naarpc::EmulatedOptions patient;
  patient.connect_retries = 1'000'000;
  patient.connect_retry_delay = 1s;
  auto transport = naarpc::NewEmulatedTransport(patient);
  auto channel = MakeChannel();
  naarpc::codegen::StubOptions stub;
  stub.session.connect_timeout = std::chrono::hours(1);
  ch::WhereChannelClient client(*transport, channel, stub);
  uint32_t id = 99, echo = 0;
  // Round robin: NAA 0 first. Count is not idempotent, but a refused call
  // was never sent, so it moves too.
  Status s = client.Count(6, &id, Deadline::After(60s));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(id, 1u);
  s = client.Which(5, &id, &echo, Deadline::After(60s));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(id, 1u);
  EXPECT_GE(channel->Counters()[0].failures, 1u);
  EXPECT_EQ(naas_[1]->impl.runs.load(), 1);
}

TEST_F(ChannelE2e, AnNaaThatDiesMidCallFailsOtherCallsNamingIt) {
  Start(2);
  auto channel = MakeChannel();
  ch::WhereChannelClient client(*transport_, channel);
  naas_[0]->drop_answers = true;  // runs the kernel, then the connection drops
  uint32_t id = 99;
  Status s = client.Count(1, &id);  // round robin: NAA 0 first
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Channel::IsNaaFailure(s)) << s.ToString();
  EXPECT_NE(s.message().find("NAA " + naas_[0]->address().ToString()), std::string::npos)
      << s.ToString();
  EXPECT_EQ(naas_[0]->impl.runs.load(), 1);  // it ran there: not run again elsewhere
  EXPECT_EQ(naas_[1]->impl.runs.load(), 0);
  EXPECT_TRUE(channel->Counters()[0].ejected);
  // The next calls go to the healthy NAA while NAA 0 is ejected.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.Count(1, &id).ok());
    EXPECT_EQ(id, 1u);
  }
  // The idempotent routine is retried: the same failure costs no call.
  naas_[1]->drop_answers = true;
  naas_[0]->drop_answers = false;
  uint32_t echo = 0;
  s = client.Which(5, &id, &echo);
  ASSERT_TRUE(s.ok()) << s.ToString();  // NAA 1 dropped it; NAA 0 (panic: both ejected) answered
  EXPECT_EQ(id, 0u);
  EXPECT_EQ(echo, 5u);
}

TEST_F(ChannelE2e, AsyncCallsRetryOnAnotherNaa) {
  Start(2);
  auto channel = MakeChannel();
  ch::WhereChannelClient client(*transport_, channel);
  naas_[0]->drop_answers = true;
  std::vector<uint32_t> ids(20, 99), echoes(20);
  std::vector<std::future<Status>> f;
  for (uint32_t i = 0; i < 20; ++i) f.push_back(client.WhichAsync(i, &ids[i], &echoes[i]));
  for (uint32_t i = 0; i < 20; ++i) {
    Status s = f[i].get();
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    EXPECT_EQ(ids[i], 1u);
    EXPECT_EQ(echoes[i], i);
  }
  EXPECT_GE(channel->Counters()[0].failures, 1u);
  // Not idempotent: the calls that met NAA 0 fail naming it; none is run twice.
  std::vector<uint32_t> cids(20, 99);
  std::vector<std::future<Status>> g;
  naas_[0]->drop_answers = true;
  for (uint32_t i = 0; i < 20; ++i) g.push_back(client.CountAsync(i, &cids[i]));
  int failed = 0;
  for (uint32_t i = 0; i < 20; ++i) {
    Status s = g[i].get();
    if (!s.ok()) {
      ++failed;
      EXPECT_NE(s.message().find("NAA " + naas_[0]->address().ToString()), std::string::npos)
          << s.ToString();
    } else {
      EXPECT_EQ(cids[i], 1u);
    }
  }
  EXPECT_EQ(naas_[0]->impl.runs.load() + naas_[1]->impl.runs.load(), 20);
  EXPECT_EQ(naas_[0]->impl.runs.load(), failed);
}

TEST_F(ChannelE2e, TheDeadlineCoversEveryAttempt) {
  Start(1);
  FrozenNaa frozen;
  {
    // The first attempt (the frozen NAA) takes the whole deadline: no retry.
    auto c = Channel::Create({frozen.address(), naas_[0]->address()}, LongEjections());
    ASSERT_TRUE(c.ok());
    ch::WhereChannelClient client(*transport_, *c);
    uint32_t id = 99, echo = 0;
    Status s = client.Which(1, &id, &echo, Deadline::After(300ms));
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.message().find("NAA " + frozen.address().ToString()), std::string::npos)
        << s.ToString();
    EXPECT_EQ((*c)->Counters()[1].calls, 0u);
  }
  {
    // A bound per attempt leaves time to go to the other NAA.
    ChannelOptions o;
    o.attempt_timeout = 300ms;
    auto c = Channel::Create({frozen.address(), naas_[0]->address()}, LongEjections(o));
    ASSERT_TRUE(c.ok());
    ch::WhereChannelClient client(*transport_, *c);
    uint32_t id = 99, echo = 0;
    Status s = client.Which(1, &id, &echo, Deadline::After(60s));
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(id, 0u);
    auto n = (*c)->Counters();
    EXPECT_EQ(n[0].failures, 1u);
    EXPECT_TRUE(n[0].ejected);
    EXPECT_EQ(n[1].calls, 1u);
  }
}

TEST_F(ChannelE2e, AChannelOfOneBehavesAsThePlainClient) {
  Start(1);
  auto channel = MakeChannel();
  ch::WhereChannelClient over_channel(*transport_, channel);
  ch::WhereClient plain(*transport_, "127.0.0.1", naas_[0]->port);
  EXPECT_EQ(Which(over_channel), 0);
  EXPECT_EQ(Which(plain), 0);
  // Argument checks, NAA failures: the same statuses, word for word.
  naas_[0]->drop_answers = true;
  uint32_t id = 0;
  Status a = plain.Count(1, &id);
  Status b = over_channel.Count(1, &id);
  EXPECT_FALSE(a.ok());
  EXPECT_EQ(a.code(), b.code()) << a.ToString() << " vs " << b.ToString();
  EXPECT_EQ(a.message(), b.message());
  EXPECT_EQ(naas_[0]->impl.runs.load(), 2);  // once each: not retried
  naas_[0]->drop_answers = false;
  // Ejected, but the only NAA: tried, and back.
  EXPECT_EQ(Which(over_channel), 0);
  EXPECT_FALSE(channel->Counters()[0].ejected);
  naas_[0]->Kill();
  a = plain.Count(1, &id);
  b = over_channel.Count(1, &id);
  EXPECT_EQ(a.code(), b.code()) << a.ToString() << " vs " << b.ToString();
  EXPECT_EQ(a.message(), b.message());
}

TEST_F(ChannelE2e, FromNaaSpecHonoursEveryEntry) {
  Start(2);
  const std::string spec = "127.0.0.1:" + std::to_string(naas_[0]->port) + ":1:3,127.0.0.1:" +
                           std::to_string(naas_[1]->port) + ":1:3,127.0.0.1:" +
                           std::to_string(naas_[1]->port) + ":2:2";
  const uint8_t codes[] = {ch::WhereClient::kWhichFunctionCode, ch::WhereClient::kCountFunctionCode};
  auto c = Channel::FromNaaSpec(spec, codes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ch::WhereChannelClient client(*transport_, *c);
  std::set<int> used;
  for (int i = 0; i < 4; ++i) used.insert(Which(client));
  EXPECT_EQ(used, (std::set<int>{0, 1}));
}

TEST_F(ChannelE2e, DestroyingTheClientWithCallsInFlightEndsThem) {
  Start(2);
  auto channel = MakeChannel();
  std::vector<std::future<Status>> f;
  std::vector<uint32_t> ids(50), echoes(50);
  {
    ch::WhereChannelClient client(*transport_, channel);
    for (uint32_t i = 0; i < 50; ++i) f.push_back(client.WhichAsync(i, &ids[i], &echoes[i]));
  }
  for (auto& x : f) {
    Status s = x.get();
    EXPECT_TRUE(s.ok() || s.code() == StatusCode::kCancelled) << s.ToString();
  }
  for (const naarpc::NaaCounters& c : channel->Counters()) EXPECT_EQ(c.in_flight, 0u);
}

// NAA_LOCAL_IP (ChannelOptions::local_address): the channel's connections
// originate from it, as the NAAs see.
TEST_F(ChannelE2e, ConnectionsOriginateFromTheLocalAddress) {
  Start(2);
  auto peers = [](Naa& naa) {
    std::set<std::string> out;
    for (const auto& r : naa.stats->Take()) out.insert(r.peer);
    return out;
  };
  {
    auto channel = MakeChannel();
    ch::WhereChannelClient client(*transport_, channel);
    EXPECT_EQ(Which(client), 0);
    EXPECT_EQ(Which(client), 1);
  }
  for (auto& n : naas_) EXPECT_EQ(peers(*n), (std::set<std::string>{"127.0.0.1"}));
  ChannelOptions o;
  o.local_address = "127.0.0.2";
  auto channel = MakeChannel(LongEjections(o));
  ch::WhereChannelClient client(*transport_, channel);
  EXPECT_EQ(Which(client), 0);
  EXPECT_EQ(Which(client), 1);
  for (auto& n : naas_) {
    EXPECT_EQ(peers(*n), (std::set<std::string>{"127.0.0.1", "127.0.0.2"}));
  }
}

// A transport that cannot choose its local address (Transport's default).
class RouteOnlyTransport final : public naarpc::Transport {
 public:
  explicit RouteOnlyTransport(naarpc::Transport& inner) : inner_(inner) {}
  std::string_view name() const override { return "route-only"; }
  using naarpc::Transport::Connect;
  naarpc::Result<std::unique_ptr<naarpc::Connection>> Connect(
      const std::string& host, uint16_t port, Deadline deadline,
      const naarpc::ConnectOptions& options) override {
    return inner_.Connect(host, port, deadline, options);
  }
  naarpc::Result<std::unique_ptr<naarpc::Listener>> Listen(const std::string& host,
                                                           uint16_t port) override {
    return inner_.Listen(host, port);
  }

 private:
  naarpc::Transport& inner_;
};

TEST_F(ChannelE2e, ALocalAddressTheTransportCannotUseFailsEveryCallNamingIt) {
  Start(2);
  ChannelOptions o;
  o.local_address = "127.0.0.2";
  auto channel = MakeChannel(LongEjections(o));
  RouteOnlyTransport route_only(*transport_);
  ch::WhereChannelClient client(route_only, channel);
  uint32_t id = 99, echo = 0;
  Status s = client.Which(1, &id, &echo);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("local address (NAA_LOCAL_IP) 127.0.0.2"), std::string::npos)
      << s.ToString();
  s = client.CountAsync(1, &id).get();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  // Not the NAAs' failure: nothing counted against them.
  for (const naarpc::NaaCounters& c : channel->Counters()) {
    EXPECT_EQ(c.errors, 0u);
    EXPECT_FALSE(c.ejected);
    EXPECT_EQ(c.in_flight, 0u);
  }
  EXPECT_EQ(naas_[0]->impl.runs.load() + naas_[1]->impl.runs.load(), 0);
}

}  // namespace
