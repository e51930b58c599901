#include "store/shared_data.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "util/fmt.h"

#include "snapcache/extend/file_system.h"
#include "snapcache/log.h"
#include "snapcache/text.h"
#include "store/entry_check.h"
#include "store/entry_commit.h"
#include "store/entry_index.h"
#include "store/layout.h"
#include "util/file_io.h"
#include "util/parallel.h"

namespace snapcache::store {
namespace {

// How many entries of the same component and checkpoint are looked at: those a Torch upgrade or an
// option left behind, not a whole cache's worth.
constexpr std::size_t kMaxTwins = 16;
constexpr std::size_t kCompareBlock = 16 << 20;

FileKey inode_of(const FileIdentity& id) { return {id.device, id.inode}; }

// An entry of the same component and checkpoint, leased (so no evictor removes it meanwhile) and
// checked: every one of its data files is trusted as it is now.
struct Twin {
  std::string path;
  UniqueFd lease;
  EntryCheck check;
};

std::vector<Twin> trusted_twins(Store& store, const Key& key, const std::string& own_id) {
  FileSystem& fs = store.fs();
  std::vector<Twin> twins;
  for (const std::string& id : index_siblings(fs, store.config().directory, key, kMaxTwins)) {
    if (id == own_id) continue;
    Twin twin{store.entry_path(id), {}, {}};
    auto lease = take_reader_lease(fs, twin.path, id);
    if (!lease) continue;
    twin.lease = std::move(*lease);
    twin.check = check_entry(fs, twin.path, id);
    if (twin.check.status && twin.check.untrusted_files.empty()) twins.push_back(std::move(twin));
  }
  return twins;
}

// Whether the two open files hold the same `size` bytes: mapped and compared by several threads,
// since the new entry's file is in the page cache and the twin's often is (a copy through read
// buffers cost a second pass over both).
bool same_bytes(FileSystem& fs, int a, int b, std::uint64_t size) {
  auto x = fs.map(a, static_cast<std::size_t>(size), MapMode::read_only_shared);
  auto y = fs.map(b, static_cast<std::size_t>(size), MapMode::read_only_shared);
  if (!x || !y) return false;
  const std::size_t blocks = static_cast<std::size_t>((size + kCompareBlock - 1) / kCompareBlock);
  Status compared = util::parallel_for(blocks, util::worker_count(), [&](std::size_t i) {
    const std::uint64_t at = i * kCompareBlock;
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kCompareBlock, size - at));
    if (std::memcmp(x->data() + at, y->data() + at, n) == 0) return Status::ok();
    return Status(StatusCode::mismatch, "the bytes differ");
  });
  return compared.is_ok();
}

// The twins' files of these inodes just gained or lost a name. Each twin whose file changed in
// nothing but its ctime (and its count of names) is given its new identity, in its verified stamp.
void keep_twins_trusted(FileSystem& fs, std::vector<Twin>& twins, const std::set<FileKey>& changed) {
  for (Twin& twin : twins) {
    bool moved = false;
    for (std::size_t f = 0; f < twin.check.identities.size(); ++f) {
      FileIdentity& was = twin.check.identities[f];
      if (!changed.contains(inode_of(was))) continue;
      auto now = fs.fstat(twin.check.data_files[f].get());
      if (!now || inode_of(*now) != inode_of(was) || now->size != was.size || now->mtime_ns != was.mtime_ns) {
        moved = false;  // written meanwhile, or not the same file: its next load rehashes it
        break;
      }
      was = *now;
      was.is_directory = false;
      moved = true;
    }
    if (moved) record_proven_identities(fs, twin.path, twin.check.identities);
  }
}

}  // namespace

std::uint64_t share_identical_data(Store& store, const std::string& entry_path, const std::string& id,
                                   Manifest& manifest) {
  FileSystem& fs = store.fs();
  std::vector<Twin> twins = trusted_twins(store, manifest.key, id);
  if (twins.empty()) return 0;
  std::uint64_t freed = 0;
  std::set<FileKey> changed;
  for (DataFile& ours : manifest.files) {
    if (ours.size == 0) continue;
    auto own = open_in_cache(fs, entry_path + "/" + ours.name, OpenMode::read);
    if (!own) continue;
    bool shared = false;
    for (Twin& twin : twins) {
      const std::vector<DataFile>& files = twin.check.manifest->files;
      for (std::size_t f = 0; f < files.size() && !shared; ++f) {
        const DataFile& theirs = files[f];
        if (theirs.size != ours.size || theirs.chunk_size != ours.chunk_size || theirs.chunk_hashes != ours.chunk_hashes)
          continue;
        if (!same_bytes(fs, own->get(), twin.check.data_files[f].get(), ours.size)) continue;
        // The twin's name may have been given to another file since it was checked (a damaged
        // entry leaves entries/ leased or not): only the file proven equal is taken.
        const std::string second_name = entry_path + "/" + ours.name + ".shared";
        if (!fs.link(twin.path + "/" + theirs.name, second_name)) continue;
        // And unwritten since: a write moves the mtime (the new name moved only the ctime).
        const FileIdentity& checked = twin.check.identities[f];
        auto is_checked = [&](const Result<FileIdentity>& now) {
          return now && inode_of(*now) == inode_of(checked) && now->size == checked.size &&
                 now->mtime_ns == checked.mtime_ns;
        };
        if (!is_checked(fs.stat(second_name, Follow::no)) || !fs.rename(second_name, entry_path + "/" + ours.name)) {
          (void)fs.remove_file(second_name);
          continue;
        }
        shared = true;
        freed += ours.size;
        // Taken after the rename, which moves the ctime again on most file systems. A file written
        // meanwhile keeps the identity of our own copy in the manifest: not trusted, so the next
        // load rehashes it against our checksums.
        auto taken = fs.stat(entry_path + "/" + ours.name, Follow::no);
        if (!is_checked(taken)) continue;
        ours.identity = *taken;
        ours.identity.is_directory = false;
        changed.insert(inode_of(*taken));
      }
      if (shared) break;
    }
  }
  if (changed.empty()) return 0;
  keep_twins_trusted(fs, twins, changed);
  // Our own identities were taken before the twins' stamps were written; a later change must show.
  for (const DataFile& file : manifest.files)
    if (changed.contains(inode_of(file.identity))) settle_timestamps(file.identity);
  log(LogLevel::debug, fmt::format("publish: entry {} shares {} with entries of the same model", short_id(id),
                                   format_size(freed)));
  return freed;
}

Status remove_sharing_tree(Store& store, const std::string& trash_path, const std::string& id) {
  FileSystem& fs = store.fs();
  std::set<FileKey> shared;
  if (auto names = fs.list_directory(trash_path))
    for (const DirEntry& e : *names)
      if (auto st = fs.stat(trash_path + "/" + e.name, Follow::no); st && st->is_regular && st->links > 1)
        shared.insert(inode_of(*st));
  std::vector<Twin> twins;
  if (!shared.empty())
    if (auto key = read_manifest_key(fs, trash_path + "/" + kManifestFile)) {
      twins = trusted_twins(store, *key, id);
      std::erase_if(twins, [&](const Twin& twin) {
        return std::none_of(twin.check.identities.begin(), twin.check.identities.end(),
                            [&](const FileIdentity& f) { return shared.contains(inode_of(f)); });
      });
    }
  SNAPCACHE_RETURN_IF_ERROR(remove_tree(fs, trash_path));
  if (twins.empty()) return Status::ok();
  keep_twins_trusted(fs, twins, shared);
  // The identities just recorded were taken after the last name went; a later change must show.
  for (const Twin& twin : twins)
    for (const FileIdentity& f : twin.check.identities)
      if (shared.contains(inode_of(f))) settle_timestamps(f);
  return Status::ok();
}

}  // namespace snapcache::store
