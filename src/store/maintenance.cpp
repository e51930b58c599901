// Listing, inspection, verification and removal of entries.
#include <sys/sysmacros.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "util/fmt.h"

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "store/chunk_hashing.h"
#include "store/entry_claim.h"
#include "store/entry_check.h"
#include "store/entry_origin.h"
#include "store/entry_index.h"
#include "store/layout.h"
#include "store/shared_data.h"
#include "store/size_ledger.h"
#include "store/stats.h"
#include "util/file_io.h"
#include "util/parallel.h"

namespace snapcache {
namespace store {

namespace {

// Who holds flock locks on which file, from one read of /proc/locks: lines such as
// "1: FLOCK  ADVISORY  READ  1234 fd:01:5678 0 EOF". `ls` of 100k entries reads it once, not once
// per entry (a read of /proc/locks costs about 0.1 ms here).
class FlockTable {
 public:
  static FlockTable read() {
    FlockTable table;
    std::ifstream in("/proc/locks");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string n, kind, advisory, mode, pid, where;
      fields >> n >> kind;
      if (kind == "->") fields >> kind;  // a waiter
      fields >> advisory >> mode >> pid >> where;
      if (kind != "FLOCK") continue;
      try {
        table.holders_[where].push_back(std::stoi(pid));
      } catch (...) {
      }
    }
    for (auto& [file, pids] : table.holders_) {
      std::sort(pids.begin(), pids.end());
      pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    }
    return table;
  }

  std::vector<int> holders(const FileIdentity& id) const {
    auto it = holders_.find(fmt::format("{:02x}:{:02x}:{}", major(id.device), minor(id.device), id.inode));
    return it == holders_.end() ? std::vector<int>{} : it->second;
  }

 private:
  std::map<std::string, std::vector<int>> holders_;
};

}  // namespace

std::vector<int> flock_holders(const FileIdentity& id) { return FlockTable::read().holders(id); }

}  // namespace store

std::string describe_processes(const std::vector<int>& pids) {
  std::vector<std::string> parts;
  for (int pid : pids) {
    std::ifstream in(fmt::format("/proc/{}/comm", pid));
    std::string name;
    if (!std::getline(in, name) || name.empty()) name = "?";
    parts.push_back(fmt::format("pid {} ({})", pid, name));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

namespace {

std::string trash_path(const Store& store, const std::string& id) {
  return store.config().directory + "/" + store::kTrashDir + "/" + id + "." + unique_suffix();
}

}  // namespace

namespace {

Result<EntryInfo> entry_info_with(Store& store, const std::string& id, const store::FlockTable& locks);

// The first checkpoint file (keyed by path) whose identity is not the key's any more, said as a
// person would: a load of that path now computes another key. Only stat(2) of the recorded path
// and the digest memo (the path comes from the entry; nothing is opened or read). A file of the
// same size whose digest was recorded at publication is reachable still, as a load hashes it and
// is served when the bytes are the same (store/touched_checkpoint.h): stale only once its bytes now
// are known to differ.
std::string stale_reason(Store& store, const Key& key) {
  for (const CheckpointFile& recorded : key.checkpoint) {
    if (recorded.keyed_by_content() || recorded.path.empty()) continue;
    auto now = describe_checkpoint(store.fs(), {recorded.path});
    if (!now || now->size() != 1)
      return fmt::format("checkpoint {} is gone ({})", recorded.path, now ? "no file" : now.status().message());
    const CheckpointFile& current = (*now)[0];
    if (current == recorded) continue;
    if (current.size == recorded.size) {
      const DigestMemo memo = store.digest_memo();
      if (auto made_from = memo.recorded(recorded)) {
        auto bytes_now = memo.recorded(current);
        if (!bytes_now || *bytes_now == *made_from) continue;
        return fmt::format("checkpoint {} changed since the entry was made (its bytes differ)", recorded.path);
      }
    }
    const char* what = current.size != recorded.size         ? "its size"
                       : current.mtime_ns != recorded.mtime_ns ? "its modification time"
                                                               : "its identity (inode, device or change time)";
    return fmt::format("checkpoint {} changed since the entry was made ({} differs)", recorded.path, what);
  }
  return {};
}

}  // namespace

Status visit_entries(Store& store, const std::function<void(EntryInfo)>& visit) {
  FileSystem& fs = store.fs();
  const std::string& dir = store.config().directory;
  auto ids = entry_ids(store);
  if (!ids) return ids.status();
  // The order first, from the leases alone (one stat each, on several threads: the first row of a
  // cache of a million entries waits for them all); an entry without a lease by its directory's date.
  std::vector<std::pair<std::int64_t, std::string>> order(ids->size());
  (void)util::parallel_for(ids->size(), util::worker_count(), [&](std::size_t i) {
    const std::string path = store.entry_path((*ids)[i]);
    auto st = fs.stat(path + "/" + store::kLeaseFile, Follow::no);
    if (!st) st = fs.stat(path, Follow::no);
    order[i] = {st ? st->mtime_ns : 0, std::move((*ids)[i])};
    return Status::ok();
  });
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // Who holds which lease, as of the start of the listing.
  const store::FlockTable locks = store::FlockTable::read();
  for (const auto& [used, id] : order) {
    auto info = entry_info_with(store, id, locks);
    if (info) visit(std::move(*info));
    else if (info.status().code() != StatusCode::not_found) return info.status();  // not_found: evicted meanwhile
  }
  // Unfinished publications, shown so an operator can see (and gc) them.
  auto tmp = fs.list_directory(dir + "/" + store::kTmpDir);
  if (!tmp) return tmp.status().with_context("list the unfinished publications of " + dir);
  for (const auto& e : *tmp) {
    EntryInfo info;
    info.id = e.name.substr(0, e.name.find('.'));
    info.path = dir + "/" + store::kTmpDir + "/" + e.name;
    info.state = EntryState::unfinished;
    auto st = fs.stat(info.path, Follow::no);
    auto bytes = tree_size(fs, info.path);
    if (!st || !bytes) continue;  // finished or collected while we looked
    info.bytes = *bytes;
    info.last_use_unix_ns = st->mtime_ns;
    visit(std::move(info));
  }
  return Status::ok();
}

Result<std::vector<EntryInfo>> list_entries(Store& store) {
  std::vector<EntryInfo> out;
  SNAPCACHE_RETURN_IF_ERROR(visit_entries(store, [&](EntryInfo info) { out.push_back(std::move(info)); }));
  // The lease a listing read last may have been touched since the order was taken.
  std::stable_sort(out.begin(), out.end(),
                   [](const EntryInfo& a, const EntryInfo& b) { return a.last_use_unix_ns > b.last_use_unix_ns; });
  return out;
}

Result<std::vector<std::string>> entry_ids(Store& store) {
  auto names = store.fs().list_directory(store.config().directory + "/" + store::kEntriesDir);
  if (!names) return names.status().with_context("list the entries of " + store.config().directory);
  std::vector<std::string> out;
  for (auto& e : *names)
    if (store::is_entry_id(e.name)) out.push_back(std::move(e.name));
  return out;
}

Result<EntryInfo> entry_info(Store& store, const std::string& id) {
  return entry_info_with(store, id, store::FlockTable::read());
}

namespace {

Result<EntryInfo> entry_info_with(Store& store, const std::string& id, const store::FlockTable& locks) {
  FileSystem& fs = store.fs();
  EntryInfo info;
  info.id = id;
  info.path = store.entry_path(id);
  auto dir = fs.stat(info.path, Follow::no);
  if (!dir) return dir.status();
  auto bytes = tree_bytes(fs, info.path);
  if (!bytes) return bytes.status();
  info.bytes = bytes->total;
  info.shared_bytes = bytes->shared;
  info.last_use_unix_ns = dir->mtime_ns;
  if (auto lease = fs.stat(info.path + "/" + store::kLeaseFile, Follow::no)) {
    info.last_use_unix_ns = lease->mtime_ns;
    info.lease_holders = locks.holders(*lease);
    info.leased = !info.lease_holders.empty();
  }
  store::EntryCheck check = store::check_entry(fs, info.path, id);
  if (check.status.code() == StatusCode::not_found) return check.status;  // evicted while we looked
  if (!check.status) {
    info.state = EntryState::damaged;
    info.problem = check.status.message();
  }
  info.identity_trusted = check.status.is_ok() && check.untrusted_files.empty();
  info.verified_unix_ns = check.verified_unix_ns;
  info.manifest = std::move(check.manifest);
  if (info.manifest) info.stale = stale_reason(store, info.manifest->key);
  store::OriginRead origin = store::read_origin(fs, info.path);
  info.origin = std::move(origin.origin);
  info.origin_problem = std::move(origin.unreadable);
  return info;
}

}  // namespace

bool VerifiedFiles::contains(const FileIdentity& now, const DataFile& file) const {
  auto [first, last] = proven_.equal_range({now.device, now.inode});
  return std::any_of(first, last, [&](const auto& p) {
    const auto& [identity, proven] = p.second;
    return identity == now && proven.size == file.size && proven.chunk_size == file.chunk_size &&
           proven.chunk_hashes == file.chunk_hashes;
  });
}

void VerifiedFiles::add(const FileIdentity& now, const DataFile& file) {
  if (!contains(now, file)) proven_.emplace(std::pair{now.device, now.inode}, std::pair{now, file});
}

VerifyReport verify_entry(Store& store, const std::string& id, const std::function<void(std::uint64_t)>& progress) {
  VerifiedFiles none;
  return verify_entry(store, id, progress, none);
}

VerifyReport verify_entry(Store& store, const std::string& id, const std::function<void(std::uint64_t)>& progress,
                          VerifiedFiles& verified) {
  FileSystem& fs = store.fs();
  VerifyReport report;
  report.entry_id = id;
  const std::string path = store.entry_path(id);
  // Held like a load's lease while checking and rehashing, so the entry verified is not evicted
  // meanwhile; one being evicted or published right now is busy (skipped), one gone not_found.
  auto lease = store::take_reader_lease(fs, path, id);
  if (!lease) {
    report.status = lease.status();
    return report;
  }
  store::EntryCheck check = store::check_entry(fs, path, id);
  if (!check.status) {
    report.status = check.status;
    return report;
  }
  const Manifest& m = *check.manifest;
  std::vector<std::uint32_t> files;
  for (std::uint32_t i = 0; i < m.files.size(); ++i) {
    if (verified.contains(check.identities[i], m.files[i])) {
      report.bytes_proven_before += m.files[i].size;
      if (progress) progress(m.files[i].size);
    } else {
      files.push_back(i);
    }
  }
  // The files the check opened, as a load hashes and maps them: a file renamed away meanwhile is
  // still read whole, one renamed in is not mistaken for the entry's.
  auto rehash = store::rehash_files(fs, m, check.data_files, files, util::worker_count(), progress);
  report.bytes_hashed = rehash.bytes;
  report.damaged_chunks = std::move(rehash.damaged);
  if (!rehash.status) {
    report.status = rehash.status;
  } else if (!report.damaged_chunks.empty()) {
    report.status = Status(StatusCode::damaged, store::describe_damage(report.damaged_chunks));
  } else {
    for (std::uint32_t i : files)  // only a file of several names can be another entry's
      if (check.identities[i].links > 1) verified.add(check.identities[i], m.files[i]);
  }
  return report;
}

Result<std::uint64_t> remove_entry(Store& store, const std::string& id) {
  auto claim = store::claim_entry(store, id);
  if (!claim) return claim.status();
  return store::remove_claimed(store, std::move(*claim));
}

namespace store {

Result<EntryClaim> claim_entry(Store& store, const std::string& id) {
  FileSystem& fs = store.fs();
  const std::string path = store.entry_path(id);
  EntryClaim claim{id, std::nullopt, 0};
  auto lease = take_lease(fs, path, LockMode::exclusive);
  if (lease) {
    claim.lease = std::move(*lease);
  } else {
    if (lease.status().code() == StatusCode::busy) {
      std::vector<int> pids;
      if (auto st = fs.stat(path + "/" + kLeaseFile, Follow::no)) pids = flock_holders(*st);
      return Status(StatusCode::busy, pids.empty() ? "entry is leased" : "entry is leased by " + describe_processes(pids));
    }
    if (lease.status().code() != StatusCode::not_found || !fs.stat(path)) return lease.status();
    // No lease file: a damaged entry nobody can be using; it can go.
  }
  auto bytes = tree_size(fs, path, SharedFiles::not_at_all);  // another entry's name keeps shared bytes
  if (!bytes) return bytes.status();
  claim.bytes = *bytes;
  return claim;
}

Result<std::uint64_t> remove_claimed(Store& store, EntryClaim claim) {
  FileSystem& fs = store.fs();
  const std::string trash = trash_path(store, claim.id);
  SNAPCACHE_RETURN_IF_ERROR(fs.rename(store.entry_path(claim.id), trash));
  // The entry is gone from entries/ either way; only the durability of that is in doubt.
  (void)fs.fsync_directory(store.config().directory + "/" + kEntriesDir);
  bump_counter(fs, store.config().directory, Counter::evicted);
  unindex_entry(fs, store.config().directory, trash + "/" + kManifestFile, claim.id);
  // What is left in trash/ stays counted, for gc.
  SNAPCACHE_RETURN_IF_ERROR(remove_sharing_tree(store, trash, claim.id));
  count_deleted(fs, store.config().directory, claim.bytes);
  return claim.bytes;
}

}  // namespace store

Status quarantine(Store& store, const std::string& id, const std::string& why) {
  FileSystem& fs = store.fs();
  // Damaged entries leave entries/ at once, leased or not: a process that proved them earlier
  // keeps its mapping, and no new process will use them. The trash is emptied when unleased.
  const std::string trash = trash_path(store, id);
  log(LogLevel::warn, fmt::format("entry {} is damaged ({}); removing it", store::short_id(id), why));
  SNAPCACHE_RETURN_IF_ERROR(fs.rename(store.entry_path(id), trash));
  // When its key is readable.
  store::unindex_entry(fs, store.config().directory, trash + "/" + store::kManifestFile, id);
  auto lease = store::take_lease(fs, trash, LockMode::exclusive);
  // A lease that is not a regular file (foreign) is one nobody can hold.
  if (lease || lease.status().code() == StatusCode::not_found || lease.status().code() == StatusCode::foreign) {
    auto bytes = tree_size(fs, trash, SharedFiles::not_at_all);
    SNAPCACHE_RETURN_IF_ERROR(remove_tree(fs, trash));
    if (bytes) store::count_deleted(fs, store.config().directory, *bytes);
  }
  return Status::ok();
}

}  // namespace snapcache
