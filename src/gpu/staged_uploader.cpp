// The staged upload engine. The staging plan (gpu/staging.h) cuts the load into units that fit a
// pinned buffer: snapshot data files read in whole checksum chunks, host memory in buffer-sized
// pieces. Each worker thread has one CUDA stream and two pinned buffers it fills in turn: while
// the bus sends one, it reads the next unit into the other (pread through the store's
// FileSystem, never faulting in a mapping page by page) and checks every chunk against the
// manifest. An event per buffer says when the bus is done with it, so a worker waits only when
// it is a whole unit ahead. Pending layout conversions (the post-load transposes) cross the bus
// as they are, into a device scratch buffer of the worker's, and our own kernel
// (gpu/transpose_kernel.cu) writes their transpose into place: the CPU never transposes, and the
// GPU does it at a hundred GB/s and more.
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "gpu/pinned_pool.h"
#include "gpu/staging.h"
#include "gpu/cuda_status.h"
#include "gpu/device_transpose.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/gpu_upload.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/log.h"
#include "torch/exceptions.h"
#include "util/fmt.h"
#include "util/parallel.h"

namespace snapcache {
namespace {

using gpu::cuda_status;

// By default a worker per 64 MiB of load: at 1 GiB, 4 workers (one per 256 MiB) took 0.12 s and
// 8 or 16 took 0.09 s on the H200 machine (docs/performance.md), now that a worker's buffers are
// pinned in huge pages (about a millisecond each).
constexpr std::uint64_t kBytesPerWorker = 64ull << 20;
// Threads that pin staging buffers ahead of an upload (StagedUploadOptions::pin_ahead): pinning is
// mostly zeroing fresh huge pages, which several cores do faster than one, while the load's own
// thread looks up the entry and runs the post-load methods.
constexpr std::size_t kPinningThreads = 4;

Status check(cudaError_t err, const char* what) { return err == cudaSuccess ? Status::ok() : cuda_status(err, what); }

// Copies on one stream into the load's device allocation; transposes through `scratch`.
class DeviceSink final : public gpu::StagingSink {
 public:
  DeviceSink(std::byte* arena, cudaStream_t stream, c10::Device device) : arena_(arena), stream_(stream), device_(device) {}
  void set_scratch(std::byte* scratch, std::uint64_t bytes) {
    scratch_ = scratch;
    scratch_bytes_ = bytes;
  }
  Status copy(std::uint64_t dst, const std::byte* src, std::uint64_t bytes) override {
    ++copies;
    return check(cudaMemcpyAsync(arena_ + dst, src, bytes, cudaMemcpyHostToDevice, stream_), "copying to the device");
  }
  // The raw rows cross the bus into the scratch buffer; a kernel on the same stream (torch's
  // current one: the worker's) writes their transpose into place. Stream order keeps the next
  // unit's bytes out of the scratch buffer until the kernel has read it.
  Status transpose(std::uint64_t dst, std::uint64_t dst_pitch, const std::byte* src, std::uint64_t rows,
                   std::uint64_t cols, std::uint64_t element_size) override {
    const std::uint64_t bytes = rows * cols * element_size;
    if (bytes > scratch_bytes_) return Status(StatusCode::invalid_argument, "a transpose does not fit the device scratch buffer");
    ++transposes;
    SNAPCACHE_RETURN_IF_ERROR(check(cudaMemcpyAsync(scratch_, src, bytes, cudaMemcpyHostToDevice, stream_),
                                    "copying to the device"));
    return gpu::transpose_on_device(arena_ + dst, dst_pitch, scratch_, rows, cols, element_size, device_);
  }
  Status wait() override { return check(cudaStreamSynchronize(stream_), "copying to the device"); }

  std::uint64_t copies = 0, transposes = 0;  // queued, for the profile

 private:
  std::byte* arena_;
  cudaStream_t stream_;
  c10::Device device_;
  std::byte* scratch_ = nullptr;
  std::uint64_t scratch_bytes_ = 0;
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

// Where the workers' time went, summed over them: logged at debug level after each upload, so a
// slow load can be taken apart stage by stage on the machine it ran on (SNAPCACHE_LOG=debug).
class Profile {
 public:
  using Clock = std::chrono::steady_clock;
  enum Part { starting, pinning, staging, waiting, draining, kParts };
  // Adds the time since `from` to `part` and returns now.
  Clock::time_point add(Part part, Clock::time_point from) {
    const Clock::time_point now = Clock::now();
    ns_[part] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - from).count();
    return now;
  }
  void count(std::uint64_t units, std::uint64_t copies, std::uint64_t transposes) {
    units_ += units;
    copies_ += copies;
    transposes_ += transposes;
  }
  std::string describe(std::size_t workers, std::uint64_t bytes, Clock::time_point began) const {
    const double wall = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
    auto mean = [&](Part p) { return static_cast<double>(ns_[p].load()) / 1e6 / static_cast<double>(workers); };
    return fmt::format(
        "upload engine: {} bytes in {:.1f} ms by {} workers, {} units, {} copies, {} transposes; per worker: "
        "starting {:.1f} ms, pinning {:.1f} ms, reading, checking and queueing {:.1f} ms, waiting for the bus "
        "{:.1f} ms, draining {:.1f} ms",
        bytes, wall, workers, units_.load(), copies_.load(), transposes_.load(), mean(starting),
        mean(pinning), mean(staging), mean(waiting), mean(draining));
  }

 private:
  std::array<std::atomic<std::int64_t>, kParts> ns_{};
  std::atomic<std::uint64_t> units_{0}, copies_{0}, transposes_{0};
};

// A worker's CUDA objects, released however the worker ends.
struct WorkerStream {
  cudaStream_t stream = nullptr;
  std::array<cudaEvent_t, 2> sent{nullptr, nullptr};  // per staging buffer: the bus is done with it
  ~WorkerStream() {
    for (cudaEvent_t e : sent)
      if (e != nullptr) (void)cudaEventDestroy(e);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  Status create() {
    SNAPCACHE_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a copy stream"));
    for (cudaEvent_t& e : sent)
      SNAPCACHE_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating an event"));
    return Status::ok();
  }
};

// A worker's two staging buffers, filled in turn. The second is taken at the second unit, so a
// worker starts after pinning one; when the pool has none to spare the worker goes on with one,
// waiting for each unit's copies.
class WorkerBuffers {
 public:
  WorkerBuffers(gpu::PinnedPool& pool, const WorkerStream& cuda) : pool_(pool), cuda_(cuda) {}
  // The buffer the next unit is read into (the other of the two, where there are two).
  Result<std::byte*> next() {
    if (units_ > 0 && buffers_[1]) slot_ = 1 - slot_;
    if (units_++ == 1) {
      if (auto second = pool_.take()) {
        buffers_[1].emplace(std::move(*second));
        slot_ = 1;
      }
    }
    if (!buffers_[0]) {
      auto first = pool_.take();
      if (!first) return first.status();
      buffers_[0].emplace(std::move(*first));
    }
    return buffers_[slot_]->data();
  }
  // Waits until the bus is done with the copies last queued from this buffer.
  Status wait_until_sent() {
    if (!in_flight_[slot_]) return Status::ok();
    in_flight_[slot_] = false;
    return check(cudaEventSynchronize(cuda_.sent[slot_]), "copying to the device");
  }
  // After the unit's copies are queued (or some were before a failure: they still read the buffer).
  Status sent() {
    Status st = check(cudaEventRecord(cuda_.sent[slot_], cuda_.stream), "copying to the device");
    in_flight_[slot_] = st.is_ok();
    return st;
  }
  std::size_t units() const { return units_; }

 private:
  gpu::PinnedPool& pool_;
  const WorkerStream& cuda_;
  std::array<std::optional<gpu::PinnedPool::Buffer>, 2> buffers_;
  std::array<bool, 2> in_flight_{false, false};
  std::size_t slot_ = 0;
  std::size_t units_ = 0;
};

// What the workers of one upload share.
struct UploadRun {
  UploadRun(const gpu::StagingPlan& p, std::byte* a, c10::DeviceIndex d, gpu::PinnedPool& buffers)
      : plan(p), arena(a), device_index(d), pool(buffers) {}
  const gpu::StagingPlan& plan;
  std::byte* arena;
  c10::DeviceIndex device_index;
  gpu::PinnedPool& pool;
  std::byte* scratch = nullptr;        // the workers' scratch buffers for transposes, if any
  cudaEvent_t allocated = nullptr;     // recorded after the arena's and the scratch's allocation
  std::atomic<std::size_t> next{0};    // the next unit to take
  std::atomic<std::size_t> worker_ids{0};
  FirstError error;
  Profile profile;
  Profile::Clock::time_point began = Profile::Clock::now();
};

class StagedUploader final : public Uploader {
 public:
  explicit StagedUploader(const StagedUploadOptions& options) : options_(options) {}
  ~StagedUploader() override {
    std::lock_guard lock(pools_mutex_);
    for (std::thread& t : pinners_) t.join();
  }
  std::string name() const override { return "staged upload engine"; }
  UploaderTraits traits(c10::Device device) const override {
    // On other devices it is the plain copy.
    return {.converts_layouts = device.is_cuda() && options_.convert_layouts};
  }

  // Pins the buffers the upload of `bytes` will take (two per worker) on kPinningThreads threads,
  // unless they are pinned already or a load before this one still pins them.
  void expect(std::uint64_t bytes, c10::Device device) override {
    if (!options_.pin_ahead || !device.is_cuda() || bytes == 0) return;
    const std::uint64_t buffer_bytes = expected_buffer_bytes_.load();
    auto pool = pool_for(buffer_bytes);
    const std::size_t wanted =
        2 * workers_for(bytes, pool->capacity(), static_cast<std::size_t>((bytes + buffer_bytes - 1) / buffer_bytes));
    if (pool->pinned() >= wanted) return;
    std::lock_guard lock(pools_mutex_);
    if (pinning_.load() > 0) return;
    for (std::thread& t : pinners_) t.join();
    pinners_.clear();
    const int index = device.index() < 0 ? 0 : device.index();
    pinning_ = kPinningThreads;
    for (std::size_t t = 0; t < kPinningThreads; ++t)
      pinners_.emplace_back([this, pool, wanted, index] {
        if (cudaSetDevice(index) == cudaSuccess) pool->fill(wanted);
        else (void)cudaGetLastError();  // the workers pin their own, and meet the error themselves
        --pinning_;
      });
  }

  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& host, c10::Device device) override {
    // Elsewhere the plain copy, which also refuses pending conversions off CUDA.
    if (!device.is_cuda()) return per_storage_uploader()->upload(tensors, host, device);
    if (host.storage_of.size() != tensors.size())
      return Status(StatusCode::invalid_argument, "the host storages do not describe these tensors");
    // Buffers of at least chunk_bytes, grown to what the load's checksum chunks and matrix rows need
    // (a smaller one would refuse the load, and the per-storage copy is many times slower).
    auto plan = gpu::plan_staging(host, options_.chunk_bytes, gpu::BufferFit::grow);
    if (!plan) return plan.status().with_context("planning the upload");
    // Two buffers per worker: one is read into while the bus sends the other.
    if (options_.pinned_bytes < 2 * plan->buffer_bytes)
      return Status(StatusCode::invalid_argument,
                    fmt::format("the pinned staging pool ({} bytes) holds no two {}-byte buffers", options_.pinned_bytes,
                                plan->buffer_bytes));
    // One device allocation for the whole load, each storage at an aligned offset in it.
    const Profile::Clock::time_point allocating = Profile::Clock::now();
    auto arena = guarded([&]() -> Result<at::Tensor> {
      return at::empty({static_cast<std::int64_t>(std::max<std::uint64_t>(plan->destination_bytes, 1))},
                       at::TensorOptions().dtype(at::kByte).device(device));
    });
    if (!arena)
      return arena.status().with_context("device allocation of " + std::to_string(plan->destination_bytes) + " bytes");
    const double arena_ms = std::chrono::duration<double, std::milli>(Profile::Clock::now() - allocating).count();
    SNAPCACHE_RETURN_IF_ERROR(run(*plan, static_cast<std::byte*>(arena->data_ptr()), device, arena_ms));
    return guarded([&]() -> Result<Uploaded> {
      return Uploaded{views_over(tensors, host, storages_in(*arena, host, plan->storage_offsets)), plan->bytes_checked};
    });
  }

 private:
  // By default one worker per kBytesPerWorker, at least two: each pins its buffers, and in a new
  // process pinning a worker's buffers costs more than the worker saves on a small load. A thread
  // count the caller set is taken as it is (up to one worker per unit).
  std::size_t workers_for(std::uint64_t bytes, std::size_t pool_capacity, std::size_t units) const {
    const std::size_t wanted = options_.threads ? options_.threads : util::worker_count();
    const std::size_t by_size =
        options_.threads ? options_.threads : std::max<std::size_t>(2, (bytes + kBytesPerWorker - 1) / kBytesPerWorker);
    return std::min({wanted, by_size, pool_capacity / 2, units});
  }

  // The pool of `buffer_bytes` buffers, kept as long as this uploader: a process's later loads
  // find their buffers pinned.
  std::shared_ptr<gpu::PinnedPool> pool_for(std::uint64_t buffer_bytes) {
    std::lock_guard lock(pools_mutex_);
    auto& pool = pools_[buffer_bytes];
    if (!pool) pool = gpu::PinnedPool::shared(options_.pinned_bytes, buffer_bytes);
    return pool;
  }

  // Runs the plan's units into `arena`: the workers take units in turn until none is left or one
  // fails (UploadRun::error).
  Status run(const gpu::StagingPlan& plan, std::byte* arena, c10::Device device, double arena_ms) {
    if (plan.units.empty()) return Status::ok();
    expected_buffer_bytes_ = plan.buffer_bytes;  // what the next load's expect() pins
    auto pool = pool_for(plan.buffer_bytes);
    const std::size_t pinned_before = pool->pinned();
    const std::size_t workers = workers_for(plan.destination_bytes, pool->capacity(), plan.units.size());
    UploadRun run(plan, arena, static_cast<c10::DeviceIndex>(device.index() < 0 ? 0 : device.index()), *pool);
    // One scratch buffer per worker for the raw rows of transposes, allocated on the current stream
    // (so torch's allocator hands the memory to the model's next allocation when the load is done).
    at::Tensor scratch;
    if (gpu::converts(plan)) {
      auto made = guarded([&]() -> Result<at::Tensor> {
        return at::empty({static_cast<std::int64_t>(workers * plan.buffer_bytes)},
                         at::TensorOptions().dtype(at::kByte).device(c10::Device(c10::kCUDA, run.device_index)));
      });
      if (!made) return made.status().with_context("the device scratch buffers for transposes");
      scratch = std::move(*made);
      run.scratch = static_cast<std::byte*>(scratch.data_ptr());
    }
    // The workers' streams start after what the current stream has queued, the arena's allocation
    // and the scratch buffers' included.
    SNAPCACHE_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&run.allocated, cudaEventDisableTiming), "creating an event"));
    Status recorded = check(cudaEventRecord(run.allocated, c10::cuda::getCurrentCUDAStream(run.device_index).stream()),
                            "ordering the copies after the allocation");
    if (recorded) {
      std::vector<std::thread> threads;
      for (std::size_t t = 1; t < workers; ++t) threads.emplace_back([&run] { run_worker(run); });
      run_worker(run);
      for (auto& t : threads) t.join();
    }
    (void)cudaEventDestroy(run.allocated);
    if (!recorded) return recorded;
    if (log_level() >= LogLevel::debug)
      log(LogLevel::debug, run.profile.describe(workers, plan.destination_bytes, run.began) +
                               fmt::format("; before them: the device allocation {:.1f} ms; staging buffers pinned "
                                           "before the upload: {}, during it: {}",
                                           arena_ms, pinned_before, pool->pinned() - pinned_before));
    return run.error.status();
  }

  // One worker: its stream and sink, then units in turn, each read into one of its two buffers
  // while the bus sends the other.
  static void run_worker(UploadRun& run) {
    const std::size_t id = run.worker_ids.fetch_add(1);
    if (Status st = check(cudaSetDevice(run.device_index), "selecting the device"); !st) return run.error.set(st);
    WorkerStream cuda;
    if (Status st = cuda.create(); !st) return run.error.set(st);
    if (Status st = check(cudaStreamWaitEvent(cuda.stream, run.allocated, 0), "ordering the copies after the allocation");
        !st)
      return run.error.set(st);
    DeviceSink sink(run.arena, cuda.stream, c10::Device(c10::kCUDA, run.device_index));
    if (run.scratch != nullptr) sink.set_scratch(run.scratch + id * run.plan.buffer_bytes, run.plan.buffer_bytes);
    // The transposes run on torch's current stream: this worker's.
    c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromExternal(cuda.stream, run.device_index));
    WorkerBuffers buffers(run.pool, cuda);
    Profile::Clock::time_point mark = run.profile.add(Profile::starting, run.began);
    for (; !run.error.failed();) {
      const std::size_t i = run.next.fetch_add(1);
      if (i >= run.plan.units.size()) break;
      mark = run.profile.add(Profile::staging, mark);
      auto buffer = buffers.next();
      if (!buffer) {
        run.error.set(buffer.status());
        break;
      }
      mark = run.profile.add(Profile::pinning, mark);
      if (Status st = buffers.wait_until_sent(); !st) {
        run.error.set(st);
        break;
      }
      mark = run.profile.add(Profile::waiting, mark);
      Status st = gpu::stage_unit(run.plan, run.plan.units[i], *buffer, sink);
      // Recorded even after a failure: the copies issued before it still read the buffer.
      Status sent = buffers.sent();
      if (!st || !sent) {
        run.error.set(!st ? st : sent);
        break;
      }
    }
    // The buffers go back to the pool and the scratch buffer to torch only when no copy or kernel
    // uses them.
    mark = run.profile.add(Profile::staging, mark);
    if (Status st = sink.wait(); !st) run.error.set(st);
    run.profile.add(Profile::draining, mark);
    run.profile.count(buffers.units(), sink.copies, sink.transposes);
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
  std::mutex pools_mutex_;
  std::map<std::uint64_t, std::shared_ptr<gpu::PinnedPool>> pools_;
  // The buffer size the last upload planned (the default chunk size before the first): a process
  // loads one model's shapes again and again.
  std::atomic<std::uint64_t> expected_buffer_bytes_{options_.chunk_bytes};
  std::vector<std::thread> pinners_;   // expect()'s, joined by the next expect() or at the end
  std::atomic<std::size_t> pinning_{0};  // of them, still pinning
};

}  // namespace

std::shared_ptr<Uploader> staged_uploader(const StagedUploadOptions& options) {
  return std::make_shared<StagedUploader>(options);
}

}  // namespace snapcache
