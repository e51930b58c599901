#include "store/entry_check.h"

#include "util/fmt.h"

#include "format/manifest.h"
#include "format/stamp.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "store/layout.h"
#include "util/clock.h"
#include "util/file_io.h"

namespace snapcache::store {
namespace {

Status damaged(std::string why) { return {StatusCode::damaged, std::move(why)}; }

Result<Manifest> read_manifest(FileSystem& fs, const std::string& entry_path) {
  auto bytes = read_file(fs, entry_path + "/" + kManifestFile, format::kMaxManifestBytes, Follow::no);
  if (!bytes) {
    const StatusCode code = bytes.status().code();
    if (code != StatusCode::not_found && code != StatusCode::damaged) return bytes.status();
    // A committed entry always has its manifest: without one, the entry is damaged, not missing.
    auto dir = fs.stat(entry_path);
    if (!dir) return dir.status();
    return damaged("manifest is missing or short");
  }
  return format::decode_manifest(*bytes);
}

std::optional<format::Stamp> read_stamp(FileSystem& fs, const std::string& entry_path, std::size_t files) {
  // A stamp with a second name is not trusted: it would let whoever writes the other name say
  // which identities were proven.
  auto text = read_own_file(fs, entry_path + "/" + kStampFile, format::kMaxStampBytes);
  if (!text) return std::nullopt;
  auto stamp = format::decode_stamp(*text);
  if (!stamp || stamp->identities.size() != files) return std::nullopt;  // torn or stale: rehash
  return std::move(*stamp);
}

// Whether `entry_path` still names the directory `before` described: an evictor renames a whole
// entry away at once, and a publisher may rename a new one in under the same id.
bool same_directory(FileSystem& fs, const std::string& entry_path, const FileIdentity& before) {
  auto now = fs.stat(entry_path, Follow::no);
  return now && now->is_directory && now->device == before.device && now->inode == before.inode;
}

void check_files(FileSystem& fs, const std::string& entry_path, const std::string& id, EntryCheck& check) {
  auto manifest = read_manifest(fs, entry_path);
  if (!manifest) {
    check.status = manifest.status();
    return;
  }
  check.manifest = std::move(*manifest);
  const Manifest& m = *check.manifest;
  if (key_id(m.key) != id) {
    check.status = damaged("stored key does not hash to the entry's id");
    return;
  }
  if (auto lease = fs.stat(entry_path + "/" + kLeaseFile, Follow::no); !lease) {
    check.status = lease.status().code() == StatusCode::not_found ? damaged("entry has no lease file") : lease.status();
    return;
  }

  // Trust the publication checksums only for files whose identity is the one recorded when they
  // were last proven (at publication, or by a later rehash recorded in the stamp).
  std::optional<format::Stamp> stamp = read_stamp(fs, entry_path, m.files.size());
  if (stamp) check.verified_unix_ns = stamp->verified_unix_ns;
  for (std::uint32_t i = 0; i < m.files.size(); ++i) {
    const DataFile& file = m.files[i];
    auto fd = open_in_cache(fs, entry_path + "/" + file.name, OpenMode::read);
    if (!fd) {
      check.status = fd.status().code() == StatusCode::not_found ? damaged("data file " + file.name + " is missing")
                                                                 : fd.status();
      return;
    }
    auto identity = fs.fstat(fd->get());
    if (!identity) {
      check.status = identity.status();
      return;
    }
    if (identity->size != file.size) {
      check.status = damaged(fmt::format("data file {} is {} bytes, the manifest says {}", file.name, identity->size,
                                         file.size));
      return;
    }
    FileIdentity now = *identity;
    now.is_directory = false;
    const bool trusted = now == file.identity || (stamp && now == stamp->identities[i]);
    if (!trusted) check.untrusted_files.push_back(i);
    check.identities.push_back(now);
    check.data_files.push_back(std::move(*fd));
  }
}

}  // namespace

EntryCheck check_entry(FileSystem& fs, const std::string& entry_path, const std::string& id) {
  EntryCheck check;
  // The store only ever renames real directories into entries/. Anything else there (a symlink to
  // a directory elsewhere, say) is never read as an entry; as damage it is moved to trash/, where
  // the link itself is removed and its target left alone.
  auto dir = fs.stat(entry_path, Follow::no);
  if (!dir) {
    check.status = dir.status();
    return check;
  }
  if (!dir->is_directory) {
    check.status = Status(StatusCode::foreign, entry_path + (dir->is_symlink ? " is a symbolic link" : " is not a directory") +
                                                   ", not an entry the store wrote");
    return check;
  }
  check_files(fs, entry_path, id, check);
  // Files are read by path: one that is missing, or belongs to a newer entry, may only mean that
  // the entry went while we looked (`snapcache verify` during an eviction). Such a check says
  // nothing about any entry, and --repair must not remove what is there now.
  if (is_entry_damage(check.status.code()) && !same_directory(fs, entry_path, *dir)) {
    check = EntryCheck{};
    check.status = Status(StatusCode::not_found, "entry was removed or replaced while it was being checked");
  }
  return check;
}

Result<UniqueFd> take_reader_lease(FileSystem& fs, const std::string& entry_path, const std::string& id) {
  auto lease = take_lease(fs, entry_path, LockMode::shared);
  if (lease) return lease;
  if (lease.status().code() == StatusCode::busy)
    return Status(StatusCode::busy, "entry is being published or evicted");
  if (lease.status().code() != StatusCode::not_found) return lease.status();
  // No lease file: the entry check says what is wrong with the entry, if anything is.
  EntryCheck check = check_entry(fs, entry_path, id);
  return check.status ? Status(StatusCode::not_found, "entry was removed while its lease was being taken")
                      : check.status;
}

void record_proven_identities(FileSystem& fs, const std::string& entry_path,
                              const std::vector<FileIdentity>& identities) {
  format::Stamp fresh{util::now_unix_ns(), identities};
  // Best effort: without the stamp the next load rehashes again, nothing worse.
  (void)write_file_atomic(fs, entry_path + "/" + kStampFile, format::encode_stamp(fresh));
}

}  // namespace snapcache::store

namespace snapcache {

bool is_entry_damage(StatusCode code) {
  return code == StatusCode::damaged || code == StatusCode::foreign || code == StatusCode::mismatch ||
         code == StatusCode::unfinished;
}

}  // namespace snapcache
