// A software NAA serving every service in services/ on one port:
//   ./tools/bazel run //examples:naa_server -- --port 12345
// Function codes are distinct across the services, so one CompositeHandler
// dispatches them all (docs/idl.md, "Several services on one server").
// With --naaice-stock-kernels it serves instead the NAAICE reference
// library's stock kernels (codes 1, 2, 3 on any region layout, reference
// dialect), so the reference's own host clients can be pointed at it.
#include <CLI/CLI.hpp>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
// The services' generated headers bring naarpc::codegen::CompositeHandler.
#include "services/accumulator/accumulator_service.h"
#include "services/checked/checked_service.h"
#include "services/increment/increment_service.h"
#include "services/matrix/matrix_service.h"
#include "services/naaice_stock/stock_kernels.h"
#include "services/stream/stream_service.h"
#include "services/vector/vector_service.h"

namespace {
}  // namespace

int main(int argc, char** argv) {
  std::string address = "0.0.0.0";
  int port = 12345;
  std::string transport_name = "auto";
  std::string dialect = "any";
  size_t max_regions = naarpc::kDefaultNaaMaxRegions;
  bool stock_kernels = false;

  CLI::App app{"naarpc software NAA serving VectorArith, Matrix, Accumulator, CheckedMath, "
               "Increment and StreamOps on one port."};
  app.add_option("--address", address, "address to listen on")->capture_default_str();
  app.add_option("--port", port, "port (0 = any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--transport", transport_name, "emulated | verbs | auto")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}))
      ->capture_default_str();
  std::string device;
  app.add_option("--device", device,
                 "RDMA device for the verbs transport (e.g. mlx5_0, rxe0); default: the one "
                 "the address routes to");
  app.add_option("--dialect", dialect,
                 "wire dialect to accept: spec | reference | any (the NAA detects the "
                 "dialect per connection at MRSP)")
      ->check(CLI::IsMember({"spec", "reference", "any"}))
      ->capture_default_str();
  app.add_flag("--naaice-stock-kernels", stock_kernels,
               "serve the NAAICE reference library's stock kernels instead of the example "
               "services: function 1 adds 1, 2 adds 2 to every byte of every region, 3 does "
               "nothing; any region layout, reference dialect (point the reference's own "
               "clients here)");
  app.add_option("--max-regions", max_regions, "regions per connection (MRSP error 0x03 beyond)")
      ->check(CLI::Range(1, 255))
      ->capture_default_str();
  int metrics_port = -1;
  std::string metrics_address = "0.0.0.0";
  app.add_option("--metrics-port", metrics_port,
                 "serve per-routine statistics in the Prometheus text format on "
                 "http://ADDRESS:PORT/metrics (0 = any free port; docs/operating.md)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", metrics_address, "address of the metrics endpoint")
      ->capture_default_str();
  // The old spelling, deprecated: hidden from --help (empty group).
  const CLI::Option* max_regions_deprecated =
      app.add_option("--max_regions", max_regions)->check(CLI::Range(1, 255))->group("");
  CLI11_PARSE(app, argc, argv);
  if (max_regions_deprecated->count() > 0) {
    std::fprintf(stderr, "naa_server: --max_regions is deprecated; use --max-regions\n");
  }

  // Ctrl-C and SIGTERM are taken synchronously (sigwait below), so they are
  // blocked before any thread (transport, server) starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto transport = naarpc::NewTransport(transport_name, device);
  if (!transport.ok()) {
    std::fprintf(stderr, "naa_server: %s\n", transport.status().ToString().c_str());
    return 1;
  }

  naarpc::services::vector::VectorArithServiceImpl vector;
  naarpc::services::matrix::MatrixServiceImpl matrix;
  naarpc::services::accumulator::AccumulatorServiceImpl accumulator;
  naarpc::services::checked::CheckedMathServiceImpl checked;
  naarpc::services::increment::IncrementServiceImpl increment;
  naarpc::services::stream::StreamOpsServiceImpl stream;
  auto handler = naarpc::codegen::CompositeHandler::Create(
      {&vector, &matrix, &accumulator, &checked, &increment, &stream});
  if (!handler.ok()) {
    std::fprintf(stderr, "naa_server: %s\n", handler.status().ToString().c_str());
    return 1;
  }
  naarpc::services::naaice_stock::NaaiceStockKernels naaice_stock;
  naarpc::NaaHandler& served =
      stock_kernels ? static_cast<naarpc::NaaHandler&>(naaice_stock) : **handler;

  naarpc::ServerOptions options;
  options.max_regions = max_regions;
  // Restrict the dialect if asked: calls of the other one get status 0x04.
  if (!stock_kernels && dialect != "any") {
    options.dialect = dialect == "spec" ? naarpc::Dialect::kSpec : naarpc::Dialect::kReference;
  }
  if (metrics_port >= 0) {
    options.metrics_port = static_cast<uint16_t>(metrics_port);
    options.metrics_host = metrics_address;
  }
  auto server = naarpc::NaaServer::Start(**transport, address, static_cast<uint16_t>(port),
                                         served, options);
  if (!server.ok()) {
    std::fprintf(stderr, "naa_server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("naa_server: serving %s on %s (transport %s, dialect %s); Ctrl-C stops\n",
              stock_kernels ? "the NAAICE stock kernels 1-3" : "the example services",
              naarpc::HostPort(address, (*server)->port()).c_str(), transport_name.c_str(),
              stock_kernels ? "reference" : dialect.c_str());
  if ((*server)->metrics_port() != 0) {
    std::printf("naa_server: metrics on http://%s/metrics\n",
                naarpc::HostPort(metrics_address, (*server)->metrics_port()).c_str());
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  std::printf("naa_server: %llu connection(s) served; shutting down\n",
              static_cast<unsigned long long>((*server)->connections_accepted()));
  (*server)->Shutdown();
  return 0;
}
