// Listing, verification, removal and making room.
#include <sys/sysmacros.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "util/fmt.h"

#include "format/manifest.h"
#include "format/stamp.h"
#include "snapcache/log.h"
#include "store/chunk_hashing.h"
#include "store/layout.h"
#include "store/stats.h"
#include "util/parallel.h"
#include "snapcache/text.h"

namespace snapcache {
namespace store {

// From lines such as "1: FLOCK  ADVISORY  READ  1234 fd:01:5678 0 EOF".
std::vector<int> flock_holders(const FileIdentity& id) {
  std::vector<int> pids;
  std::ifstream in("/proc/locks");
  std::string line;
  const std::string want = fmt::format("{:02x}:{:02x}:{}", major(id.device), minor(id.device), id.inode);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string n, kind, advisory, mode, pid, where;
    fields >> n >> kind;
    if (kind == "->") fields >> kind;  // a waiter
    fields >> advisory >> mode >> pid >> where;
    if (kind == "FLOCK" && where == want) {
      try {
        pids.push_back(std::stoi(pid));
      } catch (...) {
      }
    }
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

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

std::vector<EntryInfo> Store::list_entries() {
  std::vector<EntryInfo> out;
  auto names = fs_->list_directory(config_.directory + "/" + store::kEntriesDir);
  if (names) {
    for (const auto& e : *names) {
      if (!store::is_entry_id(e.name)) continue;
      if (auto info = entry_info(e.name)) out.push_back(std::move(*info));
    }
  }
  // Unfinished publications, shown so an operator can see (and gc) them.
  if (auto tmp = fs_->list_directory(config_.directory + "/" + store::kTmpDir)) {
    for (const auto& e : *tmp) {
      EntryInfo info;
      info.id = e.name.substr(0, e.name.find('.'));
      info.path = config_.directory + "/" + store::kTmpDir + "/" + e.name;
      info.state = EntryState::unfinished;
      info.bytes = tree_size(*fs_, info.path).value_or(0);
      if (auto st = fs_->stat(info.path)) info.last_use_unix_ns = st->mtime_ns;
      out.push_back(std::move(info));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const EntryInfo& a, const EntryInfo& b) { return a.last_use_unix_ns > b.last_use_unix_ns; });
  return out;
}

Result<EntryInfo> Store::entry_info(const std::string& id) {
  EntryInfo info;
  info.id = id;
  info.path = entry_path(id);
  auto dir = fs_->stat(info.path);
  if (!dir) return dir.status();
  info.bytes = tree_size(*fs_, info.path).value_or(0);
  if (auto lease = fs_->stat(info.path + "/" + store::kLeaseFile)) {
    info.last_use_unix_ns = lease->mtime_ns;
    info.lease_holders = store::flock_holders(*lease);
    info.leased = !info.lease_holders.empty();
  } else {
    info.last_use_unix_ns = dir->mtime_ns;
    info.state = EntryState::damaged;
    info.problem = "lease file is missing";
  }
  auto bytes = read_file(*fs_, info.path + "/" + store::kManifestFile);
  if (!bytes) {
    info.state = EntryState::damaged;
    info.problem = "manifest unreadable: " + bytes.status().message();
    return info;
  }
  auto manifest = format::decode_manifest(*bytes);
  if (!manifest) {
    info.state = EntryState::damaged;
    info.problem = manifest.status().message();
    return info;
  }
  if (key_id(manifest->key) != id) {
    info.state = EntryState::damaged;
    info.problem = "stored key does not hash to the entry's id";
  }
  std::optional<format::Stamp> stamp;
  if (auto text = read_file(*fs_, info.path + "/" + store::kStampFile)) {
    if (auto s = format::decode_stamp(*text); s && s->identities.size() == manifest->files.size()) {
      info.verified_unix_ns = s->verified_unix_ns;
      stamp = std::move(*s);
    }
  }
  info.identity_trusted = true;
  for (std::size_t i = 0; i < manifest->files.size(); ++i) {
    const DataFile& f = manifest->files[i];
    auto st = fs_->stat(info.path + "/" + f.name);
    if (!st || st->size != f.size) {
      info.state = EntryState::damaged;
      info.problem = "data file " + f.name + (st ? " has the wrong size" : " is missing");
      info.identity_trusted = false;
      continue;
    }
    FileIdentity now = *st;
    now.is_directory = false;
    if (!(now == f.identity) && !(stamp && now == stamp->identities[i])) info.identity_trusted = false;
  }
  info.manifest = std::move(*manifest);
  return info;
}

VerifyReport Store::verify(const std::string& id, const std::function<void(std::uint64_t)>& progress) {
  VerifyReport report;
  report.entry_id = id;
  const std::string path = entry_path(id);
  auto bytes = read_file(*fs_, path + "/" + store::kManifestFile);
  if (!bytes) {
    report.status = bytes.status().code() == StatusCode::not_found && fs_->stat(path)
                        ? Status(StatusCode::damaged, "manifest is missing")
                        : bytes.status();
    return report;
  }
  auto manifest = format::decode_manifest(*bytes);
  if (!manifest) {
    report.status = manifest.status();
    return report;
  }
  std::vector<std::uint32_t> all(manifest->files.size());
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  auto rehash = store::rehash_files(*fs_, path, *manifest, all, util::worker_count(), progress);
  report.bytes_hashed = rehash.bytes;
  report.damaged_chunks = std::move(rehash.damaged);
  if (!rehash.status) {
    report.status = rehash.status.code() == StatusCode::not_found ? Status(StatusCode::damaged, rehash.status.message())
                                                                  : rehash.status;
  } else if (!report.damaged_chunks.empty()) {
    report.status = Status(StatusCode::damaged, store::describe_damage(report.damaged_chunks));
  } else if (key_id(manifest->key) != id) {
    // What a load would refuse, verify reports too, or the two would disagree about an entry.
    report.status = Status(StatusCode::damaged, "stored key does not hash to the entry's id");
  } else if (auto lease = fs_->stat(path + "/" + store::kLeaseFile);
             !lease && lease.status().code() == StatusCode::not_found) {
    report.status = Status(StatusCode::damaged, "entry has no lease file");
  }
  return report;
}

Result<std::uint64_t> Store::remove_entry(const std::string& id) {
  const std::string path = entry_path(id);
  auto lease = store::take_lease(*fs_, path, LockMode::exclusive);
  if (!lease) {
    if (lease.status().code() == StatusCode::busy) {
      std::vector<int> pids;
      if (auto st = fs_->stat(path + "/" + store::kLeaseFile)) pids = store::flock_holders(*st);
      return Status(StatusCode::busy, pids.empty() ? "entry is leased" : "entry is leased by " + describe_processes(pids));
    }
    if (lease.status().code() != StatusCode::not_found || !fs_->stat(path)) return lease.status();
    // No lease file: a damaged entry nobody can be using; remove it below.
  }
  std::uint64_t bytes = tree_size(*fs_, path).value_or(0);
  const std::string trash = config_.directory + "/" + store::kTrashDir + "/" + id + "." + store::unique_suffix();
  SNAPCACHE_RETURN_IF_ERROR(fs_->rename(path, trash));
  (void)fs_->fsync_directory(config_.directory + "/" + store::kEntriesDir);
  store::bump_counter(config_.directory, store::Counter::evicted);
  SNAPCACHE_RETURN_IF_ERROR(remove_tree(*fs_, trash));
  return bytes;
}

Status Store::quarantine(const std::string& id, const std::string& why) {
  // Damaged entries leave entries/ at once, leased or not: a process that proved them earlier
  // keeps its mapping, and no new process will use them. The trash is emptied when unleased.
  const std::string trash = config_.directory + "/" + store::kTrashDir + "/" + id + "." + store::unique_suffix();
  log(LogLevel::warn, fmt::format("entry {} is damaged ({}); removing it", store::short_id(id), why));
  SNAPCACHE_RETURN_IF_ERROR(fs_->rename(entry_path(id), trash));
  auto lease = store::take_lease(*fs_, trash, LockMode::exclusive);
  if (lease || lease.status().code() == StatusCode::not_found) return remove_tree(*fs_, trash);
  return Status::ok();
}

std::uint64_t Store::total_bytes() {
  std::uint64_t total = 0;
  for (const char* sub : {store::kEntriesDir, store::kTmpDir, store::kTrashDir})
    total += tree_size(*fs_, config_.directory + "/" + sub).value_or(0);
  return total;
}

Status Store::make_room(std::uint64_t needed, std::vector<std::string>* evicted) {
  if (needed > config_.capacity_bytes)
    return Status(StatusCode::no_space,
                  fmt::format("the entry needs {}, more than the cache capacity of {} (SNAPCACHE_CAPACITY_GIB)",
                              format_size(needed), format_size(config_.capacity_bytes)));
  struct Candidate {
    std::string id;
    std::int64_t last_use;
  };
  std::vector<Candidate> candidates;
  if (auto names = fs_->list_directory(config_.directory + "/" + store::kEntriesDir)) {
    for (const auto& e : *names) {
      if (!store::is_entry_id(e.name)) continue;
      auto lease = fs_->stat(entry_path(e.name) + "/" + store::kLeaseFile);
      candidates.push_back({e.name, lease ? lease->mtime_ns : 0});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.last_use < b.last_use; });
  std::size_t next = 0;
  std::size_t leased = 0;
  for (;;) {
    std::uint64_t used = total_bytes();
    auto space = fs_->space(config_.directory);
    if (!space) return space.status();
    bool over_capacity = used + needed > config_.capacity_bytes;
    bool over_disk = space->available_bytes < needed + config_.reserve_free_bytes;
    if (!over_capacity && !over_disk) return Status::ok();
    if (next == candidates.size()) {
      std::string leased_note = leased ? fmt::format("; {} leased entries could not be evicted", leased) : "";
      if (over_capacity)
        return Status(StatusCode::no_space,
                      fmt::format("the entry needs {} but the cache holds {} of its {} capacity{}",
                                  format_size(needed), format_size(used),
                                  format_size(config_.capacity_bytes), leased_note));
      return Status(StatusCode::no_space,
                    fmt::format("the entry needs {} but the disk has {} free and {} must stay free{}",
                                format_size(needed), format_size(space->available_bytes),
                                format_size(config_.reserve_free_bytes), leased_note));
    }
    const std::string& id = candidates[next++].id;
    auto removed = remove_entry(id);
    if (removed) {
      log(LogLevel::info, fmt::format("evicted entry {} ({}) to make room", store::short_id(id),
                                      format_size(*removed)));
      if (evicted) evicted->push_back(id);
    } else if (removed.status().code() == StatusCode::busy) {
      ++leased;
    } else if (removed.status().code() != StatusCode::not_found) {
      return removed.status();
    }
  }
}

}  // namespace snapcache
