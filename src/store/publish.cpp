// Publication: write a whole entry into tmp/, make it durable, then rename it into entries/ in one
// step. A crash at any moment leaves either no entry or a whole one; a dead writer's leftovers in
// tmp/ are recognisable (nobody holds their lease lock) and collected.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

#include "util/fmt.h"

#include "format/manifest.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/store.h"
#include "snapcache/text.h"
#include "snapcache/version.h"
#include "store/capacity.h"
#include "store/layout.h"
#include "store/stats.h"
#include "util/clock.h"
#include "util/file_io.h"
#include "util/hash.h"
#include "util/parallel.h"

namespace snapcache {
namespace {

store::Counter counter_of(PublishResult result) {
  switch (result) {
    case PublishResult::published: return store::Counter::published;
    case PublishResult::already_present: return store::Counter::already_present;
    case PublishResult::skipped: return store::Counter::publish_skipped;
    case PublishResult::failed: return store::Counter::publish_failed;
  }
  return store::Counter::publish_failed;
}

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "";
  return buf.data();
}

// Writes chunk `chunk` of the data file (storage bytes and the zero padding between them) and
// returns its XXH3-64. Hashing happens on the same thread right beside the write, so N threads
// overlap hashing with I/O and publication costs about what writing alone costs.
Result<std::uint64_t> write_chunk(FileSystem& fs, int fd, const DataFile& file,
                                  const std::vector<StorageRecord>& layout,
                                  std::span<const StorageSource> sources, std::uint64_t chunk) {
  static const std::array<char, kStorageAlignment> zeros{};
  const std::uint64_t begin = chunk * file.chunk_size;
  const std::uint64_t end = std::min(begin + file.chunk_size, file.size);
  util::Hasher64 hasher;
  auto emit = [&](const void* data, std::uint64_t size, std::uint64_t offset) -> Status {
    hasher.update(data, size);
    return write_all(fs, fd, data, size, offset);
  };
  // First storage that ends after `begin`.
  auto it = std::partition_point(layout.begin(), layout.end(),
                                 [&](const StorageRecord& s) { return s.offset + s.nbytes <= begin; });
  std::uint64_t pos = begin;
  for (; pos < end; ++it) {
    std::uint64_t next_start = it == layout.end() ? end : std::min(it->offset, end);
    while (pos < next_start) {  // padding
      std::uint64_t n = std::min<std::uint64_t>(next_start - pos, zeros.size());
      SNAPCACHE_RETURN_IF_ERROR(emit(zeros.data(), n, pos));
      pos += n;
    }
    if (it == layout.end() || pos >= end) break;
    std::uint64_t stop = std::min(it->offset + it->nbytes, end);
    if (stop > pos) {
      const auto* src = static_cast<const std::byte*>(sources[static_cast<std::size_t>(it - layout.begin())].data);
      SNAPCACHE_RETURN_IF_ERROR(emit(src + (pos - it->offset), stop - pos, pos));
      pos = stop;
    }
  }
  return hasher.digest();
}

// File timestamps come from a coarse clock (one scheduler tick, up to 10 ms). A change made in the
// same tick as the identity we just recorded would keep that identity, and a later load would
// trust stale checksums. Waiting until the clock has moved on makes every later write visible as
// a new mtime/ctime. Costs at most ~20 ms per publication.
void settle_timestamps(const FileIdentity& id) {
  constexpr std::int64_t kTickMarginNs = 20'000'000;
  const std::int64_t stamp = std::max(id.mtime_ns, id.ctime_ns);
  const std::int64_t wait = stamp + kTickMarginNs - util::now_unix_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(wait, kTickMarginNs)));
}

// An entry being written in tmp/<id>.<suffix>/, its lease held exclusively so collectors leave it
// alone. Whatever was not committed is removed when it goes away, so every failure path of a
// publication leaves nothing behind.
class PendingEntry {
 public:
  static Result<PendingEntry> create(FileSystem& fs, std::string tmp_path) {
    PendingEntry entry(fs, std::move(tmp_path));
    SNAPCACHE_RETURN_IF_ERROR(fs.make_directory(entry.path_));
    entry.created_ = true;
    auto lease = fs.open(entry.path_ + "/" + store::kLeaseFile, OpenMode::create_read_only);
    if (!lease) return lease.status();
    // A collector may hold the new lease for a moment (it looks, sees no mark, lets go): retry for
    // up to a second rather than fail a publication over it, and never block on it for ever.
    Status locked = fs.lock(lease->get(), LockMode::exclusive, LockWait::no_wait);
    for (int attempt = 0; !locked && locked.code() == StatusCode::busy && attempt < 100; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      locked = fs.lock(lease->get(), LockMode::exclusive, LockWait::no_wait);
    }
    SNAPCACHE_RETURN_IF_ERROR(locked);
    // A byte written once the lock is held: a collector that gets the lock of a lease with this
    // byte knows its writer is gone; of an empty one, that its writer may not have locked it yet.
    SNAPCACHE_RETURN_IF_ERROR(write_all(fs, lease->get(), store::kLeaseTakenMark.data(), store::kLeaseTakenMark.size(), 0));
    entry.lease_ = std::move(*lease);
    return entry;
  }
  PendingEntry(PendingEntry&& other) noexcept
      : fs_(other.fs_), path_(std::move(other.path_)), lease_(std::move(other.lease_)), created_(other.created_) {
    other.created_ = false;
  }
  PendingEntry& operator=(PendingEntry&&) = delete;
  ~PendingEntry() {
    // The failure that got us here is what the caller reports; a leftover is gc's to collect.
    if (created_) (void)remove_tree(*fs_, path_);
  }

  std::string file(const std::string& name) const { return path_ + "/" + name; }

  enum class Commit { done, already_present };
  // Makes the lease and the directory durable, then renames the directory to `final_path`: the
  // commit. already_present when another process published the key first (ours then goes).
  Result<Commit> commit(const std::string& final_path) {
    SNAPCACHE_RETURN_IF_ERROR(fs_->fsync(lease_.get()));
    SNAPCACHE_RETURN_IF_ERROR(fs_->fsync_directory(path_));
    if (Status st = fs_->rename(path_, final_path); !st) {
      if (st.sys_errno() == EEXIST || st.sys_errno() == ENOTEMPTY) return Commit::already_present;
      return st;
    }
    created_ = false;
    return Commit::done;
  }

 private:
  PendingEntry(FileSystem& fs, std::string path) : fs_(&fs), path_(std::move(path)) {}
  FileSystem* fs_;
  std::string path_;
  UniqueFd lease_;
  bool created_ = false;  // the directory exists and is ours to remove
};

// The manifest of a publication with its storages laid out in one data file, each at an aligned
// offset; chunk hashes and the file identity are filled in as the data is written.
Result<Manifest> plan_manifest(const Key& key, std::span<const StorageSource> sources,
                               std::vector<TensorRecord> tensors, std::uint64_t chunk_size) {
  Manifest m;
  m.key = key_identity(key);  // what the manifest stores and decodes to
  m.creation = {util::now_unix_ns(), kVersion, host_name(), static_cast<std::uint32_t>(::getpid())};
  DataFile file;
  file.name = store::data_file_name(0);
  file.chunk_size = chunk_size;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].nbytes > 0 && sources[i].data == nullptr)
      return Status(StatusCode::invalid_argument, fmt::format("storage {} has no data", i));
    offset = align_up(offset, kStorageAlignment);
    m.storages.push_back({0, offset, sources[i].nbytes});
    offset += sources[i].nbytes;
  }
  file.size = offset;
  file.identity.size = offset;
  file.chunk_hashes.resize((file.size + file.chunk_size - 1) / file.chunk_size);
  m.files.push_back(file);
  m.tensors = std::move(tensors);
  if (Status st = format::validate_layout(m); !st)
    return Status(StatusCode::invalid_argument, "invalid tensor layout: " + st.message());
  return m;
}

// A publication's room in the cache, taken under the ReservationLock (store/capacity.h): its
// directory in tmp/ with the lease locked and marked, and its data file and manifest created at
// their full sizes. Whoever measures the cache next counts these bytes.
struct Reservation {
  PendingEntry entry;
  UniqueFd data;
  UniqueFd manifest;
};

// Read-only from the start: an accidental write to a published entry (which every loader maps) is
// refused, and no chmod after the data changes the identity recorded for it.
Result<UniqueFd> create_at_size(FileSystem& fs, const std::string& path, std::uint64_t size) {
  auto fd = fs.open(path, OpenMode::create_read_only);
  if (!fd) return fd.status();
  SNAPCACHE_RETURN_IF_ERROR(fs.allocate(fd->get(), size));
  // A file system that cannot preallocate leaves the size at 0, and the reservation would be
  // invisible to the next publisher's measure: a zero at the end gives the file its size.
  auto id = fs.fstat(fd->get());
  if (!id) return id.status();
  if (size > 0 && id->size < size) SNAPCACHE_RETURN_IF_ERROR(write_all(fs, fd->get(), "", 1, size - 1));
  return fd;
}

Result<Reservation> reserve(FileSystem& fs, const std::string& tmp_path, const Manifest& m,
                            std::uint64_t manifest_bytes) {
  auto entry = PendingEntry::create(fs, tmp_path);
  if (!entry) return entry.status();
  auto data = create_at_size(fs, entry->file(m.files[0].name), m.files[0].size);
  if (!data) return data.status();
  auto manifest = create_at_size(fs, entry->file(store::kManifestFile), manifest_bytes);
  if (!manifest) return manifest.status();
  return Reservation{std::move(*entry), std::move(*data), std::move(*manifest)};
}

// Writes the data file (hashing each chunk as it goes) and records the identity it has once
// durable: a load that sees that identity again trusts these hashes.
Status write_data(FileSystem& fs, int data, Manifest& m, std::span<const StorageSource> sources,
                  std::size_t threads) {
  DataFile& df = m.files[0];
  SNAPCACHE_RETURN_IF_ERROR(util::parallel_for(df.chunk_hashes.size(), threads, [&](std::size_t c) -> Status {
    auto h = write_chunk(fs, data, df, m.storages, sources, c);
    if (!h) return h.status();
    df.chunk_hashes[c] = *h;
    return Status::ok();
  }));
  SNAPCACHE_RETURN_IF_ERROR(fs.fsync(data));
  auto identity = fs.fstat(data);
  if (!identity) return identity.status();
  if (identity->size != df.size)
    return Status(StatusCode::io_error, fmt::format("data file is {} bytes after writing {}", identity->size, df.size));
  df.identity = *identity;
  df.identity.is_directory = false;
  settle_timestamps(df.identity);
  return Status::ok();
}

// The manifest's bytes fill the file reserved for them exactly: every field publication fills in
// after planning (chunk hashes, the data file's identity) has a fixed width.
Status write_manifest(FileSystem& fs, int fd, const Manifest& m, std::uint64_t reserved_bytes) {
  std::string bytes = format::encode_manifest(m);
  if (bytes.size() != reserved_bytes)
    return Status(StatusCode::io_error, fmt::format("the manifest is {} bytes, {} were reserved", bytes.size(),
                                                    reserved_bytes));
  SNAPCACHE_RETURN_IF_ERROR(write_all(fs, fd, bytes.data(), bytes.size(), 0));
  return fs.fsync(fd);
}

}  // namespace

PublishOutcome Store::publish(const Key& key, std::span<const StorageSource> sources,
                              std::vector<TensorRecord> tensors, const PublishOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  PublishOutcome out;
  out.entry_id = key_id(key);
  auto finish = [&](PublishResult result, Status status) {
    out.result = result;
    out.status = std::move(status);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    LogLevel level = result == PublishResult::failed ? LogLevel::warn : LogLevel::info;
    if (result == PublishResult::published)
      log(level, fmt::format("publish {}: entry {} ({}, {:.2f} s, {:.2f} GB/s)", key.component,
                             store::short_id(out.entry_id), format_size(out.bytes), out.seconds,
                             out.seconds > 0 ? static_cast<double>(out.bytes) / out.seconds / 1e9 : 0.0));
    else
      log(level, fmt::format("publish {}: {} ({})", key.component, to_string(result), out.status.to_string()));
    if (config_.enabled() && unavailable_.is_ok()) store::bump_counter(config_.directory, counter_of(result));
    return out;
  };
  if (!config_.enabled())
    return finish(PublishResult::skipped, {StatusCode::disabled, "the cache is disabled by configuration"});
  if (!unavailable_) return finish(PublishResult::skipped, unavailable_);
  if (options.chunk_size == 0)
    return finish(PublishResult::failed, {StatusCode::invalid_argument, "chunk size must be positive"});

  auto planned = plan_manifest(key, sources, std::move(tensors), options.chunk_size);
  if (!planned) return finish(PublishResult::failed, planned.status());
  Manifest& m = *planned;
  out.bytes = m.files[0].size;
  // Its length is known now (see write_manifest), and so is every byte the entry will take.
  const std::uint64_t manifest_bytes = format::encode_manifest(m).size();
  if (manifest_bytes > format::kMaxManifestBytes)  // no load would read it
    return finish(PublishResult::failed,
                  {StatusCode::unsupported, fmt::format("the manifest would be {}, more than the {} a load reads",
                                                        format_size(manifest_bytes), format_size(format::kMaxManifestBytes))});
  const std::uint64_t entry_bytes = out.bytes + manifest_bytes + store::kLeaseTakenMark.size();

  const std::string final_path = entry_path(out.entry_id);
  if (fs_->stat(final_path + "/" + store::kManifestFile)) return finish(PublishResult::already_present, {});

  // Dead writers' leftovers first: no grace (a live writer holds its lease), no strays.
  (void)collect_garbage(*this, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = false});
  std::optional<Reservation> reserved;
  {
    // Room is made and taken under one lock, so two publishers never both count the same room.
    auto lock = store::ReservationLock::take(*this);
    if (!lock)
      return finish(lock.status().code() == StatusCode::busy ? PublishResult::skipped : PublishResult::failed,
                    lock.status());
    if (Status st = store::make_room(*this, *lock, entry_bytes, out.evicted); !st)
      return finish(PublishResult::skipped, st);
    auto taken = reserve(*fs_, config_.directory + "/" + store::kTmpDir + "/" + out.entry_id + "." + unique_suffix(),
                         m, manifest_bytes);
    if (!taken) return finish(PublishResult::failed, taken.status().with_context("publish"));
    reserved.emplace(std::move(*taken));
  }

  Status st = write_data(*fs_, reserved->data.get(), m, sources,
                         options.threads ? options.threads : util::worker_count());
  if (st) st = write_manifest(*fs_, reserved->manifest.get(), m, manifest_bytes);
  if (!st) return finish(PublishResult::failed, st.with_context("publish"));
  // If another process published the same key first, its entry stands and ours goes.
  auto committed = reserved->entry.commit(final_path);
  if (!committed) return finish(PublishResult::failed, committed.status().with_context("publish"));
  if (*committed == PendingEntry::Commit::already_present) return finish(PublishResult::already_present, {});
  if (Status synced = fs_->fsync_directory(config_.directory + "/" + store::kEntriesDir); !synced) {
    // The entry is complete and visible; only its durability across a power cut is in doubt.
    log(LogLevel::warn, "publish: " + synced.to_string());
  }
  return finish(PublishResult::published, {});
}

}  // namespace snapcache
