#include "store/stats.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "store/layout.h"
#include "util/clock.h"
#include "util/file_io.h"
#include "snapcache/extend/file_system.h"

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

// The history: the counters of each hour that saw any, in stats.json as "hours": [[start in Unix
// seconds, then one number per field below, in this order], ...], oldest first. An array per
// hour, not an object: a week of hours stays a few KiB, well under kMaxStatsBytes.
using Hour = CacheCounters::Hour;
struct HourField {
  Counter counter;
  std::uint64_t Hour::*member;
};
constexpr HourField kHourFields[] = {
    {Counter::hit, &Hour::hits},         {Counter::miss, &Hour::misses},
    {Counter::damaged, &Hour::damaged},  {Counter::fallback, &Hour::fallbacks},
    {Counter::published, &Hour::published},
};
constexpr std::int64_t kHourSeconds = 3600;
constexpr std::size_t kHourColumns = 1 + std::size(kHourFields);

// The hours a file holds, checked: another process (or user) may have written anything there. A
// row that is not an array of kHourColumns non-negative numbers, an hour not on an hour's
// boundary, or one out of order is dropped; at most kHistoryHours are read.
std::vector<Hour> read_hours(const json& j) {
  std::vector<Hour> out;
  auto it = j.find("hours");
  if (it == j.end() || !it->is_array()) return out;
  for (const json& row : *it) {
    if (!row.is_array() || row.size() != kHourColumns) continue;
    if (!std::all_of(row.begin(), row.end(), [](const json& v) { return v.is_number_unsigned(); })) continue;
    const auto start = row[0].get<std::uint64_t>();
    if (start % kHourSeconds != 0 || start > static_cast<std::uint64_t>(util::kLatestUnixNs / 1'000'000'000)) continue;
    Hour h;
    h.start_unix_ns = static_cast<std::int64_t>(start) * 1'000'000'000;
    if (!out.empty() && h.start_unix_ns <= out.back().start_unix_ns) continue;
    for (std::size_t i = 0; i < std::size(kHourFields); ++i) h.*kHourFields[i].member = row[i + 1].get<std::uint64_t>();
    out.push_back(h);
  }
  if (out.size() > static_cast<std::size_t>(CacheCounters::kHistoryHours))
    out.erase(out.begin(), out.end() - CacheCounters::kHistoryHours);
  return out;
}

// Counts `counter` in the current hour, and keeps only the last kHistoryHours hours: older ones
// go, and so do any "later" than now (written under a clock that was ahead), which would
// otherwise stay forever.
void count_hour(json& j, Counter counter, std::int64_t now_unix_ns) {
  const HourField* field = nullptr;
  for (const HourField& f : kHourFields)
    if (f.counter == counter) field = &f;
  if (field == nullptr) return;  // not part of the history (publication skips, evictions, ...)
  const std::int64_t now_s = now_unix_ns / 1'000'000'000;
  const std::int64_t this_hour = (now_s - now_s % kHourSeconds) * 1'000'000'000;
  const std::int64_t oldest = this_hour - (CacheCounters::kHistoryHours - 1) * kHourSeconds * 1'000'000'000;
  std::vector<Hour> hours = read_hours(j);
  std::erase_if(hours, [&](const Hour& h) { return h.start_unix_ns < oldest || h.start_unix_ns > this_hour; });
  if (hours.empty() || hours.back().start_unix_ns != this_hour) hours.push_back(Hour{.start_unix_ns = this_hour});
  hours.back().*field->member += 1;
  json rows = json::array();
  for (const Hour& h : hours) {
    json row = json::array({h.start_unix_ns / 1'000'000'000});
    for (const HourField& f : kHourFields) row.push_back(h.*f.member);
    rows.push_back(std::move(row));
  }
  j["hours"] = std::move(rows);
}

std::string stats_path(const std::string& dir) { return dir + "/" + kStatsFile; }

// Nine counters and a week of hours (168 rows of six numbers) take under 8 KiB; anything much larger is not a file we wrote: it is not
// read into memory (a sparse 1 TiB file, say), and the next update replaces it.
constexpr std::uint64_t kMaxStatsBytes = 64 * 1024;

// How long a count waits for another process's update. A lookup is on a load's critical path:
// a few short tries, so a stuck process never stalls a load, at the price of losing the count
// when many ranks look up at once. A publication or an eviction has already spent far longer
// writing or removing an entry, and the ranks of a TP group publish at the same moment: those
// wait up to two seconds, so the counts `snapcache stats` shows for them hold.
std::chrono::microseconds patience_of(Counter counter) {
  switch (counter) {
    case Counter::hit:
    case Counter::miss:
    case Counter::damaged:
    case Counter::fallback: return std::chrono::milliseconds(10);
    case Counter::published:
    case Counter::already_present:
    case Counter::publish_skipped:
    case Counter::publish_failed:
    case Counter::evicted: return std::chrono::seconds(2);
  }
  return std::chrono::milliseconds(10);
}


// Writers take turns on the cache directory itself (flock(LOCK_EX) on it while they read, count
// and replace). Not on stats.json: it is replaced by rename, so each writer would lock the file it
// is about to replace and none would wait for another. Not on a lock file either: a directory has
// no hard links and cannot be swapped for a link inside the cache, and nothing else in the store
// locks the cache directory.
Result<UniqueFd> lock_counters(FileSystem& fs, const std::string& dir, std::chrono::microseconds patience) {
  auto fd = fs.open_directory(dir);
  if (!fd) return fd.status();
  SNAPCACHE_RETURN_IF_ERROR(lock_within(fs, fd->get(), patience));
  return fd;
}

// The counters as stats.json holds them; a missing, torn or oversized file, or one that is not
// the store's (a symlink, a FIFO, a hard link to a file elsewhere), reads as zeros.
json read_json(FileSystem& fs, const std::string& path) {
  auto text = read_own_file(fs, path, kMaxStatsBytes);
  if (!text) return json::object();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return json::object();
  return j;
}

// Replaces stats.json whole, by rename: the file a planted link named keeps its bytes, and a
// reader sees the old counters or the new, never half. Without fsync (counting is not data).
Status replace_json(FileSystem& fs, const std::string& path, json& j) {
  j["version"] = 1;
  return write_file_atomic(fs, path, j.dump(), AtomicFile::Durability::unsynced);
}

std::uint64_t counter_value(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

}  // namespace

void bump_counter(FileSystem& fs, const std::string& cache_directory, Counter counter) {
  auto lock = lock_counters(fs, cache_directory, patience_of(counter));
  if (!lock) return;
  const std::string path = stats_path(cache_directory);
  json j = read_json(fs, path);
  const std::int64_t now = util::now_unix_ns();
  if (!j.contains("since_unix_ns")) j["since_unix_ns"] = now;
  j[name_of(counter)] = counter_value(j, name_of(counter)) + 1;
  count_hour(j, counter, now);
  (void)replace_json(fs, path, j);
}

Result<CacheCounters> read_counters(FileSystem& fs, const std::string& cache_directory) {
  // No lock: stats.json is only ever replaced whole.
  CacheCounters out;
  json j = read_json(fs, stats_path(cache_directory));
  if (auto it = j.find("since_unix_ns"); it != j.end() && it->is_number_integer())
    out.since_unix_ns = it->get<std::int64_t>();
  for (const Field& f : kFields) out.*f.member = counter_value(j, f.name);
  out.history = read_hours(j);
  return out;
}

Status zero_counters(FileSystem& fs, const std::string& cache_directory) {
  auto lock = lock_counters(fs, cache_directory, std::chrono::seconds(2));
  if (!lock) return lock.status();
  json j = json::object();
  j["since_unix_ns"] = util::now_unix_ns();
  for (const Field& f : kFields) j[f.name] = 0;
  return replace_json(fs, stats_path(cache_directory), j);
}

}  // namespace snapcache::store

namespace snapcache {

Result<CacheCounters> read_counters(const Store& store) {
  return store::read_counters(store.fs(), store.config().directory);
}

Status zero_counters(Store& store) { return store::zero_counters(store.fs(), store.config().directory); }

}  // namespace snapcache
