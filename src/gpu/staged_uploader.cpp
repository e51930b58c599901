// The staged upload engine. Work is chunks of storages; each worker thread holds one pinned
// buffer and one CUDA stream, and for each chunk it takes: copies the host bytes into its buffer
// (reading the page cache or the snapshot's mapping at memory speed), sends the buffer to the
// device on its stream, and waits for that copy before refilling the buffer. With many workers the
// reads of some overlap the bus transfers of others.
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "gpu/pinned_pool.h"
#include "snapcache/gpu_upload.h"
#include "torch/exceptions.h"
#include "util/fmt.h"
#include "util/parallel.h"

namespace snapcache {
namespace {

// Device storages start at this alignment inside the shared allocation, as cudaMalloc's would.
constexpr std::uint64_t kDeviceAlignment = 512;

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

Status cuda_status(cudaError_t err, const std::string& what) {
  (void)cudaGetLastError();  // clear it, so the next call does not report it again
  return Status(err == cudaErrorMemoryAllocation ? StatusCode::no_space : StatusCode::io_error,
                fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

// Bytes of a storage from the file it was served from: the page cache, without faulting in a
// mapping page by page.
Status read_file_region(const FileRegion& file, std::uint64_t offset, std::byte* out, std::uint64_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::pread(file.fd, out, bytes, static_cast<off_t>(file.offset + offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? Status::from_errno(errno, "reading a snapshot data file") : Status(StatusCode::damaged, "a snapshot data file ends early");
    out += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::uint64_t>(n);
  }
  return Status::ok();
}

struct Chunk {
  std::uint32_t storage = 0;
  std::uint64_t offset = 0;  // within the storage
  std::uint64_t bytes = 0;
};

// The first error of any worker; the others stop taking work when one is set.
class FirstError {
 public:
  void set(Status st) {
    std::lock_guard lock(mutex_);
    if (!failed_.exchange(true)) status_ = std::move(st);
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  Status status() const { return failed() ? status_ : Status::ok(); }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  Status status_;
};

class StagedUploader final : public Uploader {
 public:
  explicit StagedUploader(const StagedUploadOptions& options) : options_(options) {}
  std::string name() const override { return "staged upload engine"; }

  Result<NamedTensors> upload(const NamedTensors& tensors, const HostStorages& host, c10::Device device) override {
    if (!device.is_cuda()) return per_storage_uploader()->upload(tensors, host, device);
    if (host.storage_of.size() != tensors.size())
      return Status(StatusCode::invalid_argument, "the host storages do not describe these tensors");
    if (options_.chunk_bytes == 0 || options_.pinned_bytes < options_.chunk_bytes)
      return Status(StatusCode::invalid_argument,
                    fmt::format("the pinned staging pool ({} bytes) holds no {}-byte chunk", options_.pinned_bytes,
                                options_.chunk_bytes));
    // One device allocation for the whole load, each storage at an aligned offset in it.
    std::vector<std::uint64_t> offsets;
    std::uint64_t total = 0;
    for (const HostStorage& s : host.storages) {
      offsets.push_back(total);
      total = align_up(total + s.nbytes, kDeviceAlignment);
    }
    auto arena = guarded([&]() -> Result<at::Tensor> {
      return at::empty({static_cast<std::int64_t>(std::max<std::uint64_t>(total, 1))},
                       at::TensorOptions().dtype(at::kByte).device(device));
    });
    if (!arena) return arena.status().with_context("device allocation of " + std::to_string(total) + " bytes");
    SNAPCACHE_RETURN_IF_ERROR(copy_all(host, offsets, static_cast<std::byte*>(arena->data_ptr()), device));
    return guarded([&]() -> Result<NamedTensors> {
      return views_over(tensors, host, storages_in(*arena, host, offsets));
    });
  }

 private:
  std::vector<Chunk> chunks_of(const HostStorages& host) const {
    std::vector<Chunk> chunks;
    for (std::uint32_t i = 0; i < host.storages.size(); ++i)
      for (std::uint64_t off = 0; off < host.storages[i].nbytes; off += options_.chunk_bytes)
        chunks.push_back({i, off, std::min(options_.chunk_bytes, host.storages[i].nbytes - off)});
    return chunks;
  }

  Status copy_all(const HostStorages& host, const std::vector<std::uint64_t>& offsets, std::byte* arena,
                  c10::Device device) {
    const std::vector<Chunk> chunks = chunks_of(host);
    if (chunks.empty()) return Status::ok();
    auto pool = gpu::PinnedPool::shared(options_.pinned_bytes, options_.chunk_bytes);
    const std::size_t wanted = options_.threads ? options_.threads : util::worker_count();
    const std::size_t workers = std::min({wanted, pool->capacity(), chunks.size()});
    std::atomic<std::size_t> next{0};
    FirstError error;
    auto work = [&] {
      if (cudaError_t err = cudaSetDevice(device.index() < 0 ? 0 : device.index()); err != cudaSuccess)
        return error.set(cuda_status(err, "selecting the device"));
      auto buffer = pool->take();
      if (!buffer) return error.set(buffer.status());
      cudaStream_t stream = nullptr;
      if (cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); err != cudaSuccess)
        return error.set(cuda_status(err, "creating a copy stream"));
      while (!error.failed()) {
        const std::size_t i = next.fetch_add(1);
        if (i >= chunks.size()) break;
        const Chunk& c = chunks[i];
        const HostStorage& s = host.storages[c.storage];
        if (s.file) {
          if (Status st = read_file_region(*s.file, c.offset, buffer->data(), c.bytes); !st) {
            error.set(st);
            break;
          }
        } else {
          std::memcpy(buffer->data(), s.data + c.offset, c.bytes);
        }
        cudaError_t err = cudaMemcpyAsync(arena + offsets[c.storage] + c.offset, buffer->data(), c.bytes,
                                          cudaMemcpyHostToDevice, stream);
        if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
        if (err != cudaSuccess) error.set(cuda_status(err, "copying to the device"));
      }
      (void)cudaStreamDestroy(stream);
    };
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < workers; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    return error.status();
  }

  // One device storage per host storage, each a slice of the shared allocation that keeps it alive,
  // so any tensor or view of the load holds the allocation.
  static std::vector<c10::Storage> storages_in(const at::Tensor& arena, const HostStorages& host,
                                               const std::vector<std::uint64_t>& offsets) {
    std::vector<c10::Storage> storages;
    storages.reserve(host.storages.size());
    auto* base = static_cast<std::byte*>(arena.data_ptr());
    for (std::size_t i = 0; i < host.storages.size(); ++i) {
      auto* owner = new c10::Storage(arena.storage());
      c10::DataPtr ptr(base + offsets[i], owner, [](void* ctx) { delete static_cast<c10::Storage*>(ctx); },
                       arena.device());  // "cuda:0", never a bare "cuda": views must match it exactly
      storages.emplace_back(c10::Storage::use_byte_size_t(), host.storages[i].nbytes, std::move(ptr),
                            /*allocator=*/nullptr, /*resizable=*/false);
    }
    return storages;
  }

  StagedUploadOptions options_;
};

}  // namespace

std::shared_ptr<Uploader> staged_uploader(const StagedUploadOptions& options) {
  return std::make_shared<StagedUploader>(options);
}

}  // namespace snapcache
