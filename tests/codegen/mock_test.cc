// The generated gMock mock stands in for the client in user code under test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/codegen/testdata/golden.naa_mock.h"

namespace golden = naarpc::testing::golden;
using ::testing::_;
using ::testing::Return;

namespace {

// User code that depends only on the interface.
naarpc::Status PingTwice(golden::SecondClientInterface& client, uint32_t* v) {
  NAARPC_RETURN_IF_ERROR(client.Ping(v));
  return client.Ping(v);
}

TEST(Mock, StandsInForTheClient) {
  golden::MockSecondClient mock;
  EXPECT_CALL(mock, Ping(_, _))
      .WillOnce([](uint32_t* v, naarpc::Deadline) {
        *v += 10;
        return naarpc::Status::Ok();
      })
      .WillOnce(Return(naarpc::Status(naarpc::StatusCode::kNaaError, "boom").set_wire_code(0x02)));
  uint32_t v = 1;
  naarpc::Status st = PingTwice(mock, &v);
  EXPECT_EQ(v, 11u);
  EXPECT_EQ(st.wire_code(), 0x02);
}

// Parameters with layouts: the mock gets the caller's view (docs/idl.md
// "Layouts") and can read the elements through it.
TEST(Mock, LayoutParametersArriveAsViews) {
  golden::MockStencilClient mock;
  EXPECT_CALL(mock, Column(_, _, _))
      .WillOnce([](naarpc::StridedView<const double> col, double* sum, naarpc::Deadline) {
        EXPECT_EQ(col.layout(), naarpc::Layout::Strided(4, 1, 5, 2));
        std::vector<double> packed(4);
        col.GatherTo(packed);
        *sum = packed[0] + packed[1] + packed[2] + packed[3];
        return naarpc::Status::Ok();
      });
  std::vector<double> m(20);
  for (size_t i = 0; i < m.size(); ++i) m[i] = double(i);
  double sum = 0;
  golden::StencilClientInterface& client = mock;
  ASSERT_TRUE(client
                  .Column(naarpc::StridedView<const double>(std::span<const double>(m),
                                                            naarpc::Layout::Strided(4, 1, 5, 2)),
                          &sum)
                  .ok());
  EXPECT_EQ(sum, 2.0 + 7 + 12 + 17);
}

// Routines with streams: both overloads are mocked; the streaming one gets
// the caller's source and sink.
naarpc::Status SumOfSamples(golden::StreamerClientInterface& client,
                            std::span<const float> samples, double* sum) {
  naarpc::codegen::SpanSource<float> source(samples);
  return client.Digest(7, source, sum);
}

TEST(Mock, StreamingOverloads) {
  golden::MockStreamerClient mock;
  using ::testing::An;
  EXPECT_CALL(mock, Digest(7, An<naarpc::codegen::StreamSource<float>&>(), _, _))
      .WillOnce([](uint32_t, naarpc::codegen::StreamSource<float>& data, double* sum,
                   naarpc::Deadline) {
        float chunk[4];
        *sum = 0;
        for (;;) {
          auto n = data.Read(chunk);
          if (!n.ok()) return n.status();
          for (size_t i = 0; i < *n; ++i) *sum += chunk[i];
          if (*n < 4) return naarpc::Status::Ok();
        }
      });
  EXPECT_CALL(mock, Convert(An<std::span<const uint16_t>>(), _, _))
      .WillOnce(Return(naarpc::Status::Ok()));
  const std::vector<float> samples = {1, 2, 3, 4, 5, 6};
  double sum = 0;
  EXPECT_TRUE(SumOfSamples(mock, samples, &sum).ok());
  EXPECT_EQ(sum, 21.0);
  std::vector<int64_t> out;
  golden::StreamerClientInterface& client = mock;  // (default arguments)
  EXPECT_TRUE(client.Convert(std::vector<uint16_t>{1, 2}, &out).ok());
}

}  // namespace
