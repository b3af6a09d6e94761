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

}  // namespace
