// LatencyHistogram: a fixed-bucket, lock-free histogram of durations (or any
// non-negative 64-bit value), for the per-routine statistics
// (naarpc/call_stats.h). Log-linear buckets: values below 16 have a bucket
// each; above, every power of two is split into 16 equal buckets, so a
// bucket's width is at most 1/16 (6.25 %) of its lower bound, over the whole
// 64-bit range. Record() is two or three relaxed atomic operations; counts,
// sum and max are exact under any concurrency. Snapshots taken while
// records run see each record whole or not at all per field (the sum may
// include a record whose bucket is not counted yet).
#ifndef NAARPC_HISTOGRAM_H_
#define NAARPC_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace naarpc {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 4;
  static constexpr size_t kSubBuckets = size_t{1} << kSubBits;  // per power of two
  static constexpr size_t kBuckets = (64 - kSubBits + 1) * kSubBuckets;

  // The bucket of `value`, and the smallest / largest value of a bucket.
  static size_t BucketOf(uint64_t value) {
    if (value < kSubBuckets) return static_cast<size_t>(value);
    const int e = 63 - __builtin_clzll(value);  // >= kSubBits
    const uint64_t sub = (value >> (e - kSubBits)) & (kSubBuckets - 1);
    return static_cast<size_t>(e - kSubBits + 1) * kSubBuckets + static_cast<size_t>(sub);
  }
  static uint64_t BucketLower(size_t bucket) {
    if (bucket < kSubBuckets) return bucket;
    const int e = static_cast<int>(bucket / kSubBuckets) + kSubBits - 1;
    const uint64_t sub = bucket % kSubBuckets;
    return (kSubBuckets + sub) << (e - kSubBits);
  }
  static uint64_t BucketUpper(size_t bucket) {
    if (bucket < kSubBuckets) return bucket;
    const int e = static_cast<int>(bucket / kSubBuckets) + kSubBits - 1;
    return BucketLower(bucket) + ((uint64_t{1} << (e - kSubBits)) - 1);
  }

  void Record(uint64_t value) {
    buckets_[BucketOf(value)].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(value, std::memory_order_relaxed);
    uint64_t max = max_.load(std::memory_order_relaxed);
    while (value > max &&
           !max_.compare_exchange_weak(max, value, std::memory_order_relaxed)) {
    }
  }

  struct Snapshot {
    uint64_t count = 0;
    uint64_t sum = 0;
    uint64_t max = 0;
    // (bucket index, count) of the non-empty buckets, in increasing order.
    std::vector<std::pair<uint32_t, uint64_t>> buckets;
    // The value at quantile q (0..1): the upper bound of the bucket holding
    // the ceil(q * count)-th value (at most max); 0 if empty.
    uint64_t Percentile(double q) const;
    // Values <= `bound` (Prometheus' cumulative "le" buckets): exact when
    // `bound` is a bucket's upper bound.
    uint64_t CountAtMost(uint64_t bound) const;
  };
  Snapshot Take() const;

 private:
  // (The count is the buckets' total: one atomic operation less per record.)
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
};

}  // namespace naarpc

#endif  // NAARPC_HISTOGRAM_H_
