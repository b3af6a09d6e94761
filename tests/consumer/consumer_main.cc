// A user's program, built outside naarpc's workspace (see saxpy.naa.yaml):
// a software NAA implementing the generated skeleton and a generated client
// calling it in-process on the emulated transport. Prints "consumer: ok".
#include <cstdio>
#include <span>
#include <vector>

#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "saxpy.naa.h"

namespace {

class BlasImpl final : public consumer::BlasService {
 public:
  consumer::BlasError Saxpy(const naarpc::NaaCall&, std::span<const float> x,
                            std::span<float> y) override {
    for (size_t i = 0; i < y.size(); ++i) y[i] = 2 * x[i] + y[i];
    return consumer::BlasError::kOk;
  }
};

}  // namespace

int main() {
  auto transport = naarpc::NewTransport("emulated");
  if (!transport.ok()) {
    std::fprintf(stderr, "consumer: transport: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  BlasImpl service;
  auto server = naarpc::NaaServer::Start(**transport, "127.0.0.1", /*port=*/0, service);
  if (!server.ok()) {
    std::fprintf(stderr, "consumer: server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  consumer::BlasClient client(**transport, "127.0.0.1", (*server)->port());
  std::vector<float> x(256), y(256);
  for (int call = 0; call < 3; ++call) {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<float>(i);
      y[i] = static_cast<float>(call);
    }
    naarpc::Status st = client.Saxpy(x, y);
    if (!st.ok()) {
      std::fprintf(stderr, "consumer: Saxpy: %s\n", st.ToString().c_str());
      return 1;
    }
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] != 2 * x[i] + static_cast<float>(call)) {
        std::fprintf(stderr, "consumer: y[%zu] = %g, want %g\n", i, y[i], 2 * x[i] + call);
        return 1;
      }
    }
  }
  (*server)->Shutdown();
  std::printf("consumer: ok (3 calls of Blas.Saxpy on the emulated transport)\n");
  return 0;
}
