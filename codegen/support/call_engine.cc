#include "naarpc/call_engine.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace naarpc::codegen {

namespace {
constexpr uint64_t kWakeTag = 0;  // epoll data of the wake-up eventfd; ops count from 1
}  // namespace

struct CallEngine::Op {
  enum class State : uint8_t { kWaiting, kConnecting, kRunning, kBlocking };
  uint64_t id = 0;
  std::shared_ptr<SessionPool> pool;
  Deadline deadline = Deadline::Infinite();
  std::unique_ptr<AsyncCall> call;
  std::function<void(Status)> done;
  State state = State::kWaiting;
  int fd = -1;  // registered with epoll while running
  bool has_deadline_entry = false;
  std::multimap<Deadline::Clock::time_point, uint64_t>::iterator deadline_entry;
};

CallEngine::CallEngine(size_t max_connecting) : max_connecting_(std::max<size_t>(1, max_connecting)) {}

CallEngine::~CallEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  if (thread_.joinable()) {
    Wake();
    thread_.join();
  }
  // Connects and blocking calls end by their deadlines; their results are
  // then queued for the (stopped) loop and cancelled below.
  helpers_.reset();
  for (auto& pool : pools_) pool->SetFreedListener(nullptr);
  CancelAll();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool CallEngine::EnsureStartedLocked() {
  if (thread_.joinable()) return true;
  if (!helpers_) helpers_ = std::make_unique<AsyncRunner>(max_connecting_);
  if (epoll_fd_ < 0) epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (epoll_fd_ < 0 || wake_fd_ < 0 || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    start_error_ = ResourceExhaustedError(std::string("async call engine: ") + std::strerror(errno));
    return false;  // tried again with the next call
  }
  thread_ = std::thread([this] {
    engine_thread_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    Loop();
  });
  pthread_setname_np(thread_.native_handle(), "naarpc-engine");  // before it first runs
  return true;
}

void CallEngine::Wake() {
  // On the engine thread (a callback submitting, a session returned): the
  // loop's next epoll_wait does not sleep, no system call needed here.
  if (std::this_thread::get_id() == engine_thread_id_.load(std::memory_order_relaxed)) {
    woken_locally_ = true;
    return;
  }
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

void CallEngine::Submit(std::shared_ptr<SessionPool> pool, Deadline deadline,
                        std::unique_ptr<AsyncCall> call, std::function<void(Status)> done) {
  auto op = std::make_unique<Op>();
  op->pool = std::move(pool);
  op->deadline = deadline;
  op->call = std::move(call);
  op->done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!EnsureStartedLocked()) {
      helpers_->Run([s = start_error_.WithContext(op->pool->routine())] { return s; },
                    std::move(op->done));
      return;
    }
    if (std::find(pools_.begin(), pools_.end(), op->pool) == pools_.end()) {
      pools_.push_back(op->pool);
      op->pool->SetFreedListener([this] { Wake(); });
    }
    incoming_.push_back(std::move(op));
  }
  Wake();
}

void CallEngine::Reject(Status status, std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!EnsureStartedLocked()) {
      helpers_->Run([status] { return status; }, std::move(done));
      return;
    }
    rejected_.emplace_back(std::move(done), std::move(status));
  }
  Wake();
}

void CallEngine::RunBlocking(std::function<Status()> call, std::function<void(Status)> done) {
  AsyncRunner* helpers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!helpers_) helpers_ = std::make_unique<AsyncRunner>(max_connecting_);
    helpers = helpers_.get();
  }
  helpers->Run(std::move(call), std::move(done));
}

void CallEngine::Loop() {
  std::array<epoll_event, 64> events;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    TakeIncoming();
    TakeResults();
    StartWaiting();
    ExpireDue();
    int timeout_ms = -1;
    if (!deadlines_.empty()) {
      const auto left = deadlines_.begin()->first - Deadline::Clock::now();
      timeout_ms = left <= Deadline::Clock::duration::zero()
                       ? 0
                       : static_cast<int>(std::min<int64_t>(
                             std::chrono::ceil<std::chrono::milliseconds>(left).count(), 1 << 30));
    }
    if (std::exchange(woken_locally_, false)) timeout_ms = 0;
    // Fails only with EINTR here (valid descriptors and buffer).
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kWakeTag) {
        uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof count);
        continue;
      }
      auto it = ops_.find(events[i].data.u64);
      if (it != ops_.end() && it->second->state == Op::State::kRunning) Progress(*it->second);
    }
  }
}

void CallEngine::TakeIncoming() {
  std::vector<std::unique_ptr<Op>> incoming;
  std::vector<std::pair<std::function<void(Status)>, Status>> rejected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
    rejected.swap(rejected_);
  }
  for (auto& [done, status] : rejected) done(std::move(status));
  for (auto& op : incoming) {
    op->id = next_id_++;
    if (!op->deadline.infinite()) {
      op->deadline_entry = deadlines_.emplace(op->deadline.when(), op->id);
      op->has_deadline_entry = true;
    }
    waiting_[op->pool.get()].push_back(op->id);
    ops_.emplace(op->id, std::move(op));
  }
}

void CallEngine::TakeResults() {
  std::vector<std::pair<uint64_t, Result<SessionPool::Lease>>> connected;
  std::vector<std::pair<uint64_t, Status>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected.swap(connected_);
    finished.swap(finished_);
  }
  for (auto& [id, lease] : connected) {
    auto it = ops_.find(id);
    if (it == ops_.end()) continue;  // the lease goes back to its pool
    Op& op = *it->second;
    if (!lease.ok()) {
      Complete(id, lease.status());
      continue;
    }
    if (!op.deadline.infinite()) {
      op.deadline_entry = deadlines_.emplace(op.deadline.when(), op.id);
      op.has_deadline_entry = true;
    }
    StartOnSession(op, std::move(lease).value());
  }
  for (auto& [id, status] : finished) Complete(id, std::move(status));
}

void CallEngine::StartWaiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::deque<uint64_t>& queue = it->second;
    while (!queue.empty()) {
      auto op_it = ops_.find(queue.front());
      if (op_it == ops_.end()) {  // expired meanwhile
        queue.pop_front();
        continue;
      }
      Op& op = *op_it->second;
      bool may_open = false;
      SessionPool::Lease lease = op.pool->TryAcquire(&may_open);
      if (!lease && !may_open) break;  // all in use: waits for a freed one
      queue.pop_front();
      if (lease) {
        StartOnSession(op, std::move(lease));
      } else {
        Connect(op);
      }
    }
    it = queue.empty() ? waiting_.erase(it) : std::next(it);
  }
}

void CallEngine::Connect(Op& op) {
  op.state = Op::State::kConnecting;
  if (op.has_deadline_entry) {  // the connect is bounded by the deadline itself
    deadlines_.erase(op.deadline_entry);
    op.has_deadline_entry = false;
  }
  helpers_->Run(
      [this, id = op.id, pool = op.pool, deadline = op.deadline] {
        Result<SessionPool::Lease> lease = pool->OpenReserved(deadline);
        {
          std::lock_guard<std::mutex> lock(mu_);
          connected_.emplace_back(id, std::move(lease));
        }
        Wake();
        return Status::Ok();
      },
      [](Status) {});
}

void CallEngine::StartOnSession(Op& op, SessionPool::Lease lease) {
  Status s = op.call->Start(std::move(lease));
  if (!s.ok()) {
    Complete(op.id, std::move(s));
    return;
  }
  ClientSession* session = op.call->session();
  const int fd = session->notify_fd();
  if (fd < 0) {
    // No descriptor to watch: the rest of the call blocks a helper thread.
    op.state = Op::State::kBlocking;
    if (op.has_deadline_entry) {
      deadlines_.erase(op.deadline_entry);
      op.has_deadline_entry = false;
    }
    helpers_->Run(
        [this, id = op.id, session] {
          Status status = session->FinishCall();
          {
            std::lock_guard<std::mutex> lock(mu_);
            finished_.emplace_back(id, std::move(status));
          }
          Wake();
          return Status::Ok();
        },
        [](Status) {});
    return;
  }
  op.state = Op::State::kRunning;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = op.id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    session->AbandonCall();
    Complete(op.id, ResourceExhaustedError(op.pool->routine() + ": async call engine: epoll_ctl: " +
                                           std::strerror(errno)));
    return;
  }
  op.fd = fd;
  Progress(op);  // what completed already, and arms the notification
}

void CallEngine::Progress(Op& op) {
  std::optional<Status> result = op.call->session()->ContinueCall();
  if (result) Complete(op.id, std::move(*result));
}

void CallEngine::Complete(uint64_t id, Status status) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return;
  std::unique_ptr<Op> op = std::move(it->second);
  ops_.erase(it);
  if (op->has_deadline_entry) deadlines_.erase(op->deadline_entry);
  if (op->fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, op->fd, nullptr);
  Status result = op->call->Finish(std::move(status));
  op->call->Release();  // may wake us (the session's pool): handled next round
  op->call.reset();     // the arguments it captured go before `done` runs
  op->done(std::move(result));
}

void CallEngine::ExpireDue() {
  const auto now = Deadline::Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    Op& op = *ops_.at(id);
    deadlines_.erase(deadlines_.begin());
    op.has_deadline_entry = false;
    if (op.state == Op::State::kRunning) {
      Progress(op);  // past its deadline, ContinueCall ends the call
      if (ops_.count(id) != 0) {
        op.call->session()->AbandonCall();
        Complete(id, DeadlineExceededError(op.pool->routine() +
                                           ": the call did not end by its deadline"));
      }
    } else {
      Complete(id, DeadlineExceededError(op.pool->routine() +
                                         ": no free session before the deadline (all " +
                                         std::to_string(op.pool->max_sessions()) +
                                         " in use)"));
    }
  }
}

void CallEngine::CancelAll() {
  // The loop has stopped and the helpers are joined: this thread is alone.
  TakeIncoming();
  {
    std::vector<std::pair<uint64_t, Result<SessionPool::Lease>>> connected;
    {
      std::lock_guard<std::mutex> lock(mu_);
      connected.swap(connected_);
    }
    connected.clear();  // sessions back to their pools, unused
  }
  std::vector<std::pair<uint64_t, Status>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished.swap(finished_);
  }
  for (auto& [id, status] : finished) Complete(id, std::move(status));
  while (!ops_.empty()) {
    Op& op = *ops_.begin()->second;
    if (op.state == Op::State::kRunning) op.call->session()->AbandonCall();
    Complete(op.id, CancelledError(op.pool->routine() +
                                   ": the client was destroyed before the call ended"));
  }
}

}  // namespace naarpc::codegen
