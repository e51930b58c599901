#include "store/use_order.h"

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "util/fmt.h"

#include "snapcache/store.h"
#include "store/capacity.h"
#include "store/layout.h"
#include "util/clock.h"

namespace snapcache::store {
namespace {

constexpr std::int64_t kSecondsPerThousand = 1000;

std::int64_t second_of(std::int64_t unix_ns) { return std::max<std::int64_t>(0, unix_ns / 1'000'000'000); }


std::string thousand_path(const std::string& root, std::int64_t thousand) { return fmt::format("{}/{}", root, thousand); }
std::string second_path(const std::string& root, std::int64_t second) {
  return fmt::format("{}/{}/{}", root, second / kSecondsPerThousand, second);
}

// The directory of `second`'s records, made if absent; empty when it cannot be (a link planted).
std::string second_directory(FileSystem& fs, const std::string& root, std::int64_t second) {
  const std::string path = second_path(root, second);
  if (!own_directory(fs, root, true) || !own_directory(fs, thousand_path(root, second / kSecondsPerThousand), true) ||
      !own_directory(fs, path, true))
    return {};
  return path;
}

std::vector<std::int64_t> numbers_in(FileSystem& fs, const std::string& path) {
  std::vector<std::int64_t> out;
  if (!own_directory(fs, path, false)) return out;
  auto listed = fs.list_directory(path);
  if (!listed) return out;
  for (const auto& e : *listed)
    if (auto n = use_order_number(e.name); n && e.is_directory) out.push_back(*n);
  return out;
}

}  // namespace

std::optional<std::int64_t> use_order_number(const std::string& name) {
  if (name.empty() || name.size() > 18 || (name.size() > 1 && name[0] == '0')) return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
  if (ec != std::errc() || end != name.data() + name.size() || value < 0) return std::nullopt;
  return value;
}

bool is_use_order_directory(const std::string& thousand, const std::string& second) {
  auto t = use_order_number(thousand);
  if (!t) return false;
  if (second.empty()) return true;
  auto s = use_order_number(second);
  return s && *s / kSecondsPerThousand == *t;
}

void record_use(FileSystem& fs, const std::string& cache_directory, const std::string& id, std::int64_t unix_ns) {
  const std::string root = cache_directory + "/" + kUseOrderDir;
  // Twice: a reader may remove the second's directory, empty, between its making and the record's.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string dir = second_directory(fs, root, second_of(unix_ns));
    if (dir.empty()) return;
    auto made = fs.open(dir + "/" + id, OpenMode::create_exclusive, Follow::no);
    if (made || made.status().sys_errno() != ENOENT) return;
  }
}

UseOrder::UseOrder(Store& store)
    : store_(store), fs_(store.fs()), root_(store.config().directory + "/" + kUseOrderDir), now_(util::now_unix_ns()) {}

std::optional<UseOrder::Next> UseOrder::next() {
  for (;;) {
    while (!ready_.empty()) {
      std::pop_heap(ready_.begin(), ready_.end());
      Candidate c = std::move(ready_.back());
      ready_.pop_back();
      if (given_.insert(c.id).second) return Next{std::move(c.id), std::move(c.record)};
    }
    if (next_second()) continue;
    if (read_everything_) return std::nullopt;
    read_everything_ = true;
    read_every_entry();
  }
}

void UseOrder::forget(const Next& entry) {
  if (!entry.record.empty()) (void)fs_.remove_file(entry.record);
}

bool UseOrder::next_thousand() {
  if (!listed_thousands_) {
    listed_thousands_ = true;
    for (std::int64_t t : numbers_in(fs_, root_)) thousands_.insert(t);
  }
  if (thousands_.empty()) return false;
  thousand_ = *thousands_.begin();
  thousands_.erase(thousands_.begin());
  for (std::int64_t s : numbers_in(fs_, thousand_path(root_, thousand_)))
    if (s / kSecondsPerThousand == thousand_) seconds_.insert(s);
  if (seconds_.empty()) (void)fs_.remove_directory(thousand_path(root_, thousand_));  // only if empty
  return true;
}

bool UseOrder::next_second() {
  while (seconds_.empty())
    if (!next_thousand()) return false;
  second_ = *seconds_.begin();
  seconds_.erase(seconds_.begin());
  read_second();
  return true;
}

std::int64_t UseOrder::last_use(const std::string& id, bool& gone) {
  const std::string path = store_.entry_path(id);
  auto lease = fs_.stat(path + "/" + kLeaseFile, Follow::no);
  if (lease) return last_use_for_eviction(fs_, path, lease->mtime_ns, now_, DryRun::no);
  auto entry = fs_.stat(path, Follow::no);
  gone = !entry && entry.status().code() == StatusCode::not_found;
  return 0;  // no lease: damaged, evicted first
}

void UseOrder::read_second() {
  const std::string dir = second_path(root_, second_);
  if (!own_directory(fs_, dir, false)) return;
  auto listed = fs_.list_directory(dir);
  if (!listed) return;
  for (const auto& e : *listed) {
    if (!is_entry_id(e.name) || given_.count(e.name)) continue;  // strays are gc's
    const std::string record = dir + "/" + e.name;
    bool gone = false;
    const std::int64_t used = last_use(e.name, gone);
    if (gone) {
      (void)fs_.remove_file(record);
      continue;
    }
    const std::int64_t second = second_of(used);
    if (second > second_) {  // used since it was recorded: its turn comes later
      const std::string later = second_directory(fs_, root_, second);
      if (!later.empty() && fs_.rename(record, later + "/" + e.name)) {
        if (second / kSecondsPerThousand == thousand_) seconds_.insert(second);
        else thousands_.insert(second / kSecondsPerThousand);
        continue;
      }
    }
    ready_.push_back({e.name, record, used});
    std::push_heap(ready_.begin(), ready_.end());
  }
  (void)fs_.remove_directory(dir);  // only if empty
}

void UseOrder::read_every_entry() {
  const std::string& cache = store_.config().directory;
  auto names = fs_.list_directory(cache + "/" + kEntriesDir);
  if (!names) return;
  for (const auto& e : *names) {
    if (!is_entry_id(e.name) || given_.count(e.name)) continue;
    bool gone = false;
    const std::int64_t used = last_use(e.name, gone);
    if (gone) continue;
    record_use(fs_, cache, e.name, used);
    ready_.push_back({e.name, second_path(root_, second_of(used)) + "/" + e.name, used});
  }
  std::make_heap(ready_.begin(), ready_.end());
}

}  // namespace snapcache::store
