#include "util/parallel.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace snapcache::util {

std::size_t worker_count(std::size_t cap) {
  // Asked once: glibc answers by reading sysfs each time, and the layout kernels ask once per
  // tensor (4,585 times for a TP 8 rank's load, about 2 ms).
  static const std::size_t hw = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<std::size_t>(hw, 1, cap);
}

Status parallel_for(std::size_t n, std::size_t threads,
                    const std::function<Status(std::size_t)>& fn) {
  threads = std::clamp<std::size_t>(threads, 1, std::max<std::size_t>(n, 1));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      std::size_t i = next.fetch_add(1);
      if (i >= n) return;
      Status st = fn(i);
      if (!st) {
        std::lock_guard lock(mu);
        if (!failed.exchange(true)) first_error = std::move(st);
        return;
      }
    }
  };
  if (threads == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads - 1);
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
  }
  return failed ? first_error : Status::ok();
}

}  // namespace snapcache::util
