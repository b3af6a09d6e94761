// Helpers of the emulated transport's tests (emulated_*_test.cc): a
// connected pair, registered buffers, work requests, polling loops.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TEST_UTIL_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "tests/testing/connection_helpers.h"
#include "tests/testing/hang_guard.h"
#include "tests/testing/notify_loop.h"

namespace naarpc {
namespace emulated_testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Hang guard: the deadline of waits that end by themselves (an accept, a
// connect, completions on their way, a connection going down). It times
// nothing: it only turns a hang into a failure, and is generous so that no
// loaded machine or sanitizer ever reaches it. Tests assert behaviour, never
// how long something took (speed belongs in bench/).
inline constexpr auto kTimeout = 60s;

// Hang guard for a call nothing can interrupt: runs `f` on a thread of its
// own and returns its result, or nullopt if it has not returned within
// kTimeout (the test then fails instead of hanging; the thread is left
// behind, so `f` must own or share everything it uses).
template <typename F>
std::optional<std::invoke_result_t<F>> ReturnsWithinHangGuard(F f) {
  using R = std::invoke_result_t<F>;
  auto result = std::make_shared<std::promise<R>>();
  std::future<R> fut = result->get_future();
  std::thread([f = std::move(f), result]() mutable { result->set_value(f()); }).detach();
  if (fut.wait_for(kTimeout) != std::future_status::ready) return std::nullopt;
  return fut.get();
}

struct Pair {
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> client;  // connecting side
  std::unique_ptr<Connection> server;  // accepted side
};

inline Pair MakePair(Transport& t, const std::string& listen_host = "127.0.0.1",
              const std::string& connect_host = "localhost") {
  Pair p;
  auto l = t.Listen(listen_host, 0);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return p;
  p.listener = std::move(*l);
  std::optional<Result<std::unique_ptr<Connection>>> accepted;
  std::thread th([&] { accepted.emplace(p.listener->Accept(Deadline::After(kTimeout))); });
  auto c = t.Connect(connect_host, p.listener->port(), Deadline::After(kTimeout));
  th.join();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(accepted->ok()) << accepted->status().ToString();
  if (c.ok()) p.client = std::move(*c);
  if (accepted->ok()) p.server = std::move(**accepted);
  return p;
}

inline void FillPattern(std::vector<uint8_t>& v, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
}

inline SendRequest Send(uint64_t wr_id, LocalBuffer local, bool signaled = true) {
  SendRequest r;
  r.wr_id = wr_id;
  r.opcode = WorkOpcode::kSend;
  r.local = local;
  r.signaled = signaled;
  return r;
}

inline SendRequest Write(uint64_t wr_id, LocalBuffer local, uint64_t raddr, uint32_t rkey,
                  bool signaled = true) {
  SendRequest r;
  r.wr_id = wr_id;
  r.opcode = WorkOpcode::kRdmaWrite;
  r.local = local;
  r.remote_addr = raddr;
  r.rkey = rkey;
  r.signaled = signaled;
  return r;
}

inline SendRequest WriteImm(uint64_t wr_id, LocalBuffer local, uint64_t raddr, uint32_t rkey,
                     uint32_t imm, bool signaled = true) {
  SendRequest r = Write(wr_id, local, raddr, rkey, signaled);
  r.opcode = WorkOpcode::kRdmaWriteWithImm;
  r.imm_data = imm;
  return r;
}

inline Status Post(Connection& c, std::initializer_list<SendRequest> reqs) {
  std::vector<SendRequest> v(reqs);
  return c.PostSend(v);
}

// One side of a single-threaded test: collects completions.
struct Side {
  explicit Side(Connection* conn) : c(conn) {}
  Connection* c;
  std::vector<Completion> got;
  std::optional<Status> down;  // the error PollCompletions returned, if any

  void Step(std::chrono::microseconds wait) {
    if (down) return;
    Completion buf[16];
    auto r = c->PollCompletions(buf, Deadline::After(wait));
    if (!r.ok()) {
      down = r.status();
      return;
    }
    got.insert(got.end(), buf, buf + *r);
  }
};

// Polls the sides in turn until cond() holds; false on timeout.
inline bool RunUntil(std::initializer_list<Side*> sides, const std::function<bool()>& cond,
              std::chrono::milliseconds timeout = kTimeout) {
  auto end = Clock::now() + timeout;
  while (!cond()) {
    if (Clock::now() > end) return false;
    for (Side* s : sides) s->Step(1ms);
  }
  return true;
}

inline FaultRule Rule(std::optional<bool> listener_side, std::optional<WorkOpcode> opcode,
               std::optional<uint64_t> sequence, FaultAction action) {
  FaultRule r;
  r.listener_side = listener_side;
  r.opcode = opcode;
  r.sequence = sequence;
  r.action = action;
  return r;
}

inline EmulatedOptions FastRnr() {
  EmulatedOptions o;
  o.rnr_retry_count = 3;
  o.rnr_delay = 20ms;
  return o;
}

using naarpc::testing::Buf;
using naarpc::testing::HangGuard;
using naarpc::testing::NotifyLoop;
using naarpc::testing::PollN;
using naarpc::testing::PollUntilDown;
using naarpc::testing::Reg;

}  // namespace emulated_testing
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_EMULATED_TEST_UTIL_H_
