// Lookup: find the entry for a key, prove it sound, map it privately, and hold its lease.
#include <chrono>

#include "util/fmt.h"

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "store/chunk_hashing.h"
#include "store/entry_check.h"
#include "store/entry_origin.h"
#include "store/layout.h"
#include "store/miss_record.h"
#include "store/secondary.h"
#include "store/snapshot_impl.h"
#include "store/stats.h"
#include "store/touched_checkpoint.h"
#include "util/parallel.h"

namespace snapcache {

Snapshot::Snapshot(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Snapshot::~Snapshot() = default;

const std::string& Snapshot::id() const { return impl_->id; }
const std::string& Snapshot::path() const { return impl_->path; }
const Manifest& Snapshot::manifest() const { return impl_->manifest; }

std::byte* Snapshot::storage_data(std::uint32_t index) const {
  const StorageRecord& s = impl_->manifest.storages.at(index);
  return impl_->mappings.at(s.file).data() + s.offset;
}


std::string Snapshot::data_file_path(std::uint32_t file) const {
  return impl_->path + "/" + impl_->manifest.files.at(file).name;
}

namespace {

// Differences a miss's reason names before "(and N more)": a file rewritten in place alone
// differs in its mtime, ctime and size, and the reason is what `snapcache why` shows later.
constexpr std::size_t kReasonDifferences = 8;

void count_outcome(FileSystem& fs, const std::string& dir, const Key& key, const LookupOutcome& out) {
  switch (out.result) {
    case LookupResult::hit: store::bump_counter(fs, dir, store::Counter::hit); break;
    case LookupResult::damaged: store::bump_counter(fs, dir, store::Counter::damaged); break;
    case LookupResult::fallback: store::bump_counter(fs, dir, store::Counter::fallback); break;
    case LookupResult::disabled: break;  // a disabled cache touches no disk
    case LookupResult::miss:
      store::bump_counter(fs, dir, store::Counter::miss);
      store::record_miss(fs, dir, key, out.entry_id, out.reason);
      break;
  }
}

// Takes the entry's lease (so nobody evicts it meanwhile), checks it (store/entry_check.h),
// rehashes the files whose identity changed, and maps every data file privately.
Result<std::shared_ptr<Snapshot>> open_snapshot(const std::shared_ptr<FileSystem>& file_system,
                                                const std::string& path, const std::string& id, const Key& key,
                                                VerifyPolicy policy, LookupOutcome& outcome) {
  FileSystem& fs = *file_system;
  auto impl = std::make_unique<Snapshot::Impl>();
  impl->fs = file_system;
  impl->id = id;
  impl->path = path;
  auto lease = store::take_reader_lease(fs, path, id);
  if (!lease) return lease.status();
  impl->lease = std::move(*lease);

  store::EntryCheck check = store::check_entry(fs, path, id);
  if (!check.status) return check.status;
  impl->manifest = std::move(*check.manifest);
  const Manifest& m = impl->manifest;
  // Identities, as the id was made (a stored key is one already): same id, other identity is a
  // hash collision, never seen but never trusted.
  if (!(key_identity(m.key) == key_identity(key))) {
    return Status(StatusCode::damaged,
                  "stored key differs from the key of its id: " + describe_differences(diff_keys(key, m.key)));
  }
  std::vector<std::uint32_t> to_hash = check.untrusted_files;
  if (policy == VerifyPolicy::always_rehash) {
    to_hash.clear();
    for (std::uint32_t i = 0; i < m.files.size(); ++i) to_hash.push_back(i);
  }
  if (!to_hash.empty()) {
    // The descriptors the check opened are the ones mapped below and kept by the Snapshot: hashing
    // anything else (the path reopened) would prove one file and serve another.
    auto rehash = store::rehash_files(fs, m, check.data_files, to_hash, util::worker_count());
    outcome.rehashed = true;
    outcome.bytes_hashed = rehash.bytes;
    if (!rehash.status) return rehash.status;
    if (!rehash.damaged.empty()) return Status(StatusCode::damaged, store::describe_damage(rehash.damaged));
    store::record_proven_identities(fs, path, check.identities);
  }

  for (std::uint32_t i = 0; i < m.files.size(); ++i) {
    auto region = fs.map(check.data_files[i].get(), m.files[i].size, MapMode::copy_on_write_private);
    if (!region) return region.status();
    impl->mappings.push_back(std::move(*region));
  }
  impl->data_files = std::move(check.data_files);
  // The entry's bytes are proven by their checksums, not by the lease: it is served either way.
  store::mark_used(fs, impl->lease.get());
  return std::make_shared<Snapshot>(std::move(impl));
}

}  // namespace

LookupOutcome Store::lookup(const Key& key) { return lookup(key, VerifyPolicy::trust_identity); }

LookupOutcome Store::lookup(const Key& key, VerifyPolicy policy, const ExpectedLayout* expected) {
  const auto started = std::chrono::steady_clock::now();
  LookupOutcome out;
  out.entry_id = key_id(key);
  auto finish = [&](LookupResult result, std::string reason) {
    out.result = result;
    out.reason = std::move(reason);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // After timing: the bookkeeping is not the load's. An unavailable cache has no counters.
    if (unavailable_.is_ok()) count_outcome(*fs_, config_.directory, key, out);
    return out;
  };
  if (Status u = usable(); !u)
    return finish(u.code() == StatusCode::disabled ? LookupResult::disabled : LookupResult::fallback, u.message());

  const std::string path = entry_path(out.entry_id);
  auto st = fs_->stat(path);
  std::string secondary_note;  // how the entry came from the secondary store, when it did
  if (!st && st.status().code() == StatusCode::not_found && !config_.secondary_directory.empty()) {
    store::SecondaryAnswer answer = store::copy_from_secondary(*this, out.entry_id);
    if (answer.kind == store::SecondaryAnswer::Kind::unusable) return finish(LookupResult::fallback, answer.reason);
    if (answer.kind == store::SecondaryAnswer::Kind::copied) {
      secondary_note = answer.reason + "; ";
      st = fs_->stat(path);
    } else {
      secondary_note = "; " + answer.reason;
    }
  }
  if (!st) {
    if (st.status().code() != StatusCode::not_found) return finish(LookupResult::fallback, st.status().to_string());
    auto nearest = nearest_entry(*this, key);
    if (!nearest) return finish(LookupResult::miss, first_load_reason(key) + secondary_note);
    if (auto same = store::entry_with_same_bytes(*this, key, nearest->id)) {
      // Served under the entry's own key; a failure to open it leaves the miss as it was.
      auto snap = open_snapshot(fs_, entry_path(nearest->id), nearest->id, same->key, policy, out);
      if (snap && (expected == nullptr || check_expected_layout((*snap)->manifest(), *expected).is_ok())) {
        out.entry_id = nearest->id;
        out.snapshot = std::move(*snap);
        return finish(LookupResult::hit,
                      fmt::format("{}{} checkpoint file{} changed identity since entry {} was made, not bytes ({} "
                                  "hashed in {:.2f} s); data files {}",
                                  secondary_note, same->files_changed, same->files_changed == 1 ? "" : "s",
                                  store::short_id(nearest->id), format_size(same->bytes_hashed), same->seconds,
                                  out.rehashed ? "rehashed and verified" : "unchanged since their last full check"));
      }
    }
    // The difference in words, as it is now: the cause of this miss, kept for `snapcache why`.
    return finish(LookupResult::miss, fmt::format("no entry for this key; nearest entry {} ({}): {}{}",
                                                  store::short_id(nearest->id), kNearestEntryWords,
                                                  describe_differences(nearest->differences, kReasonDifferences),
                                                  secondary_note));
  }
  auto snap = open_snapshot(fs_, path, out.entry_id, key, policy, out);
  if (!snap) {
    Status s = snap.status();
    if (is_entry_damage(s.code())) {
      // The load's answer stands whether or not the entry could be moved away; a failed move
      // leaves it for the next load or `snapcache verify --repair`.
      (void)quarantine(*this, out.entry_id, s.message());
      return finish(LookupResult::damaged, "entry " + store::short_id(out.entry_id) + " is damaged and was removed: " +
                                               s.message());
    }
    if (s.code() == StatusCode::busy || s.code() == StatusCode::not_found)
      return finish(LookupResult::miss, s.message());
    return finish(LookupResult::fallback, s.to_string());
  }
  if (expected != nullptr) {
    if (Status mismatch = check_expected_layout((*snap)->manifest(), *expected); !mismatch) {
      // Same key, other layout: the code that prepares weights changed without changing its
      // source identity. The entry cannot be right for this caller; treat it as a miss.
      return finish(LookupResult::miss, "entry does not match the expected layout: " + mismatch.message());
    }
  }
  out.snapshot = std::move(*snap);
  // Where the entry came from, unless this cache published it (the usual case, said by nothing)
  // or this very lookup copied it (the note says so).
  std::string origin_note;
  if (secondary_note.empty()) {
    const store::OriginRead read = store::read_origin(*fs_, path);
    if (!read.unreadable.empty())
      origin_note = "entry origin not known: its record cannot be read (" + read.unreadable + "); ";
    else if (read.origin.kind != EntryOriginKind::published)
      origin_note = "entry " + describe_origin(read.origin) + "; ";
  }
  return finish(LookupResult::hit, secondary_note + origin_note +
                                       (out.rehashed ? "data files changed identity; every chunk rehashed and verified"
                                                     : "data files unchanged (by identity) since their last full check"));
}

}  // namespace snapcache
