// The staged upload engine. The staging plan (gpu/staging.h) cuts the load into units that fit a
// pinned buffer: snapshot data files read in whole checksum chunks, host memory in buffer-sized
// pieces. Each worker thread holds one pinned buffer (two when it converts) and one CUDA stream; for each unit it reads
// (pread from the page cache, never faulting in a mapping page by page), checks every chunk
// against the manifest, transposes pending layout conversions into its second buffer, sends both
// to the device on its stream, and waits for those copies before taking the next unit. With many
// workers the reads and conversions of some overlap the bus transfers of others.
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "gpu/pinned_pool.h"
#include "gpu/staging.h"
#include "gpu/cuda_status.h"
#include "snapcache/gpu_upload.h"
#include "torch/exceptions.h"
#include "util/fmt.h"
#include "util/parallel.h"

namespace snapcache {
namespace {

using gpu::cuda_status;

constexpr std::uint64_t kBytesPerWorker = 256ull << 20;

// Copies on one stream into the load's device allocation.
class DeviceSink final : public gpu::StagingSink {
 public:
  DeviceSink(std::byte* arena, cudaStream_t stream) : arena_(arena), stream_(stream) {}
  Status copy(std::uint64_t dst, const std::byte* src, std::uint64_t bytes) override {
    return check(cudaMemcpyAsync(arena_ + dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  Status copy_2d(std::uint64_t dst, std::uint64_t dst_pitch, const std::byte* src, std::uint64_t src_pitch,
                 std::uint64_t width, std::uint64_t height) override {
    return check(cudaMemcpy2DAsync(arena_ + dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyHostToDevice,
                                   stream_));
  }
  Status wait() override { return check(cudaStreamSynchronize(stream_)); }

 private:
  static Status check(cudaError_t err) { return err == cudaSuccess ? Status::ok() : cuda_status(err, "copying to the device"); }
  std::byte* arena_;
  cudaStream_t stream_;
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
  UploaderTraits traits(c10::Device device) const override {
    // On other devices it is the plain copy.
    return {.converts_layouts = device.is_cuda() && options_.convert_layouts,
            .checks_files = device.is_cuda() && options_.check_files};
  }

  Result<NamedTensors> upload(const NamedTensors& tensors, const HostStorages& host, c10::Device device) override {
    if (!device.is_cuda()) {
      for (const HostStorage& s : host.storages)
        if (s.pending)
          return Status(StatusCode::invalid_argument, "pending layout conversions are written only on a CUDA device");
      return per_storage_uploader()->upload(tensors, host, device);
    }
    if (host.storage_of.size() != tensors.size())
      return Status(StatusCode::invalid_argument, "the host storages do not describe these tensors");
    // Two buffers per worker: one for what is read, one for what is converted.
    if (options_.chunk_bytes == 0 || options_.pinned_bytes < 2 * options_.chunk_bytes)
      return Status(StatusCode::invalid_argument,
                    fmt::format("the pinned staging pool ({} bytes) holds no two {}-byte buffers", options_.pinned_bytes,
                                options_.chunk_bytes));
    auto plan = gpu::plan_staging(host, options_.chunk_bytes, options_.check_files);
    if (!plan) return plan.status().with_context("planning the upload");
    // One device allocation for the whole load, each storage at an aligned offset in it.
    auto arena = guarded([&]() -> Result<at::Tensor> {
      return at::empty({static_cast<std::int64_t>(std::max<std::uint64_t>(plan->destination_bytes, 1))},
                       at::TensorOptions().dtype(at::kByte).device(device));
    });
    if (!arena)
      return arena.status().with_context("device allocation of " + std::to_string(plan->destination_bytes) + " bytes");
    SNAPCACHE_RETURN_IF_ERROR(run(*plan, static_cast<std::byte*>(arena->data_ptr()), device));
    return guarded([&]() -> Result<NamedTensors> {
      return views_over(tensors, host, storages_in(*arena, host, plan->storage_offsets));
    });
  }

 private:
  Status run(const gpu::StagingPlan& plan, std::byte* arena, c10::Device device) {
    if (plan.units.empty()) return Status::ok();
    auto pool = gpu::PinnedPool::shared(options_.pinned_bytes, options_.chunk_bytes);
    // One worker per 256 MiB, at least two: each pins its buffers, and in a new process pinning a
    // worker's buffers costs more than the worker saves on a small load.
    const std::size_t wanted = options_.threads ? options_.threads : util::worker_count();
    const std::size_t by_size = std::max<std::size_t>(2, (plan.destination_bytes + kBytesPerWorker - 1) / kBytesPerWorker);
    const std::size_t workers = std::min({wanted, by_size, pool->capacity() / 2, plan.units.size()});
    std::atomic<std::size_t> next{0};
    FirstError error;
    auto work = [&] {
      if (cudaError_t err = cudaSetDevice(device.index() < 0 ? 0 : device.index()); err != cudaSuccess)
        return error.set(cuda_status(err, "selecting the device"));
      auto read = pool->take();
      if (!read) return error.set(read.status());
      // The second buffer only for units with conversions: pinning is slow in a new process, and a
      // load without pending conversions needs half the pool.
      std::optional<gpu::PinnedPool::Buffer> convert;
      cudaStream_t stream = nullptr;
      if (cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); err != cudaSuccess)
        return error.set(cuda_status(err, "creating a copy stream"));
      DeviceSink sink(arena, stream);
      while (!error.failed()) {
        const std::size_t i = next.fetch_add(1);
        if (i >= plan.units.size()) break;
        const gpu::StagingPlan::Unit& unit = plan.units[i];
        if (!convert && gpu::converts(plan, unit)) {
          auto taken = pool->take();
          if (!taken) {
            error.set(taken.status());
            break;
          }
          convert.emplace(std::move(*taken));
        }
        Status st = gpu::stage_unit(plan, unit, read->data(), convert ? convert->data() : nullptr, sink);
        // Wait even after a failure: the buffers go back to the pool only when no copy reads them.
        Status waited = sink.wait();
        if (!st || !waited) error.set(!st ? st : waited);
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
