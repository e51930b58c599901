#include "store/entry_check.h"

#include "util/fmt.h"

#include "format/manifest.h"
#include "format/stamp.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
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
  auto text = read_file(fs, entry_path + "/" + kStampFile, format::kMaxStampBytes, Follow::no);
  if (!text) return std::nullopt;
  auto stamp = format::decode_stamp(*text);
  if (!stamp || stamp->identities.size() != files) return std::nullopt;  // torn or stale: rehash
  return std::move(*stamp);
}

}  // namespace

EntryCheck check_entry(FileSystem& fs, const std::string& entry_path, const std::string& id) {
  EntryCheck check;
  // The store only ever renames real directories into entries/. Anything else there (a symlink to
  // a directory elsewhere, say) is never read as an entry; as damage it is moved to trash/, where
  // the link itself is removed and its target left alone.
  if (auto dir = fs.stat(entry_path, Follow::no); !dir) {
    check.status = dir.status();
    return check;
  } else if (!dir->is_directory) {
    check.status = Status(StatusCode::foreign, entry_path + (dir->is_symlink ? " is a symbolic link" : " is not a directory") +
                                                   ", not an entry the store wrote");
    return check;
  }
  auto manifest = read_manifest(fs, entry_path);
  if (!manifest) {
    check.status = manifest.status();
    return check;
  }
  check.manifest = std::move(*manifest);
  const Manifest& m = *check.manifest;
  if (key_id(m.key) != id) {
    check.status = damaged("stored key does not hash to the entry's id");
    return check;
  }
  if (auto lease = fs.stat(entry_path + "/" + kLeaseFile, Follow::no); !lease) {
    check.status = lease.status().code() == StatusCode::not_found ? damaged("entry has no lease file") : lease.status();
    return check;
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
      return check;
    }
    auto identity = fs.fstat(fd->get());
    if (!identity) {
      check.status = identity.status();
      return check;
    }
    if (identity->size != file.size) {
      check.status = damaged(fmt::format("data file {} is {} bytes, the manifest says {}", file.name, identity->size,
                                         file.size));
      return check;
    }
    FileIdentity now = *identity;
    now.is_directory = false;
    const bool trusted = now == file.identity || (stamp && now == stamp->identities[i]);
    if (!trusted) check.untrusted_files.push_back(i);
    check.identities.push_back(now);
    check.data_files.push_back(std::move(*fd));
  }
  return check;
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
