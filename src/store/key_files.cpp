// Key files: the key of a load, written to a file so a miss can be explained after the fact.
// Lookups record each missed key in <dir>/misses/<id>.key, the lookup's reason for the miss in
// <id>.reason beside it, and keep the newest kMaxRecordedMisses; a load that failed after the
// miss adds <id>.failed, its error; a publication whose sources changed under it, <id>.changed.
#include <algorithm>
#include <cstring>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "store/layout.h"
#include "util/file_io.h"
#include "store/miss_record.h"

namespace snapcache {

Status write_key_file(FileSystem& fs, const std::string& path, const Key& key) {
  return write_file_atomic(fs, path, encode_key(key));
}

Result<Key> read_key_file(FileSystem& fs, const std::string& path) {
  // A key is a few hundred bytes; the path may be one the user names (`snapcache why FILE`).
  constexpr std::uint64_t kMaxKeyFileBytes = 1u << 20;
  auto bytes = read_file(fs, path, kMaxKeyFileBytes, Follow::yes);
  if (!bytes) return bytes.status();
  auto key = decode_key(*bytes);
  if (!key) return Status(key.status().code(), path + " is not a snapcache key file: " + key.status().message());
  return key;
}

namespace store {
namespace {

constexpr std::size_t kMaxRecordedMisses = 64;
constexpr const char* kKeySuffix = ".key";
constexpr const char* kReasonSuffix = ".reason";
constexpr const char* kFailedSuffix = ".failed";
constexpr const char* kChangedSuffix = ".changed";
constexpr const char* kRecordSuffixes[] = {kKeySuffix, kReasonSuffix, kFailedSuffix, kChangedSuffix};
constexpr std::uint64_t kMaxReasonBytes = 16u << 10;  // a line of a report; anything longer is not ours

struct Found {
  std::string name;
  std::int64_t mtime_ns;
};

std::vector<Found> key_files(FileSystem& fs, const std::string& dir) {
  std::vector<Found> out;
  auto names = fs.list_directory(dir);
  if (!names) return out;
  for (const auto& e : *names) {
    if (e.name.size() != 32 + 4 || !e.name.ends_with(kKeySuffix) || !is_entry_id(e.name.substr(0, 32))) continue;
    // Only files the store wrote: a symlink or FIFO named like a key file is nobody's miss.
    if (auto st = fs.stat(dir + "/" + e.name, Follow::no); st && st->is_regular) out.push_back({e.name, st->mtime_ns});
  }
  std::sort(out.begin(), out.end(), [](const Found& a, const Found& b) { return a.mtime_ns > b.mtime_ns; });
  return out;
}

}  // namespace

bool is_miss_record_name(const std::string& name) {
  for (const char* suffix : kRecordSuffixes)
    if (name.size() == 32 + std::strlen(suffix) && name.ends_with(suffix) && is_entry_id(name.substr(0, 32))) return true;
  return false;
}

void record_miss(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id,
                 const std::string& reason) {
  const std::string dir = cache_directory + "/" + kMissesDir;
  if (!make_directories(fs, dir)) return;
  // A misses/ that is a symlink would receive key files wherever it points.
  if (auto st = fs.stat(dir, Follow::no); !st || !st->is_directory) return;
  // A new miss of the key is a miss until its load fails too: an old failure is not its cause.
  (void)fs.remove_file(dir + "/" + id + kFailedSuffix);
  // The reason first: a key file with no reason beside it reads as one recorded before reasons were.
  (void)write_file_atomic(fs, dir + "/" + id + kReasonSuffix, reason.substr(0, kMaxReasonBytes));
  if (!write_key_file(fs, dir + "/" + id + kKeySuffix, key)) return;
  auto found = key_files(fs, dir);
  for (std::size_t i = kMaxRecordedMisses; i < found.size(); ++i)
    for (const char* suffix : kRecordSuffixes) (void)fs.remove_file(dir + "/" + found[i].name.substr(0, 32) + suffix);
}

namespace {

// Replaced by rename, as every record: a planted link keeps its bytes. The key is written again
// (the record this one belongs to, newest now) in case the miss's record was trimmed.
void record_beside_miss(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id,
                        const char* suffix, const std::string& reason) {
  const std::string dir = cache_directory + "/" + kMissesDir;
  if (!make_directories(fs, dir)) return;
  if (auto st = fs.stat(dir, Follow::no); !st || !st->is_directory) return;
  if (!write_file_atomic(fs, dir + "/" + id + suffix, reason.substr(0, kMaxReasonBytes))) return;
  (void)write_key_file(fs, dir + "/" + id + kKeySuffix, key);
}

}  // namespace

void record_failure(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id,
                    const std::string& reason) {
  record_beside_miss(fs, cache_directory, key, id, kFailedSuffix, reason);
}

void record_changed_sources(FileSystem& fs, const std::string& cache_directory, const Key& key,
                            const std::string& id, const std::string& reason) {
  record_beside_miss(fs, cache_directory, key, id, kChangedSuffix, reason);
}

}  // namespace store

std::vector<RecordedMiss> recorded_misses(const Store& store) {
  std::vector<RecordedMiss> out;
  const std::string dir = store.config().directory + "/" + store::kMissesDir;
  for (auto& f : store::key_files(store.fs(), dir)) {
    const std::string id = f.name.substr(0, 32);
    // Read as the store's own file (no link, no second name, bounded): another process may have
    // planted anything there.
    auto reason = read_own_file(store.fs(), dir + "/" + id + store::kReasonSuffix, store::kMaxReasonBytes);
    auto failure = read_own_file(store.fs(), dir + "/" + id + store::kFailedSuffix, store::kMaxReasonBytes);
    out.push_back({id, dir + "/" + f.name, f.mtime_ns, reason ? std::move(*reason) : std::string(),
                   failure ? std::move(*failure) : std::string()});
  }
  return out;
}

bool sources_changed_while_published(const Store& store, const Key& key) {
  const std::string path = store.config().directory + "/" + store::kMissesDir + "/" + key_id(key) + store::kChangedSuffix;
  auto st = store.fs().stat(path, Follow::no);
  return st && st->is_regular;
}

void record_failed_load(const Store& store, const Key& key, const std::string& reason) {
  if (!store.unavailable_reason().empty()) return;  // an unavailable cache records nothing
  store::record_failure(store.fs(), store.config().directory, key, key_id(key), reason);
}

}  // namespace snapcache
