// Lookup: find the entry for a key, prove it sound, map it privately, and hold its lease.
#include <chrono>

#include "util/fmt.h"

#include "format/manifest.h"
#include "format/stamp.h"
#include "snapcache/log.h"
#include "store/chunk_hashing.h"
#include "store/layout.h"
#include "store/miss_record.h"
#include "store/stats.h"
#include "util/parallel.h"
#include "snapcache/text.h"

namespace snapcache {

Snapshot::~Snapshot() = default;

std::byte* Snapshot::storage_data(std::uint32_t index) const {
  const StorageRecord& s = manifest_.storages.at(index);
  return mappings_.at(s.file).data() + s.offset;
}

namespace {

void count_outcome(const std::string& dir, const Key& key, const LookupOutcome& out) {
  switch (out.result) {
    case LookupResult::hit: store::bump_counter(dir, store::Counter::hit); break;
    case LookupResult::damaged: store::bump_counter(dir, store::Counter::damaged); break;
    case LookupResult::fallback: store::bump_counter(dir, store::Counter::fallback); break;
    case LookupResult::disabled: break;  // a disabled cache touches no disk
    case LookupResult::miss:
      store::bump_counter(dir, store::Counter::miss);
      store::record_miss(dir, key, out.entry_id);
      break;
  }
}

bool is_damage(StatusCode code) {
  return code == StatusCode::damaged || code == StatusCode::foreign || code == StatusCode::mismatch ||
         code == StatusCode::unfinished;
}
}  // namespace

Result<std::shared_ptr<Snapshot>> Store::open_snapshot(const std::string& id, const Key& key, VerifyPolicy policy,
                                                        LookupOutcome& outcome) {
  const std::string path = entry_path(id);
  std::shared_ptr<Snapshot> snap(new Snapshot());
  snap->id_ = id;
  snap->path_ = path;

  // A committed entry always has its lease and manifest; one without is damaged, not missing.
  auto lease = store::take_lease(*fs_, path, LockMode::shared);
  if (!lease) {
    Status st = lease.status();
    if (st.code() == StatusCode::not_found && fs_->stat(path))
      return Status(StatusCode::damaged, "entry has no lease file");
    if (st.code() == StatusCode::busy) return Status(StatusCode::busy, "entry is being published or evicted");
    return st;
  }
  snap->lease_ = std::move(*lease);

  auto bytes = read_file(*fs_, path + "/" + store::kManifestFile);
  if (!bytes) {
    if (bytes.status().code() == StatusCode::not_found || bytes.status().code() == StatusCode::damaged)
      return Status(StatusCode::damaged, "manifest is missing or short");
    return bytes.status();
  }
  auto manifest = format::decode_manifest(*bytes);
  if (!manifest) return manifest.status();
  snap->manifest_ = std::move(*manifest);
  const Manifest& m = snap->manifest_;
  if (!(m.key == key)) {
    return Status(StatusCode::damaged,
                  "stored key differs from the key of its id: " + describe_differences(diff_keys(key, m.key)));
  }

  // Trust the publication checksums only for files whose identity is the one recorded when they
  // were last proven (at publication, or by a later rehash recorded in the stamp).
  std::optional<format::Stamp> stamp;
  if (auto text = read_file(*fs_, path + "/" + store::kStampFile)) {
    if (auto s = format::decode_stamp(*text); s && s->identities.size() == m.files.size()) stamp = std::move(*s);
  }
  std::vector<UniqueFd> fds;
  std::vector<FileIdentity> identities;
  std::vector<std::uint32_t> to_hash;
  for (std::uint32_t i = 0; i < m.files.size(); ++i) {
    const DataFile& df = m.files[i];
    auto fd = fs_->open(path + "/" + df.name, OpenMode::read);
    if (!fd) {
      if (fd.status().code() == StatusCode::not_found)
        return Status(StatusCode::damaged, "data file " + df.name + " is missing");
      return fd.status();
    }
    auto id_now = fs_->fstat(fd->get());
    if (!id_now) return id_now.status();
    if (id_now->size != df.size)
      return Status(StatusCode::damaged,
                    fmt::format("data file {} is {} bytes, the manifest says {}", df.name, id_now->size, df.size));
    FileIdentity current = *id_now;
    current.is_directory = false;
    bool trusted = current == df.identity || (stamp && current == stamp->identities[i]);
    if (!trusted || policy == VerifyPolicy::always_rehash) to_hash.push_back(i);
    identities.push_back(current);
    fds.push_back(std::move(*fd));
  }
  if (!to_hash.empty()) {
    auto rehash = store::rehash_files(*fs_, path, m, to_hash, util::worker_count());
    outcome.rehashed = true;
    outcome.bytes_hashed = rehash.bytes;
    if (!rehash.status) return rehash.status;
    if (!rehash.damaged.empty()) return Status(StatusCode::damaged, store::describe_damage(rehash.damaged));
    format::Stamp fresh{store::now_unix_ns(), identities};
    // Best effort: without the stamp the next load rehashes again, nothing worse.
    (void)write_file_atomic(*fs_, path + "/" + store::kStampFile, format::encode_stamp(fresh));
  }

  for (std::uint32_t i = 0; i < m.files.size(); ++i) {
    auto region = fs_->map(fds[i].get(), m.files[i].size, MapMode::copy_on_write_private);
    if (!region) return region.status();
    snap->mappings_.push_back(std::move(*region));
  }
  (void)fs_->touch(path + "/" + store::kLeaseFile);  // last use, for LRU eviction
  return snap;
}

LookupOutcome Store::lookup(const Key& key, VerifyPolicy policy, const ExpectedLayout* expected) {
  const auto started = std::chrono::steady_clock::now();
  LookupOutcome out;
  out.entry_id = key_id(key);
  auto finish = [&](LookupResult result, std::string reason) {
    out.result = result;
    out.reason = std::move(reason);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    count_outcome(config_.directory, key, out);  // after timing: the bookkeeping is not the load's
    return out;
  };
  if (!config_.enabled()) return finish(LookupResult::disabled, "the cache is disabled by configuration");

  const std::string path = entry_path(out.entry_id);
  auto st = fs_->stat(path);
  if (!st) {
    if (st.status().code() != StatusCode::not_found) return finish(LookupResult::fallback, st.status().to_string());
    auto nearest = nearest_entry(key);
    if (!nearest) return finish(LookupResult::miss, "no entry for this key (the cache has no entries to compare)");
    return finish(LookupResult::miss, fmt::format("no entry for this key; nearest entry {} differs in {}",
                                                  store::short_id(nearest->first),
                                                  describe_differences(nearest->second)));
  }
  auto snap = open_snapshot(out.entry_id, key, policy, out);
  if (!snap) {
    Status s = snap.status();
    if (is_damage(s.code())) {
      (void)quarantine(out.entry_id, s.message());
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
  return finish(LookupResult::hit, out.rehashed ? "data files changed identity; rehashed and verified"
                                                : "verified by publication checksums");
}

}  // namespace snapcache
