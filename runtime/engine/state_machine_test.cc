#include "runtime/engine/state_machine.h"

#include <gtest/gtest.h>

#include <vector>

namespace naarpc {
namespace {

using S = CommState;

TEST(StateMachine, SpecNumericValues) {
  EXPECT_EQ(int(S::kInit), 0);
  EXPECT_EQ(int(S::kReady), 1);
  EXPECT_EQ(int(S::kConnected), 2);
  EXPECT_EQ(int(S::kDisconnected), 3);
  EXPECT_EQ(int(S::kMrspSending), 10);
  EXPECT_EQ(int(S::kMrspReceiving), 11);
  EXPECT_EQ(int(S::kMrspDone), 12);
  EXPECT_EQ(int(S::kDataSending), 20);
  EXPECT_EQ(int(S::kCalculating), 21);
  EXPECT_EQ(int(S::kDataReceiving), 22);
  EXPECT_EQ(int(S::kFinished), 30);
  EXPECT_EQ(int(S::kError), 40);
}

void Walk(StateMachine& sm, const std::vector<S>& path) {
  for (S s : path) {
    Status st = sm.Transition(s);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

TEST(StateMachine, HostHappyPathWithTwoCalls) {
  StateMachine sm(Role::kHost);
  Walk(sm, {S::kReady, S::kConnected, S::kMrspSending, S::kMrspReceiving, S::kMrspDone,
            S::kDataSending, S::kDataReceiving, S::kFinished, S::kDataSending,
            S::kDataReceiving, S::kFinished, S::kDisconnected});
  EXPECT_EQ(sm.state(), S::kDisconnected);
}

TEST(StateMachine, NaaHappyPathRunsThroughCalculating) {
  StateMachine sm(Role::kNaa);
  Walk(sm, {S::kReady, S::kConnected, S::kMrspReceiving, S::kMrspSending, S::kMrspDone,
            S::kDataReceiving, S::kCalculating, S::kDataSending, S::kFinished});
  EXPECT_TRUE(sm.finished());
  Walk(sm, {S::kDataReceiving, S::kCalculating});
}

TEST(StateMachine, HostNeverCalculates) {
  StateMachine sm(Role::kHost);
  Walk(sm, {S::kReady, S::kConnected, S::kMrspSending, S::kMrspReceiving, S::kMrspDone,
            S::kDataSending});
  EXPECT_FALSE(sm.Transition(S::kCalculating).ok());
  EXPECT_EQ(sm.state(), S::kDataSending) << "a refused transition changes nothing";
}

TEST(StateMachine, IllegalTransitionsNameBothStates) {
  StateMachine sm(Role::kHost);
  Status st = sm.Transition(S::kDataSending);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("INIT -> DATA_SENDING"), std::string::npos) << st.message();
  // No call before the MRSP is done.
  Walk(sm, {S::kReady, S::kConnected, S::kMrspSending});
  EXPECT_FALSE(sm.Transition(S::kDataSending).ok());
}

TEST(StateMachine, ErrorIsTerminalAndNeverFinished) {
  for (Role role : {Role::kHost, Role::kNaa}) {
    StateMachine sm(role);
    Walk(sm, {S::kReady, S::kConnected});
    sm.Fail();
    EXPECT_TRUE(sm.failed());
    EXPECT_FALSE(sm.finished());
    for (S to : {S::kInit, S::kReady, S::kConnected, S::kDisconnected, S::kMrspSending,
                 S::kMrspReceiving, S::kMrspDone, S::kDataSending, S::kCalculating,
                 S::kDataReceiving, S::kFinished, S::kError}) {
      EXPECT_FALSE(sm.Transition(to).ok()) << CommStateName(to);
      EXPECT_EQ(sm.state(), S::kError);
    }
  }
}

TEST(StateMachine, AnyLiveStateMayFailOrDisconnect) {
  for (S from : {S::kInit, S::kReady, S::kConnected, S::kMrspSending, S::kMrspReceiving,
                 S::kMrspDone, S::kDataSending, S::kCalculating, S::kDataReceiving,
                 S::kFinished}) {
    EXPECT_TRUE(StateMachine::IsLegal(Role::kNaa, from, S::kError));
    EXPECT_TRUE(StateMachine::IsLegal(Role::kHost, from, S::kDisconnected));
  }
  EXPECT_FALSE(StateMachine::IsLegal(Role::kHost, S::kDisconnected, S::kConnected));
}

}  // namespace
}  // namespace naarpc
