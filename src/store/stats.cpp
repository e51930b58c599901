#include "store/stats.h"

#include <cerrno>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "store/layout.h"
#include "util/clock.h"
#include "util/file_io.h"

namespace snapcache::store {
namespace {

using nlohmann::json;

// The JSON names are the ones `snapcache stats --json` prints.
struct Field {
  const char* name;
  std::uint64_t CacheCounters::*member;
};
constexpr Field kFields[] = {
    {"hits", &CacheCounters::hits},
    {"misses", &CacheCounters::misses},
    {"damaged", &CacheCounters::damaged},
    {"fallbacks", &CacheCounters::fallbacks},
    {"published", &CacheCounters::published},
    {"already_present", &CacheCounters::already_present},
    {"publish_skipped", &CacheCounters::publish_skipped},
    {"publish_failed", &CacheCounters::publish_failed},
    {"evicted", &CacheCounters::evicted},
};

const char* name_of(Counter c) { return kFields[static_cast<int>(c)].name; }

FileSystem& side_fs() {
  static const std::shared_ptr<FileSystem> fs = posix_file_system();
  return *fs;
}

std::string stats_path(const std::string& dir) { return dir + "/" + kStatsFile; }

// Nine counters take a few hundred bytes; anything much larger is not a file we wrote, and is
// neither read into memory nor padded to its size (a sparse 1 TiB file would be both).
constexpr std::uint64_t kMaxStatsBytes = 64 * 1024;

// A few short tries: another process holds the lock for microseconds, a stuck one must not
// stall a load.
Status lock_briefly(FileSystem& fs, int fd, LockMode mode) {
  Status st;
  for (int attempt = 0; attempt < 20; ++attempt) {
    st = fs.lock(fd, mode, LockWait::no_wait);
    if (st || st.code() != StatusCode::busy) return st;
    std::this_thread::sleep_for(std::chrono::microseconds(250));
  }
  return st;
}

// Never through a symlink (it would rewrite its target in place) and never a FIFO. A new file is
// created with O_EXCL, which fails on any existing name, a dangling link included, so a create
// cannot be redirected either.
Result<UniqueFd> open_or_create(FileSystem& fs, const std::string& path) {
  auto fd = open_in_cache(fs, path, OpenMode::read_write);
  if (fd || fd.status().code() != StatusCode::not_found) return fd;
  fd = open_in_cache(fs, path, OpenMode::create_exclusive);
  if (fd || fd.status().sys_errno() != EEXIST) return fd;
  return open_in_cache(fs, path, OpenMode::read_write);  // another process created it meanwhile
}

// The counters in an open, locked file; a missing, torn or foreign file reads as zeros. `size` is
// what the file holds now, which a rewrite pads to; `oversized` says it is too large to pad.
json read_locked(FileSystem& fs, int fd, std::uint64_t& size, bool& oversized) {
  size = 0;
  oversized = false;
  auto text = read_open_file(fs, fd, kMaxStatsBytes, kStatsFile);
  if (!text) {
    oversized = text.status().code() == StatusCode::foreign;
    return json::object();
  }
  size = text->size();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return json::object();
  return j;
}

// Rewrites in place, padded to the old size: the file never shrinks, so it needs no truncation.
// An oversized file is replaced whole (temp + rename) instead: its counters were unreadable anyway.
Status write_locked(FileSystem& fs, const std::string& path, int fd, json& j, std::uint64_t old_size, bool oversized) {
  j["version"] = 1;
  std::string text = j.dump();
  if (oversized) return write_file_atomic(fs, path, text);
  if (text.size() < old_size) text.append(old_size - text.size(), ' ');
  return write_all(fs, fd, text.data(), text.size(), 0);
}

std::uint64_t counter_value(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

}  // namespace

void bump_counter(const std::string& cache_directory, Counter counter) {
  FileSystem& fs = side_fs();
  const std::string path = stats_path(cache_directory);
  auto fd = open_or_create(fs, path);
  if (!fd || !lock_briefly(fs, fd->get(), LockMode::exclusive)) return;
  std::uint64_t size = 0;
  bool oversized = false;
  json j = read_locked(fs, fd->get(), size, oversized);
  if (!j.contains("since_unix_ns")) j["since_unix_ns"] = util::now_unix_ns();
  j[name_of(counter)] = counter_value(j, name_of(counter)) + 1;
  (void)write_locked(fs, path, fd->get(), j, size, oversized);
}

Result<CacheCounters> read_counters(const std::string& cache_directory) {
  FileSystem& fs = side_fs();
  CacheCounters out;
  auto fd = open_in_cache(fs, stats_path(cache_directory), OpenMode::read);
  if (!fd) return fd.status().code() == StatusCode::not_found ? Result<CacheCounters>(out) : fd.status();
  SNAPCACHE_RETURN_IF_ERROR(lock_briefly(fs, fd->get(), LockMode::shared));
  std::uint64_t size = 0;
  bool oversized = false;
  json j = read_locked(fs, fd->get(), size, oversized);
  if (auto it = j.find("since_unix_ns"); it != j.end() && it->is_number_integer())
    out.since_unix_ns = it->get<std::int64_t>();
  for (const Field& f : kFields) out.*f.member = counter_value(j, f.name);
  return out;
}

Status zero_counters(const std::string& cache_directory) {
  FileSystem& fs = side_fs();
  const std::string path = stats_path(cache_directory);
  auto fd = open_or_create(fs, path);
  if (!fd) return fd.status();
  SNAPCACHE_RETURN_IF_ERROR(lock_briefly(fs, fd->get(), LockMode::exclusive));
  std::uint64_t size = 0;
  bool oversized = false;
  (void)read_locked(fs, fd->get(), size, oversized);
  json j = json::object();
  j["since_unix_ns"] = util::now_unix_ns();
  for (const Field& f : kFields) j[f.name] = 0;
  return write_locked(fs, path, fd->get(), j, size, oversized);
}

}  // namespace snapcache::store

namespace snapcache {

Result<CacheCounters> read_counters(const Store& store) { return store::read_counters(store.config().directory); }

Status zero_counters(Store& store) { return store::zero_counters(store.config().directory); }

}  // namespace snapcache
