// Pinned (page-locked) host buffers for staging uploads: allocated once, on first use, and kept
// for the life of the process. Pinning is slow (seconds for many GiB), so a load must never pin
// memory of the model's size; it borrows from here instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "snapcache/status.h"

namespace snapcache::gpu {

class PinnedPool {
 public:
  // The pool for buffers of `buffer_bytes`, holding at most `total_bytes`; one per size pair.
  static std::shared_ptr<PinnedPool> shared(std::uint64_t total_bytes, std::uint64_t buffer_bytes);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  std::uint64_t buffer_bytes() const { return buffer_bytes_; }
  std::size_t capacity() const { return capacity_; }  // buffers, at most
  std::size_t pinned();                                // buffers pinned so far

  // A buffer back to the pool when it goes away.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept : pool_(other.pool_), data_(other.data_) { other.pool_ = nullptr; }
    Buffer& operator=(Buffer&&) = delete;
    Buffer(const Buffer&) = delete;
    ~Buffer();
    std::byte* data() const { return static_cast<std::byte*>(data_); }

   private:
    friend class PinnedPool;
    Buffer(PinnedPool* pool, void* data) : pool_(pool), data_(data) {}
    PinnedPool* pool_ = nullptr;
    void* data_ = nullptr;
  };

  // A free buffer, pinning a new one if fewer than capacity() exist; busy when all are lent.
  Result<Buffer> take();

  // Pins buffers on the calling thread until `count` (at most capacity()) are pinned or being
  // pinned, whoever pins them, each free for take() the moment it is pinned: a load pins its
  // staging buffers while its tiers work, and a worker that finds none free yet pins its own
  // beside it rather than waiting. Stops at the first failure, which take() then meets itself.
  void fill(std::size_t count);

 private:
  PinnedPool(std::uint64_t buffer_bytes, std::size_t capacity) : buffer_bytes_(buffer_bytes), capacity_(capacity) {}
  void give_back(void* data);
  // Pins one buffer, outside the lock, counted in pinning_ by the caller; added to all_.
  Result<void*> pin_counted();

  const std::uint64_t buffer_bytes_;
  const std::size_t capacity_;
  std::mutex mutex_;
  struct Pinned {
    void* data = nullptr;
    bool registered = false;  // our mapping, registered with the driver; else cudaHostAlloc's
  };
  std::vector<Pinned> all_;
  std::vector<void*> free_;
  std::size_t pinning_ = 0;  // buffers being pinned now, outside the lock
};

}  // namespace snapcache::gpu
