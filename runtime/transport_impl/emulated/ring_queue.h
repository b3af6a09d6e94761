// RingQueue: a FIFO over one power-of-two ring that grows by doubling and
// never shrinks, so a queue that is filled and drained call after call
// allocates nothing once it has reached its working size (std::deque frees
// and allocates a block each time its ends cross one). Indexing, iteration,
// and insert/erase in the middle (shifting the elements behind) as the
// emulated connection's queues need them. Not thread-safe.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_RING_QUEUE_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_RING_QUEUE_H_

#include <cstddef>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>

namespace naarpc::internal {

// REQUIRES: T is default-constructible and movable.
template <typename T>
class RingQueue {
 public:
  template <bool kConst>
  class Iter {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = std::conditional_t<kConst, const T*, T*>;
    using reference = std::conditional_t<kConst, const T&, T&>;
    using Queue = std::conditional_t<kConst, const RingQueue, RingQueue>;

    Iter() = default;
    Iter(Queue* q, size_t i) : q_(q), i_(i) {}
    reference operator*() const { return (*q_)[i_]; }
    pointer operator->() const { return &(*q_)[i_]; }
    Iter& operator++() { return ++i_, *this; }
    Iter operator++(int) { return Iter(q_, i_++); }
    Iter& operator--() { return --i_, *this; }
    Iter& operator+=(difference_type n) { return i_ += n, *this; }
    Iter operator+(difference_type n) const { return Iter(q_, i_ + n); }
    Iter operator-(difference_type n) const { return Iter(q_, i_ - n); }
    difference_type operator-(const Iter& o) const {
      return static_cast<difference_type>(i_) - static_cast<difference_type>(o.i_);
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }
    size_t index() const { return i_; }

   private:
    Queue* q_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // REQUIRES: i < size().
  T& operator[](size_t i) { return slots_[(head_ + i) & mask_]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & mask_]; }
  // REQUIRES: !empty().
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  T& back() { return (*this)[size_ - 1]; }

  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, size_); }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, size_); }

  void push_back(const T& v) { push_back(T(v)); }
  void push_back(T&& v) {
    if (size_ == capacity_) Grow();
    slots_[(head_ + size_) & mask_] = std::move(v);
    ++size_;
  }
  // REQUIRES: !empty().
  void pop_front() {
    if constexpr (!std::is_trivially_destructible_v<T>) slots_[head_] = T{};  // drops what it holds
    head_ = (head_ + 1) & mask_;
    --size_;
  }
  void clear() {
    while (!empty()) pop_front();
  }
  void push_front(T&& v) {
    if (size_ == capacity_) Grow();
    head_ = (head_ - 1) & mask_;
    slots_[head_] = std::move(v);
    ++size_;
  }
  // Inserts `v` before `pos`, shifting the elements on the shorter side of
  // `pos` by one (none at the front).
  void insert(iterator pos, T&& v) {
    const size_t at = pos.index();
    if (at < size_ - at) {
      push_front(std::move(v));
      for (size_t i = 0; i < at; ++i) std::swap((*this)[i], (*this)[i + 1]);
    } else {
      push_back(std::move(v));
      for (size_t i = size_ - 1; i > at; --i) std::swap((*this)[i], (*this)[i - 1]);
    }
  }
  // Removes the element at `pos`, shifting the ones behind it forward.
  void erase(iterator pos) {
    for (size_t i = pos.index(); i + 1 < size_; ++i) (*this)[i] = std::move((*this)[i + 1]);
    if constexpr (!std::is_trivially_destructible_v<T>) (*this)[size_ - 1] = T{};
    --size_;
  }

 private:
  void Grow() {
    const size_t capacity = capacity_ == 0 ? 16 : capacity_ * 2;
    auto slots = std::make_unique<T[]>(capacity);
    for (size_t i = 0; i < size_; ++i) slots[i] = std::move((*this)[i]);
    slots_ = std::move(slots);
    capacity_ = capacity;
    mask_ = capacity - 1;
    head_ = 0;
  }

  std::unique_ptr<T[]> slots_;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_RING_QUEUE_H_
