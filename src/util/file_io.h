// Helpers composed from FileSystem calls only, so a fault injected into the FileSystem reaches
// them too. Private to the library: users get the FileSystem seam, not these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "snapcache/extend/file_system.h"
#include "util/atomic_file.h"

namespace snapcache {

// Loop until every byte moved: FileSystem::pwrite/pread may transfer fewer bytes than asked.
Status write_all(FileSystem& fs, int fd, const void* data, std::size_t size, std::uint64_t offset);
// A file that ends before `size` bytes is damaged.
Status read_all(FileSystem& fs, int fd, void* data, std::size_t size, std::uint64_t offset);
// read_all through a descriptor from FileSystem::reopen_uncached: `data` and `offset` aligned to
// kUncachedAlignment, and room at `data` for `size` rounded up to it (the read reaches past the
// end of the file and comes back short there). A read the file system refuses for its alignment
// (EINVAL) is unsupported; a file that ends before `size` bytes is damaged.
Status read_all_uncached(FileSystem& fs, int fd, void* data, std::size_t size, std::uint64_t offset);

// Opening a file inside the cache, the one way: a symlink is never followed, a FIFO or device is
// refused without blocking, and only a regular file is opened (all StatusCode::foreign, with the
// reason; see FileSystem::open). A link or FIFO planted in the cache can then neither lead a
// write outside it nor hang a load.
Result<UniqueFd> open_in_cache(FileSystem& fs, const std::string& path, OpenMode mode);
// The bytes of an open file, at most `max_bytes`: a larger one (a 1 TiB sparse file, say) is
// refused (StatusCode::foreign) instead of being allocated. `path` only names it in errors.
Result<std::string> read_open_file(FileSystem& fs, int fd, std::uint64_t max_bytes, const std::string& path);
// Opens (see FileSystem::open: regular files only, never blocking) and reads a whole file of at
// most `max_bytes`. Files inside the cache are read with Follow::no; files the user names
// (settings, sources) with Follow::yes.
Result<std::string> read_file(FileSystem& fs, const std::string& path, std::uint64_t max_bytes, Follow follow);
// A file the store writes and replaces itself (stats.json, digests.json, verified.snap), read as
// read_file(..., Follow::no) reads and refused (foreign) when it has more than one name. The store
// only ever replaces such a file by rename, so a second name is a hard link between it and a file
// elsewhere, whose bytes someone else may have written: they are not the store's to trust.
Result<std::string> read_own_file(FileSystem& fs, const std::string& path, std::uint64_t max_bytes);
// Writes `path` through an AtomicFile (see util/atomic_file.h): readers see old or new, never half,
// and whatever was at `path` (a hard link, a symlink) loses the name without being written.
Status write_file_atomic(FileSystem& fs, const std::string& path, const std::string& contents,
                         AtomicFile::Durability durability = AtomicFile::Durability::durable);
// Removes a directory tree; a missing path is fine. The directory holding `path` is the caller's
// (opened as named); `path` and everything below it are walked by directory descriptor and never
// followed: a symlink is removed itself, its target is never touched, and a mount point is not
// entered. Any depth: the walk does not recurse and holds at most 16 descriptors (junk left in
// the cache may be nested arbitrarily deep, and must not stay for good). What cannot be removed
// is left and the rest removed; the error names the first thing refused and counts the others.
Status remove_tree(FileSystem& fs, const std::string& path);
// Sum of the sizes of the files below `path`, walked like remove_tree: a symlink counts as nothing
// and is not followed (so a link loop cannot make it walk forever); a file removed while counting,
// or one below the top that cannot be looked at, counts as nothing. A file with more than one name
// (entries holding the same bytes share one file: store/shared_data.h) counts as `shared` says.
enum class SharedFiles {
  in_full,    // what the tree holds
  not_at_all  // what removing the tree frees: another name keeps those bytes
};
Result<std::uint64_t> tree_size(FileSystem& fs, const std::string& path, SharedFiles shared = SharedFiles::in_full);
// The same, with each file of several names counted once among all the trees measured with
// `seen` (its device and inode are added there): what the trees take on the disk together.
using FileKey = std::pair<std::uint64_t, std::uint64_t>;  // device, inode
using FileKeys = std::set<FileKey>;
Result<std::uint64_t> tree_size(FileSystem& fs, const std::string& path, FileKeys& seen);
// Both at once: what the tree holds, and how much of it is in files of several names.
struct TreeBytes {
  std::uint64_t total = 0;
  std::uint64_t shared = 0;
};
Result<TreeBytes> tree_bytes(FileSystem& fs, const std::string& path);
// Creates `path` and missing parents.
Status make_directories(FileSystem& fs, const std::string& path);

// Unique among processes and threads on this host: "<pid>-<counter>-<random>". For names of
// temporary files and directories that several writers may create side by side.
std::string unique_suffix();

}  // namespace snapcache
