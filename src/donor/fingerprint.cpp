#include "donor/fingerprint.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "gpu/cuda_status.h"
#include "gpu/pinned_pool.h"
#include "util/hash.h"
#include "util/parallel.h"

namespace snapcache::donor {
namespace {

constexpr std::uint64_t kPiece = 64ull << 20;
constexpr std::size_t kMaxThreads = 8;

}  // namespace

Result<std::uint64_t> fingerprint_device_bytes(int device_ordinal, const std::byte* data, std::uint64_t bytes) {
  const std::size_t pieces = (bytes + kPiece - 1) / kPiece;
  const std::size_t threads = std::min(util::worker_count(kMaxThreads), std::max<std::size_t>(pieces, 1));
  auto pool = gpu::PinnedPool::shared(threads * kPiece, kPiece);
  std::vector<std::uint64_t> piece_hashes(pieces);
  SNAPCACHE_RETURN_IF_ERROR(util::parallel_for(pieces, threads, [&](std::size_t i) -> Status {
    if (cudaError_t err = cudaSetDevice(device_ordinal); err != cudaSuccess)
      return gpu::cuda_status(err, "selecting the device to fingerprint");
    auto buffer = pool->take();  // one per thread: the pool holds as many as there are threads
    if (!buffer) return buffer.status();
    const std::uint64_t n = std::min(kPiece, bytes - i * kPiece);
    cudaError_t err = cudaMemcpyAsync(buffer->data(), data + i * kPiece, n, cudaMemcpyDeviceToHost, cudaStreamPerThread);
    if (err == cudaSuccess) err = cudaStreamSynchronize(cudaStreamPerThread);
    if (err != cudaSuccess) return gpu::cuda_status(err, "copying device memory back to fingerprint it");
    piece_hashes[i] = util::xxh3_64(buffer->data(), n);
    return Status::ok();
  }));
  return util::xxh3_64(piece_hashes.data(), piece_hashes.size() * sizeof(std::uint64_t));
}

}  // namespace snapcache::donor
