#include "tools/naarpc/serve_command.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string_view>

#include "naarpc/discovery.h"
#include "naarpc/transport_factory.h"
#include "tools/naarpc/bench.h"
#include "tools/naarpc/cli_common.h"
#include "tools/naarpc/dynamic_naa.h"
#include "tools/naarpc/values.h"

namespace naarpc::cli {

int Serve(const ServeArgs& a) {
  // Signals are taken synchronously (sigwait), so block them before any
  // thread (transport, server) starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto idl = LoadIdl(a.idl);
  if (!idl.ok()) return kExitIdl;
  std::vector<const idl::Service*> services;
  for (const idl::Service& s : idl->services) {
    if (a.service.empty() || s.name == a.service) services.push_back(&s);
  }
  if (services.empty()) return Fail(kExitUsage, a.idl + " has no service '" + a.service + "'");
  auto naa = DynamicNaa::Create(services, a.kernels);
  if (!naa.ok()) return Fail(kExitUsage, naa.status().message());


  auto transport = NewTransport(a.transport, a.device);
  if (!transport.ok()) return Fail(kExitUnreachable, transport.status().ToString());

  ServerOptions options;
  options.max_regions = a.max_regions;
  // Calls of the other dialect get status 0x04.
  if (a.dialect != "any") options.dialect = a.dialect == "spec" ? Dialect::kSpec : Dialect::kReference;
  options.max_connections = a.max_connections;
  options.idle_timeout = std::chrono::milliseconds(a.idle_timeout_ms);
  auto max_bytes = ParseSize(a.max_bytes_per_connection);
  if (!max_bytes.ok()) {
    return Fail(kExitUsage, "--max-bytes-per-connection " + max_bytes.status().message());
  }
  options.max_bytes_per_connection = *max_bytes;
  if (a.metrics_port >= 0) {
    options.metrics_port = static_cast<uint16_t>(a.metrics_port);
    options.metrics_host = a.metrics_address;
  }
  options.log = [](std::string_view line) {
    std::fprintf(stderr, "naarpc serve: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  auto server =
      NaaServer::Start(**transport, a.address, static_cast<uint16_t>(a.port), **naa, options);
  if (!server.ok()) return Fail(kExitUnreachable, server.status().ToString());
  const uint16_t port = (*server)->port();
  if (!a.port_file.empty()) {
    // Written whole, then renamed (a reader never sees a partial file),
    // before the listening line.
    const std::string tmp = a.port_file + ".tmp";
    { std::ofstream(tmp) << port << "\n"; }
    if (std::rename(tmp.c_str(), a.port_file.c_str()) != 0) {
      return Fail(kExitFailure, "cannot write --port-file " + a.port_file);
    }
  }
  std::printf(
      "naarpc serve: listening on %s (%s, transport %s, dialect %s); Ctrl-C "
      "stops\n%s",
      HostPort(a.address, port).c_str(), idl->path.c_str(),
      std::string((*transport)->name()).c_str(), a.dialect.c_str(), (*naa)->Describe().c_str());
  if ((*server)->metrics_port() != 0) {
    std::printf("naarpc serve: metrics on http://%s/metrics\n",
                HostPort(a.metrics_address, (*server)->metrics_port()).c_str());
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  std::printf("naarpc serve: %llu call(s) on %llu connection(s); shutting down\n",
              static_cast<unsigned long long>((*naa)->calls()),
              static_cast<unsigned long long>((*server)->connections_accepted()));
  std::fflush(stdout);
  (*server)->Shutdown();
  return kExitOk;
}

}  // namespace naarpc::cli
