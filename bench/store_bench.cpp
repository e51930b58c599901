// Store benchmark: publication against plain file writing of the same bytes (and of bytes an entry
// already holds, which the cache shares instead of copying), and warm
// map+validate against reading the same bytes into fresh tensors, for 1,000 and 10,000 tensors.
// Everything is measured side by side in one run; the ratios are the result.
//
//   snapcache_store_bench [--dir DIR] [--gib N] [--repeat N]
#include <ATen/Functions.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "util/fmt.h"

using namespace snapcache;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

NamedTensors make_tensors(std::size_t count, std::size_t bytes_each) {
  NamedTensors out;
  for (std::size_t i = 0; i < count; ++i) {
    at::Tensor t = at::empty({static_cast<std::int64_t>(bytes_each / 2)}, at::kBFloat16);
    auto* p = static_cast<std::uint8_t*>(t.data_ptr());
    for (std::size_t b = 0; b < bytes_each; ++b) p[b] = static_cast<std::uint8_t>(b * 131 + i);
    out.emplace_back(fmt::format("model.layers.{}.weight", i), t);
  }
  return out;
}

// The baseline for publication: the same bytes, written sequentially to one file and fsynced.
double plain_write(const std::string& path, const NamedTensors& tensors) {
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::size_t n = static_cast<std::size_t>(t.numel()) * t.element_size();
    const char* p = static_cast<const char*>(t.data_ptr());
    for (std::size_t done = 0; done < n;) {
      ssize_t w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(offset + done));
      if (w <= 0) std::abort();
      done += static_cast<std::size_t>(w);
    }
    offset += n;
  }
  ::fsync(fd);
  ::close(fd);
  double s = seconds_since(t0);
  ::unlink(path.c_str());
  return s;
}

// The baseline for a warm load: read the same bytes from one file into freshly allocated tensors.
double plain_read(const std::string& path, const NamedTensors& like) {
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  std::uint64_t offset = 0;
  NamedTensors out;
  for (const auto& [name, t] : like) {
    at::Tensor fresh = at::empty_like(t);
    std::size_t n = static_cast<std::size_t>(t.numel()) * t.element_size();
    if (::pread(fd, fresh.data_ptr(), n, static_cast<off_t>(offset)) != static_cast<ssize_t>(n)) std::abort();
    offset += n;
    out.emplace_back(name, fresh);
  }
  ::close(fd);
  return seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/snapcache-bench";
  double gib = 1.0;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--gib") gib = std::atof(argv[i + 1]);
    else if (a == "--repeat") repeat = std::atoi(argv[i + 1]);
  }
  set_log_level(LogLevel::error);
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) return 1;
  Config config;
  config.directory = dir + "/cache";
  config.reserve_free_bytes = 0;
  auto store = *Store::open(config);

  // 1. Publication against plain writing: large tensors, as a DiT or LLM rank has.
  const std::size_t tensor_bytes = 16u << 20;
  const std::size_t count = std::max<std::size_t>(1, static_cast<std::size_t>(gib * 1024 / 16));
  NamedTensors big = make_tensors(count, tensor_bytes);
  const double bytes = static_cast<double>(count * tensor_bytes);
  double best_plain = 1e30, best_publish = 1e30;
  for (int r = 0; r < repeat; ++r) {
    best_plain = std::min(best_plain, plain_write(dir + "/plain.bin", big));
    Key key;
    key.component = fmt::format("publish-{}", r);
    auto t0 = Clock::now();
    auto out = publish_tensors(*store, key, big);
    double s = seconds_since(t0);
    if (out.result != PublishResult::published) {
      std::fprintf(stderr, "publish failed: %s\n", out.status.to_string().c_str());
      return 1;
    }
    best_publish = std::min(best_publish, s);
    (void)remove_entry(*store, out.entry_id);
  }
  fmt::print("publish {:.2f} GiB ({} tensors), best of {}:\n", bytes / (1 << 30), count, repeat);
  fmt::print("  plain write+fsync   {:8.3f} s  {:6.2f} GB/s\n", best_plain, bytes / best_plain / 1e9);
  fmt::print("  snapcache publish   {:8.3f} s  {:6.2f} GB/s   (hash, write, fsync, rename)\n", best_publish,
             bytes / best_publish / 1e9);
  fmt::print("  ratio publish/plain {:8.2f}\n", best_publish / best_plain);

  // 1b. The same bytes under a second key of the same model (a Torch upgrade): shared with the first
  // entry after a byte-for-byte comparison, instead of a second copy on the disk.
  double best_twin = 1e30;
  std::uint64_t grown = 0;
  for (int r = 0; r < repeat; ++r) {
    Key first;
    first.component = fmt::format("twin-{}", r);
    Key second = first;
    second.torch.version = "next";
    if (publish_tensors(*store, first, big).result != PublishResult::published) return 1;
    const std::uint64_t before = total_bytes(*store).value();
    auto t0 = Clock::now();
    auto out = publish_tensors(*store, second, big);
    double s = seconds_since(t0);
    if (out.result != PublishResult::published) return 1;
    best_twin = std::min(best_twin, s);
    grown = total_bytes(*store).value() - before;
    (void)remove_entry(*store, key_id(first));
    (void)remove_entry(*store, out.entry_id);
  }
  fmt::print("  publish of equal bytes under a second key {:8.3f} s  (compared, shared: the cache grew {} bytes)\n",
             best_twin, grown);
  fmt::print("  ratio equal-bytes publish/publish {:8.2f}\n\n", best_twin / best_publish);

  // 2. Warm map+validate for many small tensors, against reading the same bytes into tensors.
  fmt::print("warm load (map + validate + build tensors), median of {}:\n", std::max(repeat, 3));
  for (std::size_t n : {1000u, 10000u}) {
    NamedTensors small = make_tensors(n, 8192);
    Key key;
    key.component = fmt::format("warm-{}", n);
    if (publish_tensors(*store, key, small).result != PublishResult::published) return 1;
    ExpectedLayout expected = expected_layout_of(small).value();
    std::string data = store->entry_path(key_id(key)) + "/data-0000.bin";
    std::vector<double> warm, read;
    for (int r = 0; r < std::max(repeat, 3); ++r) {
      auto t0 = Clock::now();
      auto loaded = load_tensors(*store, key, &expected);
      double s = seconds_since(t0);
      if (loaded.lookup.result != LookupResult::hit || loaded.tensors.size() != n) return 1;
      warm.push_back(s);
      read.push_back(plain_read(data, small));
    }
    std::sort(warm.begin(), warm.end());
    std::sort(read.begin(), read.end());
    double w = warm[warm.size() / 2], p = read[read.size() / 2];
    fmt::print("  {:6} tensors: warm {:8.2f} ms ({:5.2f} us/tensor)   read into tensors {:8.2f} ms   ratio warm/read {:5.2f}\n",
               n, w * 1e3, w * 1e6 / static_cast<double>(n), p * 1e3, w / p);
  }
  return std::system(cmd.c_str()) == 0 ? 0 : 1;
}
