#include "store/entry_commit.h"

#include <algorithm>
#include <cerrno>
#include <thread>

#include "util/fmt.h"

#include "format/manifest.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "store/capacity.h"
#include "store/layout.h"
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

// File timestamps come from a coarse clock (one scheduler tick, up to 10 ms). A change made in the
// same tick as the identity we just recorded would keep that identity, and a later load would
// trust stale checksums. Waiting until the clock has moved on makes every later write visible as
// a new mtime/ctime. Costs at most ~20 ms per entry.
void settle_timestamps(const FileIdentity& id) {
  constexpr std::int64_t kTickMarginNs = 20'000'000;
  const std::int64_t stamp = std::max(id.mtime_ns, id.ctime_ns);
  const std::int64_t wait = stamp + kTickMarginNs - util::now_unix_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(wait, kTickMarginNs)));
}

Status write_manifest(FileSystem& fs, const PendingEntry& entry, const Manifest& m) {
  std::string bytes = format::encode_manifest(m);
  if (bytes.size() > format::kMaxManifestBytes)  // no load would read it
    return Status(StatusCode::unsupported, fmt::format("the manifest would be {}, more than the {} a load reads",
                                                       format_size(bytes.size()), format_size(format::kMaxManifestBytes)));
  auto fd = fs.open(entry.file(kManifestFile), OpenMode::create_read_only);
  if (!fd) return fd.status();
  SNAPCACHE_RETURN_IF_ERROR(write_all(fs, fd->get(), bytes.data(), bytes.size(), 0));
  return fs.fsync(fd->get());
}

}  // namespace

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
    : fs_(other.fs_), path_(std::move(other.path_)), lease_(std::move(other.lease_)), created_(other.created_) {
  other.created_ = false;
}

PendingEntry::~PendingEntry() {
  // The failure that got us here is what the caller reports; a leftover is gc's to collect.
  if (created_) (void)remove_tree(*fs_, path_);
}

Result<PendingEntry::Commit> PendingEntry::commit(const std::string& final_path) {
  SNAPCACHE_RETURN_IF_ERROR(fs_->fsync(lease_.get()));
  SNAPCACHE_RETURN_IF_ERROR(fs_->fsync_directory(path_));
  if (Status st = fs_->rename(path_, final_path); !st) {
    if (st.sys_errno() == EEXIST || st.sys_errno() == ENOTEMPTY) return Commit::already_present;
    return st;
  }
  created_ = false;
  return Commit::done;
}

EntryCommit::EntryCommit(Store& store, const Key& key)
    : store_(store), component_(key.component), started_(std::chrono::steady_clock::now()) {
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
  if (store_.config().enabled() && store_.unavailable().is_ok())
    bump_counter(store_.config().directory, counter_of(result));
  return out_;
}

std::optional<PendingEntry> EntryCommit::begin(std::uint64_t data_bytes, std::size_t tensors, std::size_t chunks) {
  out_.bytes = data_bytes;
  if (!store_.config().enabled()) {
    finish(PublishResult::skipped, {StatusCode::disabled, "the cache is disabled by configuration"});
    return std::nullopt;
  }
  if (!store_.unavailable()) {
    finish(PublishResult::skipped, store_.unavailable());
    return std::nullopt;
  }
  FileSystem& fs = store_.fs();
  const std::string final_path = store_.entry_path(out_.entry_id);
  if (fs.stat(final_path + "/" + kManifestFile)) {
    finish(PublishResult::already_present, {});
    return std::nullopt;
  }
  // Dead writers' leftovers first: no grace (a live writer holds its lease), no strays.
  (void)collect_garbage(store_, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = false});
  const std::uint64_t manifest_estimate = 4096 + 64 * tensors + 8 * chunks;
  if (Status st = make_room(store_, data_bytes + manifest_estimate, out_.evicted); !st) {
    finish(PublishResult::skipped, st);
    return std::nullopt;
  }
  auto entry = PendingEntry::create(
      fs, store_.config().directory + "/" + kTmpDir + "/" + out_.entry_id + "." + unique_suffix());
  if (!entry) {
    finish(PublishResult::failed, entry.status().with_context("publish"));
    return std::nullopt;
  }
  return std::move(*entry);
}

void EntryCommit::commit(PendingEntry& entry, const Manifest& manifest) {
  if (Status st = write_manifest(store_.fs(), entry, manifest); !st) {
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
