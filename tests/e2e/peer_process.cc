// The other side of the two-process end-to-end tests, started with
// posix_spawn by tests/e2e/e2e_test.cc (no fork() after verbs registrations).
//
//   peer_process naa  --transport=T --address=A
//       serves TestKernels on port 0, prints "port N", then "kernel C" as
//       each kernel (function code C) starts; serves until stdin reaches EOF
//       (the test closed it, or died).
//   peer_process host --transport=T --address=A --port=P --dialect=D
//       opens a session, prints "calling", calls kHold (it returns when the
//       NAA's test releases it) and prints "result <status>" (the test
//       usually kills it before that).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <string>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "tests/e2e/test_kernels.h"

namespace {

using naarpc::testing::TestKernels;

int ServeNaa(naarpc::Transport& transport, const std::string& address) {
  TestKernels kernels;
  kernels.on_call = [](uint8_t code) {
    std::printf("kernel %u\n", unsigned{code});
    std::fflush(stdout);
  };
  naarpc::ServerOptions options;
  options.log = [](std::string_view line) {
    std::fprintf(stderr, "peer NAA: %.*s\n", int(line.size()), line.data());
  };
  auto server = naarpc::NaaServer::Start(transport, address, 0, kernels, options);
  if (!server.ok()) {
    std::fprintf(stderr, "peer_process: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("port %u\n", unsigned((*server)->port()));
  std::fflush(stdout);
  char buf[64];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  (*server)->Shutdown();
  return 0;
}

int CallAsHost(naarpc::Transport& transport, const std::string& address, int port,
               const std::string& dialect) {
  naarpc::ClientOptions options;
  options.dialect = dialect == "reference" ? naarpc::Dialect::kReference : naarpc::Dialect::kSpec;
  std::vector<naarpc::RegionSpec> regions = {{"ms", naarpc::Direction::kIn, 4},
                                             {"out", naarpc::Direction::kOut, 4}};
  auto session = naarpc::ClientSession::Open(transport, address, uint16_t(port), regions, options);
  if (!session.ok()) {
    std::fprintf(stderr, "peer_process: %s\n", session.status().ToString().c_str());
    return 1;
  }
  const uint32_t x = 7;
  std::memcpy((*session)->buffer(0).data(), &x, 4);
  std::printf("calling\n");
  std::fflush(stdout);
  naarpc::Status s =
      (*session)->Call(naarpc::testing::kHold, naarpc::Deadline::After(std::chrono::seconds(60)));
  std::printf("result %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"peer process for the two-process end-to-end tests"};
  app.require_subcommand(1);
  std::string transport_name = "emulated", address = "127.0.0.1", dialect = "spec";
  int port = 0;
  CLI::App* naa = app.add_subcommand("naa", "serve TestKernels until stdin closes");
  CLI::App* host = app.add_subcommand("host", "call kHold once");
  for (CLI::App* sub : {naa, host}) {
    sub->add_option("--transport", transport_name)->check(CLI::IsMember({"emulated", "verbs"}));
    sub->add_option("--address", address);
  }
  host->add_option("--port", port)->required()->check(CLI::Range(1, 65535));
  host->add_option("--dialect", dialect)->check(CLI::IsMember({"spec", "reference"}));
  CLI11_PARSE(app, argc, argv);

  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "peer_process: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  if (naa->parsed()) return ServeNaa(**transport, address);
  return CallAsHost(**transport, address, port, dialect);
}
