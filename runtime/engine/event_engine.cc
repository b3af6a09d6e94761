#include "runtime/engine/event_engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

namespace naarpc::internal {

namespace {
constexpr uint64_t kWakeId = 0;   // the stop eventfd
constexpr uint64_t kTimerId = 1;  // timer_fd_; entries count from 2
}  // namespace

thread_local const std::shared_ptr<EventEngine::Entry>* EventEngine::current_ = nullptr;
thread_local bool EventEngine::lingering_here_ = false;
thread_local bool EventEngine::given_up_ = false;

Result<std::unique_ptr<EventEngine>> EventEngine::Start(Options options) {
  if (options.threads == 0) options.threads = std::max(1u, std::thread::hardware_concurrency());
  if (options.max_threads < options.threads) options.max_threads = options.threads;
  std::unique_ptr<EventEngine> engine(new EventEngine(options));
  engine->epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  engine->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  engine->timer_fd_ = UniqueFd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (engine->epoll_.get() < 0 || engine->wake_.get() < 0 || engine->timer_fd_.get() < 0) {
    return ResourceExhaustedError(std::string("event engine: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: once written, it wakes every thread
  ev.data.u64 = kWakeId;
  epoll_event tick{};
  tick.events = EPOLLIN | EPOLLONESHOT;  // one thread runs the due deadlines
  tick.data.u64 = kTimerId;
  if (::epoll_ctl(engine->epoll_.get(), EPOLL_CTL_ADD, engine->wake_.get(), &ev) != 0 ||
      ::epoll_ctl(engine->epoll_.get(), EPOLL_CTL_ADD, engine->timer_fd_.get(), &tick) != 0) {
    return ResourceExhaustedError(std::string("event engine: epoll_ctl: ") + std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(engine->mu_);
  for (size_t i = 0; i < options.threads; ++i) NAARPC_RETURN_IF_ERROR(engine->StartThread());
  return engine;
}

EventEngine::~EventEngine() { Stop(); }

Status EventEngine::StartThread() {
  JoinRetiredLocked();
  waiting_.fetch_add(1);  // counted before it runs, so no second one is started for it
  try {
    threads_.emplace_back([this] { Loop(); });
    running_.store(threads_.size(), std::memory_order_relaxed);
  } catch (const std::system_error& e) {
    waiting_.fetch_sub(1);
    return ResourceExhaustedError(std::string("event engine: cannot start a thread: ") +
                                  e.what());
  }
  return Status::Ok();
}

void EventEngine::JoinRetiredLocked() {
  for (auto& t : retired_) t.join();  // exiting or gone: a short wait at most
  retired_.clear();
}

bool EventEngine::RetireIfSpare() {
  std::lock_guard<std::mutex> lock(mu_);
  // Another waiter stays: one always takes the events.
  if (threads_.size() <= options_.threads || waiting_.load() < 2) return false;
  const auto self = std::this_thread::get_id();
  for (auto it = threads_.begin(); it != threads_.end(); ++it) {
    if (it->get_id() != self) continue;
    retired_.splice(retired_.end(), threads_, it);
    running_.store(threads_.size(), std::memory_order_relaxed);
    waiting_.fetch_sub(1);
    return true;
  }
  return false;
}

void EventEngine::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_.get() >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  }
  std::list<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
    threads.splice(threads.end(), retired_);
  }
  for (auto& t : threads) t.join();
}

size_t EventEngine::threads() const { return running_.load(std::memory_order_relaxed); }

size_t EventEngine::driven() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

Status EventEngine::Add(std::shared_ptr<Driven> driven, Deadline deadline) {
  auto e = std::make_shared<Entry>();
  e->driven = std::move(driven);
  e->fd = e->driven->fd();
  if (e->fd < 0) return InvalidArgumentError("event engine: the connection has no notify_fd");
  {
    std::lock_guard<std::mutex> lock(mu_);
    e->id = next_id_++;
    entries_.emplace(e->id, e);
  }
  // Waiting before it is armed: its first event finds it claimable. Its
  // deadline only once it is in the epoll set: a timer's owner re-arms it
  // there.
  e->state.store(kWaiting);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = e->id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, e->fd, &ev) != 0) {
    const int err = errno;
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(e->id);
    if (entries_.empty()) none_driven_.notify_all();
    return ResourceExhaustedError(std::string("event engine: epoll_ctl: ") + std::strerror(err));
  }
  SetTimer(*e, deadline);
  return Status::Ok();
}

void EventEngine::BeforeBlocking() {
  if (waiting_.load(std::memory_order_acquire) > 0 || stopping_.load()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.load() > 0 || threads_.size() >= options_.max_threads) return;
  StartThread().IgnoreError();  // none to spare: the others wait for this one
}

bool EventEngine::TryLinger() {
  size_t now = lingering_.load(std::memory_order_relaxed);
  do {
    // One thread is always left for the events of everyone else.
    if (now + 1 >= options_.max_threads || stopping_.load()) return false;
  } while (!lingering_.compare_exchange_weak(now, now + 1, std::memory_order_relaxed));
  lingering_here_ = true;
  if (waiting_.load(std::memory_order_acquire) > 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.load() > 0) return true;
  if (threads_.size() < options_.max_threads && StartThread().ok()) return true;
  lingering_here_ = false;
  lingering_.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void EventEngine::EndLinger() {
  lingering_here_ = false;
  lingering_.fetch_sub(1, std::memory_order_relaxed);
}

EventEngine::Owner EventEngine::CurrentOwner() const {
  Owner owner;
  if (current_ != nullptr) owner.entry = *current_;
  owner.thread = std::this_thread::get_id();
  owner.lingering = lingering_here_;
  return owner;
}

void EventEngine::GiveUp(const Owner& owner) {
  if (!owner.entry) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = threads_.begin(); it != threads_.end(); ++it) {
      if (it->get_id() != owner.thread) continue;
      it->detach();  // it leaves by itself (LeaveGivenUp)
      threads_.erase(it);
      running_.store(threads_.size(), std::memory_order_relaxed);
      break;
    }
    if (owner.lingering) lingering_.fetch_sub(1, std::memory_order_relaxed);
    if (!stopping_.load() && threads_.size() < options_.threads) StartThread().IgnoreError();
  }
  Remove(owner.entry);
}

void EventEngine::LeaveGivenUp() { given_up_ = true; }
bool EventEngine::GivenUp() { return given_up_; }

void EventEngine::InterruptAll() {
  std::vector<std::shared_ptr<Driven>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : entries_) all.push_back(e->driven);
  }
  for (const auto& d : all) d->Interrupt();
  std::unique_lock<std::mutex> lock(mu_);
  none_driven_.wait(lock, [this] { return entries_.empty(); });
}

std::shared_ptr<EventEngine::Entry> EventEngine::Find(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second;
}

bool EventEngine::Claim(Entry& e) {
  uint8_t s = e.state.load(std::memory_order_acquire);
  for (;;) {
    switch (s) {
      case kWaiting:
        if (e.state.compare_exchange_weak(s, kOwned, std::memory_order_acq_rel)) return true;
        break;
      case kOwned:
        if (e.state.compare_exchange_weak(s, kOwnedAgain, std::memory_order_acq_rel)) return false;
        break;
      default:  // kOwnedAgain, kGone
        return false;
    }
  }
}

void EventEngine::Run(const std::shared_ptr<Entry>& e) {
  struct Current {  // CurrentOwner()'s entry while this runs
    explicit Current(const std::shared_ptr<Entry>& e) { current_ = &e; }
    ~Current() { current_ = nullptr; }
  } current(e);
  std::optional<Deadline> next = e->driven->Drive();
  for (;;) {
    if (given_up_) return;  // the engine may be gone
    if (!next) {
      Remove(e);
      return;
    }
    SetTimer(*e, *next);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.u64 = e->id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, e->fd, &ev) != 0) {
      e->driven->Interrupt();  // cannot wait for it: end it
      next = e->driven->Drive();
      continue;
    }
    // Re-armed first, then released: an event in between asks us (the
    // owner) to drive it again.
    uint8_t s = kOwned;
    if (e->state.compare_exchange_strong(s, kWaiting, std::memory_order_acq_rel)) return;
    e->state.store(kOwned, std::memory_order_release);
    next = e->driven->Drive();
  }
}

void EventEngine::SetTimer(Entry& e, Deadline deadline) {
  const int64_t at = deadline.infinite() ? INT64_MAX
                                         : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               deadline.when().time_since_epoch())
                                               .count();
  // A timer that fires as early or earlier is kept; one racing to fire just
  // now asks the owner (Claim) to drive again, which sets this one anew.
  if (e.timer_at.load(std::memory_order_acquire) <= at) return;
  std::lock_guard<std::mutex> lock(timer_mu_);
  if (e.has_timer) timers_.erase(e.timer);
  e.has_timer = true;
  e.timer_at.store(at, std::memory_order_release);
  e.timer = timers_.emplace(deadline.when(), e.id);
  if (deadline.when() < timer_fd_at_) ArmTimerFdLocked();
}

void EventEngine::ArmTimerFdLocked() {
  timer_fd_at_ = timers_.empty() ? Deadline::Clock::time_point::max() : timers_.begin()->first;
  std::optional<Deadline::Clock::time_point> at;
  if (!timers_.empty()) at = std::max(timer_fd_at_, Deadline::Clock::time_point(
                                                        std::chrono::nanoseconds(1)));
  SetTimerFd(timer_fd_.get(), at);
}

void EventEngine::Remove(const std::shared_ptr<Entry>& e) {
  e->state.store(kGone, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    if (e->has_timer) timers_.erase(e->timer);
    e->has_timer = false;
    e->timer_at.store(INT64_MAX, std::memory_order_release);
  }
  // Before the descriptor can close (its number may be reused at once).
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, e->fd, nullptr);
  e->driven->Ended();
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(e->id);
  if (entries_.empty()) none_driven_.notify_all();
}

void EventEngine::RunTimers() {
  uint64_t expirations = 0;
  [[maybe_unused]] ssize_t r = ::read(timer_fd_.get(), &expirations, sizeof(expirations));
  std::vector<std::shared_ptr<Entry>> due;
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    const auto now = Deadline::Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      const uint64_t id = timers_.begin()->second;
      timers_.erase(timers_.begin());
      if (std::shared_ptr<Entry> e = Find(id)) {
        e->has_timer = false;
        e->timer_at.store(INT64_MAX, std::memory_order_release);
        due.push_back(std::move(e));
      }
    }
    ArmTimerFdLocked();
  }
  // Armed again before driving: another thread takes the next deadlines.
  epoll_event tick{};
  tick.events = EPOLLIN | EPOLLONESHOT;
  tick.data.u64 = kTimerId;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, timer_fd_.get(), &tick);
  for (const auto& e : due) {
    if (!Claim(*e)) continue;  // its owner drives it again
    waiting_.fetch_sub(1);
    Run(e);
    if (given_up_) return;  // the engine may be gone
    waiting_.fetch_add(1);
  }
}

void EventEngine::Loop() {
  // Counted in waiting_ by StartThread.
  while (!stopping_.load(std::memory_order_acquire)) {
    epoll_event ev{};
    // The threads beyond Options::threads, started for blocked or lingering
    // owners, leave once no event came for spare_idle; the others wait.
    const bool spare = running_.load(std::memory_order_relaxed) > options_.threads;
    const int n = ::epoll_wait(epoll_.get(), &ev, 1,
                               spare ? static_cast<int>(options_.spare_idle.count()) : -1);
    if (n == 0 && spare && RetireIfSpare()) return;
    if (n <= 0 || ev.data.u64 == kWakeId) continue;  // EINTR, stop
    if (ev.data.u64 == kTimerId) {
      RunTimers();
      if (given_up_) return;  // the engine may be gone
      continue;
    }
    std::shared_ptr<Entry> e = Find(ev.data.u64);
    if (!e || !Claim(*e)) continue;
    waiting_.fetch_sub(1);
    Run(e);
    if (given_up_) return;  // the engine may be gone
    waiting_.fetch_add(1);
  }
  waiting_.fetch_sub(1);
}

}  // namespace naarpc::internal
