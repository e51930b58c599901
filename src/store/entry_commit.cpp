#include "store/entry_commit.h"

#include <algorithm>
#include <cerrno>
#include <thread>

#include "util/fmt.h"

#include "format/manifest.h"
#include "format/origin.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "store/capacity.h"
#include "store/entry_index.h"
#include "store/layout.h"
#include "store/shared_data.h"
#include "store/size_ledger.h"
#include "store/use_order.h"
#include "store/stats.h"
#include "util/clock.h"
#include "util/file_io.h"

namespace snapcache::store {
namespace {

Counter counter_of(PublishResult result) {
  switch (result) {
    case PublishResult::published: return Counter::published;
    case PublishResult::already_present: return Counter::already_present;
    case PublishResult::skipped: return Counter::publish_skipped;
    case PublishResult::failed: return Counter::publish_failed;
  }
  return Counter::publish_failed;
}

}  // namespace

void settle_timestamps(const FileIdentity& id) {
  constexpr std::int64_t kTickMarginNs = 20'000'000;
  const std::int64_t stamp = std::max(id.mtime_ns, id.ctime_ns);
  const std::int64_t wait = stamp + kTickMarginNs - util::now_unix_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(wait, kTickMarginNs)));
}

Result<PendingEntry> PendingEntry::create(FileSystem& fs, std::string tmp_path) {
  PendingEntry entry(fs, std::move(tmp_path));
  SNAPCACHE_RETURN_IF_ERROR(fs.make_directory(entry.path_));
  entry.created_ = true;
  auto lease = fs.open(entry.path_ + "/" + kLeaseFile, OpenMode::create_read_only);
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
  SNAPCACHE_RETURN_IF_ERROR(write_all(fs, lease->get(), kLeaseTakenMark.data(), kLeaseTakenMark.size(), 0));
  entry.lease_ = std::move(*lease);
  return entry;
}

PendingEntry::PendingEntry(PendingEntry&& other) noexcept
    : fs_(other.fs_),
      path_(std::move(other.path_)),
      lease_(std::move(other.lease_)),
      data_files_(std::move(other.data_files_)),
      manifest_(std::move(other.manifest_)),
      origin_(std::move(other.origin_)),
      manifest_bytes_(other.manifest_bytes_),
      created_(other.created_),
      cache_directory_(std::move(other.cache_directory_)),
      counted_bytes_(other.counted_bytes_) {
  other.created_ = false;
}

namespace {

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

}  // namespace

Status PendingEntry::reserve(const Manifest& manifest, std::uint64_t manifest_bytes, const std::string& origin_bytes) {
  for (const DataFile& f : manifest.files) {
    auto fd = create_at_size(*fs_, file(f.name), f.size);
    if (!fd) return fd.status().with_context(f.name);
    data_files_.push_back(std::move(*fd));
  }
  auto fd = create_at_size(*fs_, file(kManifestFile), manifest_bytes);
  if (!fd) return fd.status().with_context(kManifestFile);
  manifest_ = std::move(*fd);
  manifest_bytes_ = manifest_bytes;
  auto origin = fs_->open(file(kOriginFile), OpenMode::create_read_only);
  if (!origin) return origin.status().with_context(kOriginFile);
  SNAPCACHE_RETURN_IF_ERROR(write_all(*fs_, origin->get(), origin_bytes.data(), origin_bytes.size(), 0).with_context(kOriginFile));
  origin_ = std::move(*origin);
  return Status::ok();
}

Status PendingEntry::write_manifest(const Manifest& manifest) {
  std::string bytes = format::encode_manifest(manifest);
  if (bytes.size() != manifest_bytes_)
    return Status(StatusCode::io_error,
                  fmt::format("the manifest is {} bytes, {} were reserved", bytes.size(), manifest_bytes_));
  SNAPCACHE_RETURN_IF_ERROR(write_all(*fs_, manifest_.get(), bytes.data(), bytes.size(), 0));
  return fs_->fsync(manifest_.get());
}

void PendingEntry::shared(std::uint64_t bytes) {
  bytes = std::min(bytes, counted_bytes_);
  counted_bytes_ -= bytes;
  if (bytes > 0) count_deleted(*fs_, cache_directory_, bytes);
}

PendingEntry::~PendingEntry() {
  // The failure that got us here is what the caller reports; a leftover is gc's to collect.
  if (created_ && remove_tree(*fs_, path_) && counted_bytes_ > 0) count_deleted(*fs_, cache_directory_, counted_bytes_);
}

Result<PendingEntry::Commit> PendingEntry::commit(const std::string& final_path) {
  SNAPCACHE_RETURN_IF_ERROR(fs_->fsync(lease_.get()));
  SNAPCACHE_RETURN_IF_ERROR(fs_->fsync(origin_.get()));
  SNAPCACHE_RETURN_IF_ERROR(fs_->fsync_directory(path_));
  if (Status st = fs_->rename(path_, final_path); !st) {
    if (st.sys_errno() == EEXIST || st.sys_errno() == ENOTEMPTY) return Commit::already_present;
    return st;
  }
  created_ = false;
  return Commit::done;
}

EntryCommit::EntryCommit(Store& store, const Key& key, EntryOrigin origin)
    : store_(store), component_(key.component), origin_(std::move(origin)), started_(std::chrono::steady_clock::now()) {
  out_.entry_id = key_id(key);
}

PublishOutcome& EntryCommit::finish(PublishResult result, Status status) {
  out_.result = result;
  out_.status = std::move(status);
  out_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  LogLevel level = result == PublishResult::failed ? LogLevel::warn : LogLevel::info;
  if (result == PublishResult::published)
    log(level, fmt::format("publish {}: entry {} ({}, {:.2f} s, {:.2f} GB/s)", component_, short_id(out_.entry_id),
                           format_size(out_.bytes), out_.seconds,
                           out_.seconds > 0 ? static_cast<double>(out_.bytes) / out_.seconds / 1e9 : 0.0));
  else
    log(level, fmt::format("publish {}: {} ({})", component_, to_string(result), out_.status.to_string()));
  if (store_.usable()) bump_counter(store_.fs(), store_.config().directory, counter_of(result));
  return out_;
}

bool EntryCommit::takes_entries() {
  if (Status usable = store_.usable(); !usable) {
    finish(PublishResult::skipped, usable);
    return false;
  }
  return true;
}

std::optional<PendingEntry> EntryCommit::begin(const Manifest& manifest) {
  out_.bytes = manifest.data_bytes();
  if (!takes_entries()) return std::nullopt;
  FileSystem& fs = store_.fs();
  const std::string final_path = store_.entry_path(out_.entry_id);
  if (fs.stat(final_path + "/" + kManifestFile)) {
    finish(PublishResult::already_present, {});
    return std::nullopt;
  }
  // Its length is known now (see PendingEntry::write_manifest), and so is every byte the entry takes.
  const std::uint64_t manifest_bytes = format::encode_manifest(manifest).size();
  if (manifest_bytes > format::kMaxManifestBytes) {  // no load would read it
    finish(PublishResult::failed,
           {StatusCode::unsupported, fmt::format("the manifest would be {}, more than the {} a load reads",
                                                 format_size(manifest_bytes), format_size(format::kMaxManifestBytes))});
    return std::nullopt;
  }
  origin_.recorded_unix_ns = util::now_unix_ns();
  const std::string origin_bytes = format::encode_origin(origin_);
  const std::uint64_t entry_bytes = out_.bytes + manifest_bytes + kLeaseTakenMark.size() + origin_bytes.size();
  // Dead writers' leftovers first: no grace (a live writer holds its lease), no strays.
  (void)collect_garbage(store_, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = false});
  // Room is made and taken under one lock, so two publishers never both count the same room.
  auto lock = ReservationLock::take(store_);
  if (!lock) {
    finish(lock.status().code() == StatusCode::busy ? PublishResult::skipped : PublishResult::failed, lock.status());
    return std::nullopt;
  }
  if (Status st = make_room(store_, *lock, entry_bytes, out_.evicted); !st) {
    finish(PublishResult::skipped, st);
    return std::nullopt;
  }
  auto entry = PendingEntry::create(
      fs, store_.config().directory + "/" + kTmpDir + "/" + out_.entry_id + "." + unique_suffix());
  Status st = entry.status();
  if (st) st = entry->reserve(manifest, manifest_bytes, origin_bytes);
  if (st) st = count_reserved(fs, store_.config().directory, *lock, entry_bytes);
  if (st) entry->counted(store_.config().directory, entry_bytes);
  if (!st) {
    finish(PublishResult::failed, st.with_context("publish"));
    return std::nullopt;
  }
  return std::move(*entry);
}

void EntryCommit::commit(PendingEntry& entry, Manifest& manifest) {
  entry.shared(share_identical_data(store_, entry.path(), out_.entry_id, manifest));
  if (Status st = entry.write_manifest(manifest); !st) {
    finish(PublishResult::failed, st.with_context("publish"));
    return;
  }
  // If another process published the same key first, its entry stands and ours goes.
  auto committed = entry.commit(store_.entry_path(out_.entry_id));
  if (!committed) {
    finish(PublishResult::failed, committed.status().with_context("publish"));
    return;
  }
  if (*committed == PendingEntry::Commit::already_present) {
    finish(PublishResult::already_present, {});
    return;
  }
  if (Status synced = store_.fs().fsync_directory(store_.config().directory + "/" + kEntriesDir); !synced) {
    // The entry is complete and visible; only its durability across a power cut is in doubt.
    log(LogLevel::warn, "publish: " + synced.to_string());
  }
  index_entry(store_.fs(), store_.config().directory, manifest.key, out_.entry_id);
  record_use(store_.fs(), store_.config().directory, out_.entry_id, util::now_unix_ns());
  finish(PublishResult::published, {});
}

Status seal_data_file(FileSystem& fs, int fd, DataFile& file) {
  SNAPCACHE_RETURN_IF_ERROR(fs.fsync(fd));
  auto identity = fs.fstat(fd);
  if (!identity) return identity.status();
  if (identity->size != file.size)
    return Status(StatusCode::io_error, fmt::format("data file is {} bytes after writing {}", identity->size, file.size));
  file.identity = *identity;
  file.identity.is_directory = false;
  settle_timestamps(file.identity);
  return Status::ok();
}

}  // namespace snapcache::store
