#include "store/size_ledger.h"

#include <cerrno>
#include <charconv>

#include "util/fmt.h"

#include "snapcache/maintenance.h"
#include "store/capacity.h"
#include "store/layout.h"
#include "util/atomic_file.h"
#include "util/file_io.h"

namespace snapcache::store {
namespace {

constexpr std::string_view kPrefix = "snapcache size ";
constexpr std::uint64_t kMaxSizeFileBytes = 64;  // the prefix, 20 digits and a newline

std::string ledger_path(const std::string& cache_directory) { return cache_directory + "/" + kSizeFile; }

// The lock on <dir>/entries/ (a directory: no second name, no link swapped in inside the cache).
Result<UniqueFd> lock_ledger(FileSystem& fs, const std::string& cache_directory, std::chrono::microseconds patience) {
  auto top = fs.open_directory(cache_directory);
  if (!top) return top.status();
  auto entries = fs.open_directory_at(top->get(), kEntriesDir);
  if (!entries) return entries.status();
  SNAPCACHE_RETURN_IF_ERROR(lock_within(fs, entries->get(), patience));
  return entries;
}

// An addition waits as long as a publication waits for the ReservationLock; the holder of this
// lock only reads and replaces a small file, unless it is measuring a cache that had no figure.
constexpr auto kAddPatience = std::chrono::seconds(kReservationWaitSeconds);
constexpr auto kSubtractPatience = std::chrono::seconds(2);

std::optional<std::uint64_t> read_figure(FileSystem& fs, const std::string& cache_directory) {
  auto text = read_own_file(fs, ledger_path(cache_directory), kMaxSizeFileBytes);
  if (!text || !text->starts_with(kPrefix) || !text->ends_with('\n')) return std::nullopt;
  const char* first = text->data() + kPrefix.size();
  const char* last = text->data() + text->size() - 1;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last || first == last) return std::nullopt;
  return value;
}

Status write_figure(FileSystem& fs, const std::string& cache_directory, std::uint64_t bytes,
                    AtomicFile::Durability durability) {
  return write_file_atomic(fs, ledger_path(cache_directory), fmt::format("{}{}\n", kPrefix, bytes), durability);
}

}  // namespace

Result<std::uint64_t> counted_bytes(Store& store, const ReservationLock&) {
  FileSystem& fs = store.fs();
  const std::string& dir = store.config().directory;
  auto lock = lock_ledger(fs, dir, kAddPatience);
  if (!lock) return lock.status().with_context("count the cache's size");
  if (auto figure = read_figure(fs, dir)) return *figure;
  auto measured = total_bytes(store);
  if (!measured) return measured.status();
  (void)write_figure(fs, dir, *measured, AtomicFile::Durability::durable);  // measured again next time if lost
  return *measured;
}

Result<std::uint64_t> size_now(Store& store) {
  if (auto figure = read_figure(store.fs(), store.config().directory)) return *figure;
  return total_bytes(store);
}

Status count_reserved(FileSystem& fs, const std::string& cache_directory, const ReservationLock&, std::uint64_t bytes) {
  auto lock = lock_ledger(fs, cache_directory, kAddPatience);
  if (!lock) return lock.status().with_context("count a reservation");
  // Durable: a figure that lost an addition would let the cache outgrow its capacity. One that
  // cannot be read or replaced now goes, so that the next publication measures the cache.
  auto figure = read_figure(fs, cache_directory);
  if (figure && write_figure(fs, cache_directory, *figure + bytes, AtomicFile::Durability::durable)) return Status::ok();
  Status removed = fs.remove_file(ledger_path(cache_directory));
  // A directory planted there is no figure either: nothing reads one as a figure.
  if (removed || removed.code() == StatusCode::not_found || removed.sys_errno() == EISDIR) return Status::ok();
  return removed.with_context("count a reservation");
}

void count_deleted(FileSystem& fs, const std::string& cache_directory, std::uint64_t bytes) {
  if (bytes == 0) return;
  auto lock = lock_ledger(fs, cache_directory, kSubtractPatience);
  if (!lock) return;
  auto figure = read_figure(fs, cache_directory);
  if (!figure) return;
  // Unsynced: a crash that loses it leaves the figure high (or no figure), both safe.
  (void)write_figure(fs, cache_directory, *figure - std::min(*figure, bytes), AtomicFile::Durability::unsynced);
}

Result<std::uint64_t> recount(Store& store, const ReservationLock&) {
  FileSystem& fs = store.fs();
  const std::string& dir = store.config().directory;
  auto lock = lock_ledger(fs, dir, kAddPatience);
  if (!lock) return lock.status().with_context("count the cache's size");
  auto measured = total_bytes(store);
  if (!measured) return measured.status();
  SNAPCACHE_RETURN_IF_ERROR(write_figure(fs, dir, *measured, AtomicFile::Durability::durable));
  return *measured;
}

}  // namespace snapcache::store
