// Reading a snapshot's data file from the disk (the page cache dropped), the way the upload engine
// does: workers take 10 MiB units in turn and check every chunk. Side by side in one run, each
// way after the file is dropped from the page cache (posix_fadvise DONTNEED), in turn:
//   read_checked  StoredFile::read_checked, the engine's read: each chunk in 512 KiB preads, each
//                 piece hashed as it arrives;
//   at_once       each unit in one pread, then its chunks checked (StoredFile::check): more of
//                 the disk's blocks in flight per worker, a second pass over memory;
//   unchecked     the workers' units read as read_checked reads them, nothing hashed: what the
//                 checks cost;
//   dd            one thread of 16 MiB reads, nothing checked (the disk's sequential rate).
// Prints each way's best time and GB/s, and at_once against read_checked: the lead for loads with
// the page cache dropped (docs/performance.md). --warm 1: the file stays in the page cache (read
// once first), so the ways measure the CPU's side of a warm load's reads: copying out of the page
// cache and hashing.
//
//   snapcache_disk_read_bench [--dir DIR] [--gib N] [--threads T] [--repeat R] [--warm 1]
#include <ATen/Functions.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "snapcache/extend/store_tensors.h"
#include "snapcache/extend/stored_file.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "util/fmt.h"

using namespace snapcache;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kUnit = 10ull << 20;

bool drop(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

// Workers taking whole-chunk units in turn, each into its own buffer; false on a failed read.
template <class Read>
bool units(const StoredFile& file, std::size_t threads, Read&& read) {
  const std::uint64_t unit = std::max<std::uint64_t>(kUnit / file.chunk_bytes(), 1) * file.chunk_bytes();
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> ok{true};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      std::vector<std::byte> buffer(unit);
      for (std::uint64_t begin; (begin = next.fetch_add(unit)) < file.size();)
        if (!read(buffer.data(), begin, std::min(begin + unit, file.size()))) ok = false;
    });
  for (auto& t : pool) t.join();
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/snapcache-disk-read-bench";
  double gib = 2.0;
  std::size_t threads = 16;
  int repeat = 3;
  bool warm = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--gib") gib = std::atof(argv[i + 1]);
    else if (a == "--threads") threads = std::stoull(argv[i + 1]);
    else if (a == "--repeat") repeat = std::atoi(argv[i + 1]);
    else if (a == "--warm") warm = std::string(argv[i + 1]) == "1";
  }
  set_log_level(LogLevel::error);
  if (std::system(("rm -rf '" + dir + "'").c_str()) != 0) return 1;
  Config config;
  config.directory = dir + "/cache";
  config.reserve_free_bytes = 0;
  auto store = *Store::open(config);
  NamedTensors tensors;
  const auto count = std::max<std::int64_t>(1, static_cast<std::int64_t>(gib * 64));  // 16 MiB each
  for (std::int64_t i = 0; i < count; ++i)
    tensors.emplace_back(fmt::format("layers.{}.weight", i), at::randint(0, 255, {16 << 20}, at::kByte));
  Key key;
  key.component = "disk-read";
  if (publish_tensors(*store, key, tensors).result != PublishResult::published) return 1;
  tensors.clear();
  auto hit = store->lookup(key);
  if (hit.result != LookupResult::hit) return 1;
  const std::shared_ptr<const StoredFile> file = stored_files(hit.snapshot).at(0);

  const auto read_checked = [&](std::byte* out, std::uint64_t begin, std::uint64_t end) {
    return file->read_checked(out, begin, end).is_ok();
  };
  const auto at_once = [&](std::byte* out, std::uint64_t begin, std::uint64_t end) {
    return file->read(out, begin, end - begin).is_ok() && file->check(begin, end, out).is_ok();
  };
  const auto unchecked = [&](std::byte* out, std::uint64_t begin, std::uint64_t end) {
    constexpr std::uint64_t kPiece = 512ull << 10;  // read_checked's pieces
    for (std::uint64_t at = begin; at < end; at += kPiece)
      if (!file->read(out + (at - begin), at, std::min(kPiece, end - at)).is_ok()) return false;
    return true;
  };
  const std::vector<std::string> ways = {"read_checked", "at_once", "unchecked", "dd"};
  if (warm && !units(*file, threads, unchecked)) return 1;  // every page in the page cache
  std::vector<double> best(ways.size(), 1e30);
  for (int r = 0; r < repeat; ++r) {
    for (std::size_t w = 0; w < ways.size(); ++w) {
      if (!warm && !drop(file->name())) return 1;
      const auto t0 = Clock::now();
      bool ok = true;
      if (ways[w] == "read_checked") ok = units(*file, threads, read_checked);
      if (ways[w] == "at_once") ok = units(*file, threads, at_once);
      if (ways[w] == "unchecked") ok = units(*file, threads, unchecked);
      if (ways[w] == "dd") {
        std::vector<std::byte> buffer(16ull << 20);
        for (std::uint64_t at = 0; at < file->size() && ok; at += buffer.size())
          ok = file->read(buffer.data(), at, std::min<std::uint64_t>(buffer.size(), file->size() - at)).is_ok();
      }
      if (!ok) return 1;
      best[w] = std::min(best[w], std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  const double bytes = static_cast<double>(file->size());
  fmt::print("{:.2f} GiB data file, {}, {} threads, best of {}:\n", bytes / (1ull << 30),
             warm ? "in the page cache" : "the page cache dropped before each read", threads, repeat);
  const char* what[] = {"512 KiB preads, each piece hashed", "each unit in one pread, then checked",
                        "512 KiB preads, nothing hashed", "one thread, 16 MiB reads, unchecked"};
  for (std::size_t w = 0; w < ways.size(); ++w)
    fmt::print("  {:<13} {:8.3f} s  {:6.2f} GB/s  ({})\n", ways[w], best[w], bytes / best[w] / 1e9, what[w]);
  fmt::print("  ratio read_checked/at_once {:.2f} (above 1: reading at once is faster)\n", best[0] / best[1]);
  fmt::print("  ratio read_checked/unchecked {:.2f} (what checking every chunk costs)\n", best[0] / best[2]);
  return 0;
}
