// Calls every service of a running software NAA (//examples:naa_server):
//   ./tools/bazel run //examples:naa_server -- --port 12345 &
//   ./tools/bazel run //examples:all_services_client -- --port 12345
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "naarpc/transport_factory.h"
#include "services/accumulator/accumulator.naa.h"
#include "services/checked/checked.naa.h"
#include "services/increment/increment.naa.h"
#include "services/matrix/matrix.naa.h"
#include "services/stream/stream.naa.h"
#include "services/vector/vector.naa.h"

namespace {

bool Report(const char* what, const naarpc::Status& st) {
  std::printf("%-44s %s\n", what, st.ok() ? "OK" : st.ToString().c_str());
  return st.ok();
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int port = 12345;
  std::string transport_name = "auto";
  std::string dialect = "spec";
  CLI::App app{"Calls every naarpc example service on one NAA."};
  app.add_option("--host", host, "NAA address")->capture_default_str();
  app.add_option("--port", port, "NAA port")->check(CLI::Range(1, 65535))->capture_default_str();
  app.add_option("--transport", transport_name, "emulated | verbs | auto")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}))
      ->capture_default_str();
  std::string device;
  app.add_option("--device", device,
                 "RDMA device for the verbs transport (e.g. mlx5_0, rxe0); default: the one "
                 "the address routes to");
  app.add_option("--dialect", dialect, "spec | reference")
      ->check(CLI::IsMember({"spec", "reference"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto transport = naarpc::NewTransport(transport_name, device);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  naarpc::codegen::StubOptions options;
  options.session.dialect =
      dialect == "spec" ? naarpc::Dialect::kSpec : naarpc::Dialect::kReference;
  const auto p = static_cast<uint16_t>(port);
  bool ok = true;

  {
    naarpc::services::vector::VectorArithClient c(**transport, host, p, options);
    std::vector<float> a(1024, 2.0f), b(1024, 3.0f), out(1024);
    ok &= Report("VectorArith.Add", c.Add(a, b, out));
    std::printf("  2 + 3 = %g\n", out[0]);
    std::vector<double> x = {1, 2, 3};
    ok &= Report("VectorArith.Scale", c.Scale(10.0, &x));
    std::printf("  [1 2 3] * 10 = [%g %g %g]\n", x[0], x[1], x[2]);
    double dot = 0;
    const std::vector<double> u = {1, 2, 3}, v = {4, 5, 6};
    ok &= Report("VectorArith.Dot", c.Dot(u, v, &dot));
    std::printf("  [1 2 3] . [4 5 6] = %g\n", dot);
  }
  {
    naarpc::services::matrix::MatrixClient c(**transport, host, p, options);
    std::vector<float> a(4096, 0.0f), b(4096, 1.0f), m(4096);
    for (size_t i = 0; i < 64; ++i) a[i * 64 + i] = 2.0f;  // 2 * identity
    ok &= Report("Matrix.Multiply", c.Multiply(a, b, m));
    std::printf("  (2I * ones)[0][0] = %g\n", m[0]);
  }
  {
    naarpc::services::accumulator::AccumulatorClient c(**transport, host, p, options);
    double total = 0;
    uint64_t count = 0;
    const std::vector<double> first = {1, 2}, second = {3};
    ok &= Report("Accumulator.Accumulate", c.Accumulate(first, &total, &count));
    ok &= Report("Accumulator.Accumulate", c.Accumulate(second, &total, &count));
    std::printf("  total %g over %llu values\n", total, static_cast<unsigned long long>(count));
  }
  {
    naarpc::services::checked::CheckedMathClient c(**transport, host, p, options);
    std::vector<int32_t> q;
    const std::vector<int32_t> a = {7, 9}, b = {2, 0};
    naarpc::Status st = c.Divide(a, b, &q);
    std::printf("%-44s %s\n", "CheckedMath.Divide by zero (expected error)",
                st.ToString().c_str());
    ok &= naarpc::services::checked::CheckedMathErrorFromStatus(st) ==
          naarpc::services::checked::CheckedMathError::kDivisionByZero;
  }
  {
    naarpc::services::increment::IncrementClient c(**transport, host, p, options);
    std::vector<uint8_t> data(4096, 41);
    ok &= Report("Increment.IncrementBytes", c.IncrementBytes(data));
    std::printf("  41 + 1 = %u\n", unsigned{data[0]});
  }
  {
    // Streams: 1 MiB through a 64 KiB x 8 ring, in and (transformed) out.
    naarpc::services::stream::StreamOpsClient c(**transport, host, p, options);
    std::vector<uint8_t> data(1 << 20);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
    uint64_t digest[4] = {};
    ok &= Report("StreamOps.Checksum", c.Checksum(data, digest));
    ok &= digest[1] == data.size();
    const std::vector<uint32_t> words = {1, 2, 3};
    std::vector<uint32_t> out;
    ok &= Report("StreamOps.Transform", c.Transform(10, words, &out));
    ok &= out == std::vector<uint32_t>{11, 21, 31};
    std::printf("  %llu bytes in %llu chunks; 1 2 3 -> %u %u %u\n",
                static_cast<unsigned long long>(digest[1]),
                static_cast<unsigned long long>(digest[2]), out.size() == 3 ? out[0] : 0,
                out.size() == 3 ? out[1] : 0, out.size() == 3 ? out[2] : 0);
  }
  std::printf("%s\n", ok ? "all services answered as expected" : "SOME CALLS FAILED");
  return ok ? 0 : 1;
}
