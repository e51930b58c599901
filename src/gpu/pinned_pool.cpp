#include "gpu/pinned_pool.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "util/fmt.h"
#include "util/host_memory.h"

namespace snapcache::gpu {

std::shared_ptr<PinnedPool> PinnedPool::shared(std::uint64_t total_bytes, std::uint64_t buffer_bytes) {
  static std::mutex mutex;
  static std::map<std::pair<std::uint64_t, std::uint64_t>, std::weak_ptr<PinnedPool>> pools;
  std::lock_guard lock(mutex);
  auto& slot = pools[{total_bytes, buffer_bytes}];
  if (auto pool = slot.lock()) return pool;
  const std::size_t capacity = buffer_bytes == 0 ? 0 : static_cast<std::size_t>(total_bytes / buffer_bytes);
  std::shared_ptr<PinnedPool> pool(new PinnedPool(buffer_bytes, capacity));
  slot = pool;
  return pool;
}

namespace {

// Page-locked memory of at least `buffer_bytes`, the fast way first. In a new process,
// cudaHostAlloc locks 4 KiB pages one fault at a time: 400 ms/GiB on the GPU machine
// (bench/pinned_memory_bench.cpp). Anonymous memory on transparent huge pages, touched once and
// then registered, takes 71 ms/GiB there. Where huge pages or registration are refused, the
// ordinary allocation.
void* pin(std::uint64_t buffer_bytes, bool& registered, cudaError_t& err) {
  registered = false;
  if (void* p = util::map_huge_pages(buffer_bytes)) {
    std::memset(p, 0, util::huge_page_span(buffer_bytes));  // fault the pages in before the driver locks them
    if (cudaHostRegister(p, util::huge_page_span(buffer_bytes), cudaHostRegisterDefault) == cudaSuccess) {
      registered = true;
      return p;
    }
    (void)cudaGetLastError();
    util::unmap_huge_pages(p, buffer_bytes);
  }
  void* p = nullptr;
  err = cudaHostAlloc(&p, buffer_bytes, cudaHostAllocDefault);
  return err == cudaSuccess ? p : nullptr;
}

}  // namespace

PinnedPool::~PinnedPool() {
  for (const Pinned& p : all_) {
    if (p.registered) {
      (void)cudaHostUnregister(p.data);
      util::unmap_huge_pages(p.data, buffer_bytes_);
    } else {
      (void)cudaFreeHost(p.data);
    }
  }
}

PinnedPool::Buffer::~Buffer() {
  if (pool_ != nullptr) pool_->give_back(data_);
}

Result<PinnedPool::Buffer> PinnedPool::take() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      void* p = free_.back();
      free_.pop_back();
      return Buffer(this, p);
    }
    if (all_.size() + pinning_ >= capacity_)
      return Status(StatusCode::busy, fmt::format("all {} pinned staging buffers are in use", capacity_));
    ++pinning_;
  }
  auto p = pin_counted();
  if (!p) return p.status();
  return Buffer(this, *p);
}

void PinnedPool::fill(std::size_t count) {
  const std::size_t limit = std::min(count, capacity_);
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (all_.size() + pinning_ >= limit) return;
      ++pinning_;
    }
    auto p = pin_counted();
    if (!p) return;
    give_back(*p);
  }
}

Result<void*> PinnedPool::pin_counted() {
  // Pinning is slow (the kernel locks every page); workers pin their buffers at the same time.
  bool registered = false;
  cudaError_t err = cudaSuccess;
  void* p = pin(buffer_bytes_, registered, err);
  std::lock_guard lock(mutex_);
  --pinning_;
  if (p == nullptr) {
    (void)cudaGetLastError();
    return Status(StatusCode::no_space, fmt::format("pinning a {}-byte staging buffer failed: {}", buffer_bytes_,
                                                    cudaGetErrorString(err)));
  }
  all_.push_back({p, registered});
  return p;
}

std::size_t PinnedPool::pinned() {
  std::lock_guard lock(mutex_);
  return all_.size();
}

void PinnedPool::give_back(void* data) {
  std::lock_guard lock(mutex_);
  free_.push_back(data);
}

}  // namespace snapcache::gpu
