#include "gpu/pinned_pool.h"

#include <cuda_runtime_api.h>

#include <map>
#include <utility>

#include "util/fmt.h"

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

PinnedPool::~PinnedPool() {
  for (void* p : all_) (void)cudaFreeHost(p);
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
  // Pinning is slow (the kernel locks every page); workers pin their buffers at the same time.
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, buffer_bytes_, cudaHostAllocDefault);
  std::lock_guard lock(mutex_);
  --pinning_;
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::no_space, fmt::format("pinning a {}-byte staging buffer failed: {}", buffer_bytes_,
                                                    cudaGetErrorString(err)));
  }
  all_.push_back(p);
  return Buffer(this, p);
}

void PinnedPool::give_back(void* data) {
  std::lock_guard lock(mutex_);
  free_.push_back(data);
}

}  // namespace snapcache::gpu
