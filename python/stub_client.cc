// The generated C++ stubs of services/vector and services/stream calling an
// NAA served from Python (python/naarpc_stream_test.py starts `naarpc.serve`
// with Python kernels and runs this): the plain parameters, a variable-length
// output, an inout, and streams in, in-and-out and out. Prints one line per
// call ("VectorArith.Dot OK 32") and "all calls answered as expected".
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "naarpc/transport_factory.h"
#include "services/stream/stream.naa.h"
#include "services/vector/vector.naa.h"

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", transport_name = "emulated", device;
  int vector_port = 0, stream_port = 0;
  CLI::App app{"Calls VectorArith and StreamOps through their generated C++ stubs."};
  app.add_option("--host", host, "NAA address");
  app.add_option("--vector-port", vector_port, "port of the VectorArith NAA")->required();
  app.add_option("--stream-port", stream_port, "port of the StreamOps NAA")->required();
  app.add_option("--transport", transport_name, "emulated | verbs | auto");
  app.add_option("--device", device, "RDMA device for verbs");
  CLI11_PARSE(app, argc, argv);

  auto transport = naarpc::NewTransport(transport_name, device);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  bool ok = true;
  auto report = [&](const char* what, const naarpc::Status& st, bool right,
                    const std::string& shown) {
    std::printf("%s %s%s%s\n", what, st.ok() ? "OK" : st.ToString().c_str(),
                shown.empty() ? "" : " ", st.ok() ? shown.c_str() : "");
    ok &= st.ok() && right;
  };
  {
    naarpc::services::vector::VectorArithClient c(**transport, host,
                                                  static_cast<uint16_t>(vector_port));
    std::vector<float> a(1024, 2.0f), b(1024, 3.0f), out(1024);
    naarpc::Status st = c.Add(a, b, out);
    report("VectorArith.Add", st, out[0] == 5.0f && out[1023] == 5.0f, "");
    double dot = 0;
    const std::vector<double> u = {1, 2, 3}, v = {4, 5, 6};
    st = c.Dot(u, v, &dot);
    report("VectorArith.Dot", st, dot == 32.0, std::to_string(static_cast<int>(dot)));
    std::vector<double> x = {1, 2, 3};
    st = c.Scale(10.0, &x);
    report("VectorArith.Scale", st, x == std::vector<double>{10, 20, 30},
           std::to_string(static_cast<int>(x[0])) + " " + std::to_string(static_cast<int>(x[1])) +
               " " + std::to_string(static_cast<int>(x[2])));
  }
  {
    naarpc::services::stream::StreamOpsClient c(**transport, host,
                                                static_cast<uint16_t>(stream_port));
    std::vector<uint8_t> data(1 << 20);
    uint64_t sum = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<uint8_t>(i * 7);
      sum += data[i];
    }
    uint64_t digest[4] = {};
    naarpc::Status st = c.Checksum(data, digest);
    report("StreamOps.Checksum", st, digest[0] == sum && digest[1] == data.size(),
           std::to_string(digest[1]));
    const std::vector<uint32_t> words = {1, 2, 3};
    std::vector<uint32_t> out;
    st = c.Transform(10, words, &out);
    report("StreamOps.Transform", st, out == std::vector<uint32_t>{11, 21, 31},
           out.size() == 3 ? std::to_string(out[0]) + " " + std::to_string(out[1]) + " " +
                                 std::to_string(out[2])
                           : "");
    std::vector<uint8_t> generated;
    st = c.Generate(100000, &generated);
    bool right = generated.size() == 100000;
    for (size_t i = 0; right && i < generated.size(); ++i) {
      right = generated[i] == static_cast<uint8_t>(i * 7);
    }
    report("StreamOps.Generate", st, right, std::to_string(generated.size()));
  }
  std::printf("%s\n", ok ? "all calls answered as expected" : "SOME CALLS FAILED");
  return ok ? 0 : 1;
}
