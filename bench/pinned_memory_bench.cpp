// Ways to get page-locked host memory for staging, each measured in a new process (what a
// restarted server pays): cudaHostAlloc of staging buffers from one thread and from many;
// anonymous memory backed by transparent huge pages, touched in parallel, then cudaHostRegister;
// and cudaHostRegister of a read-only shared mapping of a file in the page cache (the bytes
// themselves, no copy), in pieces from one thread and from many, then the bus rate from it.
// With --file, also the engine's staging copy on its own (`stage`), page cache to device through
// pinned buffers while the bus sends them: two 8 MiB buffers and a stream per thread, each 512 KiB
// piece read with pread and hashed with XXH3 from the cache, as the engine checks it.
// The upload engine's design follows from these numbers (docs/performance.md).
//
//   snapcache_pinned_memory_bench [--mib N] [--file PATH] [--threads T]
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
#include "util/hash.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kBuffer = 16ull << 20;
constexpr std::size_t kPiece = 64ull << 20;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void parallel(std::size_t threads, std::size_t n, const auto& fn) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& t : pool) t.join();
}

// Page cache -> pinned buffers -> device, `threads` workers taking 8 MiB units in turn; prints
// "result SECONDS bytes N gbps G" (or exits non-zero).
int stage(const std::string& file, std::size_t bytes, std::size_t threads) {
  constexpr std::size_t kUnit = 8ull << 20, kHashed = 512ull << 10;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return 1;
  const std::size_t size = std::min<std::size_t>(bytes, static_cast<std::size_t>(st.st_size)) / kUnit * kUnit;
  void* device_memory = nullptr;
  if (cudaMalloc(&device_memory, size) != cudaSuccess) return 1;
  auto* device = static_cast<std::byte*>(device_memory);
  struct Worker {
    std::byte* buffers[2]{};
    cudaStream_t stream{};
    cudaEvent_t sent[2]{};
  };
  std::vector<Worker> workers(threads);
  for (Worker& w : workers) {  // pinned before the clock, as the engine's pool is reused
    for (int b = 0; b < 2; ++b) {
      void* buffer = nullptr;
      if (cudaHostAlloc(&buffer, kUnit, cudaHostAllocDefault) != cudaSuccess ||
          cudaEventCreateWithFlags(&w.sent[b], cudaEventDisableTiming) != cudaSuccess)
        return 1;
      w.buffers[b] = static_cast<std::byte*>(buffer);
    }
    if (cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> digests{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (Worker& w : workers)
    pool.emplace_back([&, w] {
      std::uint64_t mixed = 0;
      for (std::size_t n = 0, u; (u = next.fetch_add(1)) < size / kUnit; ++n) {
        const int b = static_cast<int>(n % 2);
        if (n >= 2) (void)cudaEventSynchronize(w.sent[b]);
        std::byte* to = w.buffers[b];
        const std::size_t at = u * kUnit;
        for (std::size_t d = 0; d < kUnit; d += kHashed) {
          if (::pread(fd, to + d, kHashed, static_cast<off_t>(at + d)) != static_cast<ssize_t>(kHashed)) std::abort();
          mixed ^= snapcache::util::xxh3_64(to + d, kHashed);
        }
        (void)cudaMemcpyAsync(device + at, to, kUnit, cudaMemcpyHostToDevice, w.stream);
        (void)cudaEventRecord(w.sent[b], w.stream);
      }
      (void)cudaStreamSynchronize(w.stream);
      digests ^= mixed;
    });
  for (auto& t : pool) t.join();
  const double seconds = since(t0);
  std::printf("result %.6f bytes %zu gbps %.2f digest %016llx\n", seconds, size, size / seconds / 1e9,
              static_cast<unsigned long long>(digests.load()));
  return 0;
}

// One way, in this (new) process: prints "result SECONDS [BUS_GBPS]".
int measure(const std::string& how, std::size_t bytes, const std::string& file, std::size_t threads) {
  (void)cudaFree(nullptr);  // the context starts outside the timing
  const std::size_t buffers = bytes / kBuffer;
  if (how == "host-alloc-1" || how == "host-alloc-n") {
    std::vector<void*> p(buffers);
    const auto t0 = Clock::now();
    parallel(how == "host-alloc-1" ? 1 : threads, buffers, [&](std::size_t i) {
      if (cudaHostAlloc(&p[i], kBuffer, cudaHostAllocDefault) != cudaSuccess) std::abort();
    });
    std::printf("result %.6f\n", since(t0));
    return 0;
  }
  if (how == "huge-register") {
    const auto t0 = Clock::now();
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return 1;
    (void)::madvise(base, bytes, MADV_HUGEPAGE);
    parallel(threads, bytes / kBuffer, [&](std::size_t i) { std::memset(static_cast<char*>(base) + i * kBuffer, 0, kBuffer); });
    const double touched = since(t0);
    parallel(threads, bytes / kBuffer, [&](std::size_t i) {
      if (cudaHostRegister(static_cast<char*>(base) + i * kBuffer, kBuffer, cudaHostRegisterDefault) != cudaSuccess)
        std::abort();
    });
    std::printf("result %.6f touched %.6f\n", since(t0), touched);
    return 0;
  }
  if (how == "file-register-1" || how == "file-register-n") {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) return 1;
    const std::size_t size = std::min<std::size_t>(bytes, static_cast<std::size_t>(st.st_size)) / kPiece * kPiece;
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return 1;
    const std::size_t pieces = size / kPiece;
    const auto t0 = Clock::now();
    parallel(how == "file-register-1" ? 1 : threads, pieces, [&](std::size_t i) {
      if (cudaHostRegister(static_cast<char*>(map) + i * kPiece, kPiece, cudaHostRegisterReadOnly) != cudaSuccess)
        std::abort();
    });
    const double registered = since(t0);
    void* device = nullptr;
    if (cudaMalloc(&device, size) != cudaSuccess) return 1;
    const auto t1 = Clock::now();
    for (std::size_t i = 0; i < pieces; ++i)
      (void)cudaMemcpyAsync(static_cast<char*>(device) + i * kPiece, static_cast<char*>(map) + i * kPiece, kPiece,
                            cudaMemcpyHostToDevice, nullptr);
    (void)cudaDeviceSynchronize();
    const double copied = since(t1);
    const auto t2 = Clock::now();
    for (std::size_t i = 0; i < pieces; ++i) (void)cudaHostUnregister(static_cast<char*>(map) + i * kPiece);
    std::printf("result %.6f bus %.2f unregister %.6f bytes %zu\n", registered, size / copied / 1e9, since(t2), size);
    return 0;
  }
  if (how == "stage") return stage(file, bytes, threads);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 512, threads = 16;
  std::string file, how;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--mib") mib = std::stoull(value);
    else if (flag == "--file") file = value;
    else if (flag == "--threads") threads = std::stoull(value);
    else if (flag == "--measure") how = value;
  }
  const std::size_t bytes = mib << 20;
  if (!how.empty()) return measure(how, bytes, file, threads);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  std::printf("%zu MiB, %zu threads, each way in a new process\n", mib, threads);
  std::vector<std::string> ways{"host-alloc-1", "host-alloc-n", "huge-register"};
  if (!file.empty())
    ways.insert(ways.end(), {"file-register-1", "file-register-n", "stage", "stage"});
  for (const std::string& way : ways) {
    snapcache::test::ChildProcess child("/proc/self/exe", {"--measure", way, "--mib", std::to_string(mib), "--file",
                                                            file.empty() ? "-" : file, "--threads", std::to_string(threads)});
    const std::string out = child.wait_for_line("result ") ? child.last_line() + "\n" : "failed\n";
    (void)child.wait();
    double seconds = 0;
    if (auto at = out.find("result "); at != std::string::npos) std::sscanf(out.c_str() + at, "result %lf", &seconds);
    std::printf("%-18s %8.3f s  %6.1f ms/GiB  %s", way.c_str(), seconds, seconds * 1e3 / (static_cast<double>(bytes) / (1ull << 30)),
                out.c_str());
  }
  return 0;
}
