// Helpers of the transports' own tests on one Connection: a registered
// buffer, a work request, polling for a number of completions or until the connection is
// down. The deadlines are hang guards: they only turn a hang into a
// failure, and are generous so that no loaded machine (or TCG guest)
// reaches them.
#ifndef NAARPC_TESTS_TESTING_CONNECTION_HELPERS_H_
#define NAARPC_TESTS_TESTING_CONNECTION_HELPERS_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "naarpc/transport.h"

namespace naarpc::testing {

inline constexpr std::chrono::milliseconds kPollHangGuard = std::chrono::seconds(60);

// A buffer registered on one connection.
struct Buf {
  std::vector<uint8_t> data;
  std::unique_ptr<MemoryRegion> mr;

  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(data.data()) + off; }
  LocalBuffer local(size_t off, uint32_t len) const { return {addr(off), len, mr->lkey()}; }
  LocalBuffer all() const { return local(0, static_cast<uint32_t>(data.size())); }
};

// `n` bytes of `fill` registered on `c` with `access`.
inline Buf Reg(Connection& c, size_t n, uint32_t access = kAccessLocalWrite | kAccessRemoteWrite,
               uint8_t fill = 0) {
  Buf b;
  b.data.assign(n, fill);
  auto mr = c.RegisterMemory(b.data.data(), n, access);
  EXPECT_TRUE(mr.ok()) << mr.status().ToString();
  if (mr.ok()) b.mr = std::move(*mr);
  return b;
}

// Builds a SendRequest (designated initialisers trip
// -Wmissing-field-initializers).
inline SendRequest Req(uint64_t wr_id, WorkOpcode op, LocalBuffer local = {},
                       uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t imm = 0,
                       bool signaled = true) {
  SendRequest r;
  r.wr_id = wr_id;
  r.opcode = op;
  r.local = local;
  r.remote_addr = remote_addr;
  r.rkey = rkey;
  r.imm_data = imm;
  r.signaled = signaled;
  return r;
}

// Polls `c` until `n` completions have come; fails on an error or at the
// hang guard.
inline std::vector<Completion> PollN(Connection& c, size_t n,
                                     std::chrono::milliseconds hang_guard = kPollHangGuard) {
  std::vector<Completion> got;
  const Deadline deadline = Deadline::After(hang_guard);
  while (got.size() < n) {
    Completion buf[16];
    auto r = c.PollCompletions(std::span<Completion>(buf, std::min<size_t>(16, n - got.size())),
                               deadline);
    if (!r.ok()) {
      ADD_FAILURE() << "PollCompletions: " << r.status().ToString();
      break;
    }
    if (*r == 0) {
      ADD_FAILURE() << "hang guard with " << got.size() << " of " << n << " completions";
      break;
    }
    got.insert(got.end(), buf, buf + *r);
  }
  return got;
}

// Polls `c` until kDisconnected; returns the completions seen before.
inline std::vector<Completion> PollUntilDown(
    Connection& c, std::chrono::milliseconds hang_guard = kPollHangGuard) {
  std::vector<Completion> got;
  const Deadline deadline = Deadline::After(hang_guard);
  for (;;) {
    Completion buf[16];
    auto r = c.PollCompletions(buf, deadline);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kDisconnected) << r.status().ToString();
      return got;
    }
    if (*r == 0) {
      ADD_FAILURE() << "connection did not go down before the hang guard";
      return got;
    }
    got.insert(got.end(), buf, buf + *r);
  }
}

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_CONNECTION_HELPERS_H_
