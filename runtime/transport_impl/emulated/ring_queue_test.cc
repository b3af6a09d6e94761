#include "runtime/transport_impl/emulated/ring_queue.h"

#include <deque>
#include <string>

#include <gtest/gtest.h>

namespace naarpc::internal {
namespace {

// The queue against std::deque, through wrap-around and growth.
TEST(RingQueue, BehavesLikeADequeThroughWrapAndGrowth) {
  RingQueue<int> ring;
  std::deque<int> model;
  int next = 0;
  // Sizes that oscillate and climb: the head wraps while the ring grows.
  for (int round = 0; round < 200; ++round) {
    const int pushes = 1 + (round * 7) % 23;
    const int pops = (round * 5) % 19;
    for (int i = 0; i < pushes; ++i) {
      ring.push_back(next);
      model.push_back(next++);
    }
    for (int i = 0; i < pops && !model.empty(); ++i) {
      ASSERT_EQ(ring.front(), model.front());
      ring.pop_front();
      model.pop_front();
    }
    ASSERT_EQ(ring.size(), model.size());
    for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(ring[i], model[i]) << "round " << round;
    if (!model.empty()) {
      ASSERT_EQ(ring.back(), model.back());
    }
  }
  size_t n = 0;
  for (int v : ring) ASSERT_EQ(v, model[n++]);
  EXPECT_EQ(n, model.size());
  ring.clear();
  EXPECT_TRUE(ring.empty());
}

TEST(RingQueue, InsertAndEraseInTheMiddleAcrossTheWrap) {
  RingQueue<int> ring;
  std::deque<int> model;
  for (int i = 0; i < 12; ++i) ring.push_back(i), model.push_back(i);
  for (int i = 0; i < 10; ++i) ring.pop_front(), model.pop_front();  // head near the end
  for (int i = 12; i < 24; ++i) ring.push_back(i), model.push_back(i);  // wraps
  ring.insert(ring.begin() + 3, 100);
  model.insert(model.begin() + 3, 100);
  ring.insert(ring.begin(), 200);
  model.insert(model.begin(), 200);
  ring.insert(ring.end(), 300);
  model.insert(model.end(), 300);
  ASSERT_EQ(ring.size(), model.size());
  for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(ring[i], model[i]) << i;
  ring.erase(ring.begin() + 5);
  model.erase(model.begin() + 5);
  ring.erase(ring.begin());
  model.erase(model.begin());
  ring.erase(ring.end() - 1);
  model.erase(model.end() - 1);
  ASSERT_EQ(ring.size(), model.size());
  for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(ring[i], model[i]) << i;
}

// Inserting at or near the front shifts the front side (wrapping below the
// first slot), near the back the back side; growth keeps the order.
TEST(RingQueue, InsertShiftsTheShorterSide) {
  RingQueue<int> ring;
  std::deque<int> model;
  for (int i = 0; i < 40; ++i) {  // through two growths
    const size_t at = i % 3 == 0 ? 0 : i % 3 == 1 ? model.size() / 3 : model.size() - model.size() / 4;
    ring.insert(ring.begin() + static_cast<std::ptrdiff_t>(at), int{i});
    model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), i);
    ASSERT_EQ(ring.size(), model.size());
    for (size_t k = 0; k < model.size(); ++k) ASSERT_EQ(ring[k], model[k]) << i << " " << k;
  }
}

// Elements that own memory give it up when they leave the queue.
TEST(RingQueue, OwningElementsAreReleasedOnPopAndErase) {
  RingQueue<std::string> ring;
  for (int i = 0; i < 40; ++i) ring.push_back(std::string(100, static_cast<char>('a' + i % 26)));
  ring.erase(ring.begin() + 7);
  while (!ring.empty()) ring.pop_front();
  // Reused slots start from what was assigned, nothing left over.
  ring.push_back("x");
  EXPECT_EQ(ring.front(), "x");
  EXPECT_EQ(ring.size(), 1u);
}

}  // namespace
}  // namespace naarpc::internal
