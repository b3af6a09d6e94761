// The transport a parameterised test runs on, by name: "emulated" (over
// loopback) or "verbs" (real rdma-core; unavailable without an RDMA device:
// those cases run in the Soft-RoCE guest, which names its address in
// NAARPC_TEST_ADDRESS).
#ifndef NAARPC_TESTS_TESTING_TEST_TRANSPORT_H_
#define NAARPC_TESTS_TESTING_TEST_TRANSPORT_H_

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc::testing {

struct TestTransport {
  std::unique_ptr<Transport> transport;  // null if unavailable
  std::string address = "127.0.0.1";     // where a test NAA listens
  std::string unavailable;               // why not (skip with this), or ""
};

inline TestTransport MakeTestTransport(const std::string& name) {
  TestTransport t;
  if (name != "verbs") {
    t.transport = NewEmulatedTransport();
    return t;
  }
  if (!RdmaDeviceAvailable()) {
    t.unavailable =
        "no RDMA device: the verbs cases run in the Soft-RoCE guest "
        "(//tools/rxe-vm:verbs_in_guest_test)";
    return t;
  }
  auto verbs = NewVerbsTransport();
  if (!verbs.ok()) {
    t.unavailable = verbs.status().ToString();
    return t;
  }
  t.transport = std::move(verbs).value();
  if (const char* a = std::getenv("NAARPC_TEST_ADDRESS"); a != nullptr && *a != '\0') t.address = a;
  return t;
}

// Connects a pair on `transport` at `address` (any port): `*listener`, the
// connecting side `*connected` and the side it accepted, `*accepted`.
inline Status ConnectPair(Transport& transport, const std::string& address, Deadline deadline,
                          std::unique_ptr<Listener>* listener,
                          std::unique_ptr<Connection>* connected,
                          std::unique_ptr<Connection>* accepted) {
  auto l = transport.Listen(address, 0);
  if (!l.ok()) return l.status().WithContext("listening");
  *listener = std::move(l).value();
  std::optional<Result<std::unique_ptr<Connection>>> in;
  std::thread th([&] { in.emplace((*listener)->Accept(deadline)); });
  auto c = transport.Connect(address, (*listener)->port(), deadline);
  th.join();
  if (!c.ok()) return c.status().WithContext("connecting");
  if (!in->ok()) return in->status().WithContext("accepting");
  *connected = std::move(c).value();
  *accepted = std::move(**in);
  return Status::Ok();
}

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_TEST_TRANSPORT_H_
