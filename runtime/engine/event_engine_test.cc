// EventEngine (runtime/engine/event_engine.h): connections driven on readiness and
// deadlines, one owner at a time, more threads only for blocked owners and
// never more than max_threads. Behaviour only: waits below are bounded by
// generous safety deadlines, never asserted on.
#include "runtime/engine/event_engine.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace naarpc::internal {
namespace {

constexpr auto kPatience = std::chrono::seconds(30);

// Signals between a test and its drivens.
struct Board {
  std::mutex mu;
  std::condition_variable cv;
  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kPatience, pred);
  }
  template <typename Fn>
  void Change(Fn fn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      fn();
    }
    cv.notify_all();
  }
};

// An eventfd as its descriptor; Drive() takes what was written.
class Counter : public Driven {
 public:
  explicit Counter(Board& board) : board_(board), fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Counter() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void Signal(uint64_t n = 1) { ASSERT_EQ(::write(fd_, &n, sizeof(n)), 8); }

  int fd() const override { return fd_; }
  std::optional<Deadline> Drive() override {
    const int now_in = ++inside_;
    uint64_t v = 0;
    const bool got = ::read(fd_, &v, sizeof(v)) == 8;
    board_.Change([&] {
      max_inside_ = std::max(max_inside_, now_in);
      ++drives_;
      if (got) total_ += v;
    });
    if (linger_) {
      const bool lingered = engine_->TryLinger();
      const size_t threads = engine_->threads();
      board_.Change([&] {
        lingered_ = lingered;
        threads_seen_ = threads;
      });
    }
    if (block_) {
      if (call_before_blocking_ && engine_ != nullptr) engine_->BeforeBlocking();
      board_.Change([&] { ++blocked_; });
      board_.WaitFor([&] { return release_; });
      board_.Change([&] { --blocked_; });
    }
    --inside_;
    if (interrupted_) return std::nullopt;
    return std::exchange(next_, Deadline::Infinite());
  }
  void Interrupt() override {
    interrupted_ = true;
    Signal();
  }
  void Ended() override {
    ::close(fd_);
    fd_ = -1;
    board_.Change([&] { ++ended_; });
  }

  Board& board_;
  int fd_;
  std::atomic<int> inside_{0};
  std::atomic<bool> interrupted_{false};
  Deadline next_ = Deadline::Infinite();  // what the next Drive() returns, once
  bool block_ = false;
  bool call_before_blocking_ = true;
  bool linger_ = false;  // Drive() asks to linger (the test ends it)
  EventEngine* engine_ = nullptr;
  // guarded by board_.mu
  int drives_ = 0, max_inside_ = 0, blocked_ = 0, ended_ = 0;
  uint64_t total_ = 0;
  bool release_ = false;
  bool lingered_ = false;
  size_t threads_seen_ = 0;
};

// `count` counters added to `engine`, first driven at `first`.
std::vector<std::shared_ptr<Counter>> AddCounters(EventEngine& engine, Board& board, int count,
                                                  Deadline first) {
  std::vector<std::shared_ptr<Counter>> all;
  for (int i = 0; i < count; ++i) {
    all.push_back(std::make_shared<Counter>(board));
    EXPECT_TRUE(engine.Add(all.back(), first).ok());
  }
  return all;
}

std::unique_ptr<EventEngine> Engine(size_t threads, size_t max_threads) {
  auto e = EventEngine::Start({threads, max_threads});
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(EventEngine, EveryEventIsTakenByOneOwnerAtATime) {
  Board board;
  auto engine = Engine(2, 2);
  auto c = std::make_shared<Counter>(board);
  ASSERT_TRUE(engine->Add(c, Deadline::Infinite()).ok());
  constexpr uint64_t kSignals = 20'000;
  std::thread writer([&] {
    for (uint64_t i = 0; i < kSignals; ++i) c->Signal();
  });
  writer.join();
  EXPECT_TRUE(board.WaitFor([&] { return c->total_ == kSignals; })) << c->total_;
  std::lock_guard<std::mutex> lock(board.mu);
  EXPECT_EQ(c->max_inside_, 1);  // never driven by two threads at once
}

TEST(EventEngine, ADeadlineDrivesItWithoutAnEvent) {
  Board board;
  auto engine = Engine(1, 1);
  auto c = std::make_shared<Counter>(board);
  ASSERT_TRUE(engine->Add(c, Deadline::Now()).ok());
  EXPECT_TRUE(board.WaitFor([&] { return c->drives_ >= 1; }));
  std::lock_guard<std::mutex> lock(board.mu);
  EXPECT_EQ(c->total_, 0u);  // nothing was written: the deadline drove it
}

TEST(EventEngine, ADeadlineSetWhileEveryThreadSleepsIsKept) {
  Board board;
  auto engine = Engine(2, 2);
  auto c = std::make_shared<Counter>(board);
  // The threads sleep with no deadline at all; the event's Drive() asks for one.
  c->next_ = Deadline::After(std::chrono::milliseconds(1));
  ASSERT_TRUE(engine->Add(c, Deadline::Infinite()).ok());
  c->Signal();
  EXPECT_TRUE(board.WaitFor([&] { return c->drives_ >= 2; }));  // the event, then the deadline
  std::lock_guard<std::mutex> lock(board.mu);
  EXPECT_EQ(c->total_, 1u);
}

// A deadline that has passed when it is added drives it at once, and it is
// armed afterwards like any other (never taken for one the engine could not
// watch).
TEST(EventEngine, ADeadlineDueAtAddDrivesItAndLeavesItArmed) {
  Board board;
  auto engine = Engine(2, 2);
  auto all = AddCounters(*engine, board, 200, Deadline::Now());
  EXPECT_TRUE(board.WaitFor([&] {
    for (auto& c : all) {
      if (c->drives_ == 0) return false;
    }
    return true;
  }));
  for (auto& c : all) {
    EXPECT_FALSE(c->interrupted_.load());
    c->Signal();
  }
  EXPECT_TRUE(board.WaitFor([&] {
    for (auto& c : all) {
      if (c->total_ != 1) return false;
    }
    return true;
  }));
  EXPECT_EQ(engine->driven(), 200u);
}

TEST(EventEngine, ABlockedOwnerStartsAThreadSoOthersAreServed) {
  Board board;
  auto engine = Engine(1, 4);
  auto slow = std::make_shared<Counter>(board);
  slow->block_ = true;
  slow->engine_ = engine.get();
  auto quick = std::make_shared<Counter>(board);
  ASSERT_TRUE(engine->Add(slow, Deadline::Infinite()).ok());
  ASSERT_TRUE(engine->Add(quick, Deadline::Infinite()).ok());
  slow->Signal();
  ASSERT_TRUE(board.WaitFor([&] { return slow->blocked_ == 1; }));
  quick->Signal();
  EXPECT_TRUE(board.WaitFor([&] { return quick->total_ == 1; }));
  EXPECT_EQ(engine->threads(), 2u);
  board.Change([&] { slow->release_ = true; });
}

TEST(EventEngine, ThreadsNeverExceedMaxThreads) {
  Board board;
  auto engine = Engine(1, 2);
  std::vector<std::shared_ptr<Counter>> all;
  for (int i = 0; i < 3; ++i) {
    all.push_back(std::make_shared<Counter>(board));
    all.back()->block_ = true;
    all.back()->engine_ = engine.get();
    ASSERT_TRUE(engine->Add(all.back(), Deadline::Infinite()).ok());
    all.back()->Signal();
  }
  auto blocked = [&] {
    int n = 0;
    for (auto& c : all) n += c->blocked_;
    return n;
  };
  ASSERT_TRUE(board.WaitFor([&] { return blocked() == 2; }));
  EXPECT_EQ(engine->threads(), 2u);
  // The third waits for a thread; released, all three are served.
  board.Change([&] {
    for (auto& c : all) c->release_ = true;
  });
  EXPECT_TRUE(board.WaitFor([&] {
    int done = 0;
    for (auto& c : all) done += c->total_ == 1;
    return done == 3;
  }));
  EXPECT_EQ(engine->threads(), 2u);
}

// Owners stay with their connections only while another thread waits for
// events (one is started if none does), and at most max_threads - 1 of them:
// one always serves the rest.
TEST(EventEngine, LingeringLeavesAThreadForEveryoneElse) {
  auto one = Engine(1, 1);
  EXPECT_FALSE(one->TryLinger());  // a single thread never lingers
  Board board;
  auto engine = Engine(1, 3);
  auto all = AddCounters(*engine, board, 3, Deadline::Infinite());
  for (auto& c : all) {
    c->engine_ = engine.get();
    c->linger_ = true;
  }
  for (int i : {0, 1}) {  // they stay in Drive(), as a lingering owner does
    all[i]->block_ = true;
    all[i]->call_before_blocking_ = false;
  }
  // The only thread takes the first: none is left waiting, so lingering
  // starts one.
  all[0]->Signal();
  ASSERT_TRUE(board.WaitFor([&] { return all[0]->threads_seen_ != 0; }));
  EXPECT_TRUE(all[0]->lingered_);
  EXPECT_EQ(all[0]->threads_seen_, 2u);
  // The second thread takes the next: a third is started for the rest.
  all[1]->Signal();
  ASSERT_TRUE(board.WaitFor([&] { return all[1]->threads_seen_ != 0; }));
  EXPECT_TRUE(all[1]->lingered_);
  EXPECT_EQ(all[1]->threads_seen_, 3u);
  // The third may not: no thread would be left for the others.
  all[2]->Signal();
  ASSERT_TRUE(board.WaitFor([&] { return all[2]->threads_seen_ != 0; }));
  EXPECT_FALSE(all[2]->lingered_);
  EXPECT_EQ(engine->threads(), 3u);
  engine->EndLinger();
  engine->EndLinger();
  board.Change([&] {
    for (auto& c : all) c->release_ = true;
  });
}

// A thread started for a blocked owner leaves once it has had no event for
// spare_idle; Options::threads stay.
TEST(EventEngine, SpareThreadsLeaveWhenIdle) {
  Board board;
  auto started = EventEngine::Start({.threads = 1, .max_threads = 4,
                                     .spare_idle = std::chrono::milliseconds(1)});
  ASSERT_TRUE(started.ok());
  auto engine = std::move(started).value();
  auto slow = std::make_shared<Counter>(board);
  slow->block_ = true;
  slow->engine_ = engine.get();
  ASSERT_TRUE(engine->Add(slow, Deadline::Infinite()).ok());
  slow->Signal();
  ASSERT_TRUE(board.WaitFor([&] { return slow->blocked_ == 1; }));
  EXPECT_EQ(engine->threads(), 2u);
  board.Change([&] { slow->release_ = true; });
  ASSERT_TRUE(board.WaitFor([&] { return slow->blocked_ == 0; }));
  for (auto give_up = Deadline::After(kPatience); engine->threads() > 1 && !give_up.expired();) {
    std::this_thread::yield();
  }
  EXPECT_EQ(engine->threads(), 1u);
  // The one left still serves.
  slow->block_ = false;
  slow->Signal();
  EXPECT_TRUE(board.WaitFor([&] { return slow->total_ == 2; }));
}

TEST(EventEngine, InterruptAllEndsEveryConnectionOnceAndClosesNothingEarly) {
  Board board;
  auto engine = Engine(2, 2);
  auto all = AddCounters(*engine, board, 50, Deadline::Infinite());
  EXPECT_EQ(engine->driven(), 50u);
  engine->InterruptAll();
  EXPECT_EQ(engine->driven(), 0u);
  std::lock_guard<std::mutex> lock(board.mu);
  for (auto& c : all) {
    EXPECT_EQ(c->ended_, 1);
    EXPECT_EQ(c->fd_, -1);
  }
}

// Blocks in its first Drive() until released, as a kernel past its time
// limit does; then behaves as a given-up owner (LeaveGivenUp).
class Stuck : public Driven {
 public:
  explicit Stuck(Board& board) : board_(board), fd_(::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Stuck() override { ::close(fd_); }
  int fd() const override { return fd_; }
  std::optional<Deadline> Drive() override {
    board_.Change([&] { owner_ = engine_->CurrentOwner(); blocked_ = true; });
    board_.WaitFor([&] { return release_; });
    EventEngine::LeaveGivenUp();
    // Notified under the lock: the test (and `board_`) may end as soon as
    // it sees returned_, so nothing of the board is touched after.
    std::lock_guard<std::mutex> lock(board_.mu);
    returned_ = true;
    board_.cv.notify_all();
    return Deadline::Infinite();  // ignored: given up
  }
  void Interrupt() override {}
  void Ended() override {
    board_.Change([&] { ++ended_; });
  }

  Board& board_;
  const int fd_;
  EventEngine* engine_ = nullptr;
  EventEngine::Owner owner_;  // guarded by board_.mu
  bool blocked_ = false, release_ = false, returned_ = false;  // guarded by board_.mu
  int ended_ = 0;  // guarded by board_.mu
};

TEST(EventEngine, AGivenUpOwnerIsNeitherWaitedForNorJoinedAndTouchesNothingAfter) {
  Board board;
  auto engine = Engine(1, 4);
  auto stuck = std::make_shared<Stuck>(board);
  stuck->engine_ = engine.get();
  ASSERT_TRUE(engine->Add(stuck, Deadline::Infinite()).ok());  // readable at once
  ASSERT_TRUE(board.WaitFor([&] { return stuck->blocked_; }));
  EventEngine::Owner owner;
  {
    std::lock_guard<std::mutex> lock(board.mu);
    // Taken, not copied: an owner holds its connection's entry, which
    // holds `stuck` (a cycle, were it kept there).
    owner = std::exchange(stuck->owner_, EventEngine::Owner{});
  }
  engine->GiveUp(owner);
  {
    std::lock_guard<std::mutex> lock(board.mu);
    EXPECT_EQ(stuck->ended_, 1);  // Ended() ran in GiveUp
  }
  EXPECT_EQ(engine->driven(), 0u);
  EXPECT_EQ(engine->threads(), 1u);  // a replacement for the given-up thread
  // Neither InterruptAll nor Stop waits for it; the engine may go first.
  engine->InterruptAll();
  engine->Stop();
  engine.reset();
  board.Change([&] { stuck->release_ = true; });
  EXPECT_TRUE(board.WaitFor([&] { return stuck->returned_; }));
  std::lock_guard<std::mutex> lock(board.mu);
  EXPECT_EQ(stuck->ended_, 1);
}

TEST(EventEngine, RefusesADrivenWithoutADescriptor) {
  Board board;
  auto engine = Engine(1, 1);
  auto c = std::make_shared<Counter>(board);
  ::close(c->fd_);
  c->fd_ = -1;
  Status s = engine->Add(c, Deadline::Infinite());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(engine->driven(), 0u);
}

}  // namespace
}  // namespace naarpc::internal
