// The file-system seam. Every byte snapcache reads or writes on disk goes through a FileSystem, so
// a FileSystem that wraps another one can fail any single operation (ENOSPC, EIO, EROFS, EACCES,
// short writes) and show that nothing breaks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/status.h"

namespace snapcache {

// What identifies a file's contents without reading them: if any field changes, the bytes may
// have changed.
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool is_directory = false;
  // What the file is and who may change it. Not part of the identity (== ignores them): they are
  // not stored with an entry, and they answer "may the store use this?", not "did it change?".
  bool is_symlink = false;  // only from stat(path, Follow::no) and stat_at
  bool is_regular = false;
  std::uint32_t permissions = 0;  // st_mode & 07777
  std::uint32_t owner = 0;        // st_uid
  // st_nlink: names the file has. A file the store creates has one; a second is a hard link from
  // somewhere else, through which a write to this file would reach a file outside the cache.
  std::uint64_t links = 0;
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns &&
           ctime_ns == o.ctime_ns && is_directory == o.is_directory;
  }
};

struct DirEntry {
  std::string name;
  bool is_directory = false;  // the name itself: a symlink to a directory is not one
};

struct SpaceInfo {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;  // to an unprivileged writer
};

enum class OpenMode {
  read,              // O_RDONLY
  read_write,        // O_RDWR
  create_exclusive,  // O_RDWR | O_CREAT | O_EXCL
  create_truncate,   // O_RDWR | O_CREAT | O_TRUNC
  // O_RDWR | O_CREAT | O_EXCL with permissions 0444: this descriptor writes the file, no later
  // open may (entry files, see docs/reliability.md).
  create_read_only,
};

// Whether a symlink as the last component of a path is followed. Inside the cache nothing is
// (Follow::no): a link planted there must never lead a read, a write or a delete out of it. Files
// the user names (checkpoints, sources, the settings file) may be links, and are followed.
enum class Follow { yes, no };

enum class MapMode {
  read_only_shared,      // PROT_READ, MAP_SHARED
  copy_on_write_private  // PROT_READ|PROT_WRITE, MAP_PRIVATE: writes stay in this process
};

enum class LockMode { shared, exclusive };
enum class LockWait { no_wait, wait };

// Closes its descriptor when it goes away.
class SNAPCACHE_API UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// A memory mapping that is unmapped when the last owner lets go.
class SNAPCACHE_API MappedRegion {
 public:
  MappedRegion() = default;
  MappedRegion(void* data, std::size_t size) : data_(data), size_(size) {}
  MappedRegion(MappedRegion&& other) noexcept;
  MappedRegion& operator=(MappedRegion&& other) noexcept;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;
  ~MappedRegion();

  std::byte* data() const { return static_cast<std::byte*>(data_); }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

class SNAPCACHE_API FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Opens regular files only, never blocking: a FIFO, socket, device or directory at `path` is
  // refused (StatusCode::foreign) instead of hanging the caller or being read as data.
  virtual Result<UniqueFd> open(const std::string& path, OpenMode mode, Follow follow) = 0;
  Result<UniqueFd> open(const std::string& path, OpenMode mode) { return open(path, mode, Follow::yes); }
  // May transfer fewer bytes than asked, as the system calls may.
  virtual Result<std::size_t> pwrite(int fd, const void* data, std::size_t size,
                                     std::uint64_t offset) = 0;
  virtual Result<std::size_t> pread(int fd, void* data, std::size_t size,
                                    std::uint64_t offset) = 0;
  virtual Status fsync(int fd) = 0;
  virtual Status fsync_directory(const std::string& path) = 0;
  // Reserves `size` bytes so that ENOSPC shows up now, not in the middle of the data.
  virtual Status allocate(int fd, std::uint64_t size) = 0;
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // A second name `to` for the regular file `from` (linkat without following a symlink at `from`);
  // EEXIST when `to` exists. Entries that hold the same bytes share one file this way.
  virtual Status link(const std::string& from, const std::string& to) = 0;
  virtual Status make_directory(const std::string& path) = 0;  // EEXIST is an error
  virtual Status remove_file(const std::string& path) = 0;
  virtual Status remove_directory(const std::string& path) = 0;  // empty directories only
  virtual Result<FileIdentity> stat(const std::string& path, Follow follow) = 0;
  Result<FileIdentity> stat(const std::string& path) { return stat(path, Follow::yes); }
  virtual Result<FileIdentity> fstat(int fd) = 0;
  virtual Result<std::vector<DirEntry>> list_directory(const std::string& path) = 0;

  // Walking a tree by directory descriptors, so that a name is always looked up in the directory
  // already opened and a symlink below it is never followed (remove_tree, tree_size).
  // The directory at `path`, which the caller names itself (its components may be links).
  virtual Result<UniqueFd> open_directory(const std::string& path) = 0;
  // The directory `name` in `dir_fd`; a symlink there is refused (ELOOP), not followed.
  virtual Result<UniqueFd> open_directory_at(int dir_fd, const std::string& name) = 0;
  virtual Result<std::vector<DirEntry>> list_directory_at(int dir_fd) = 0;
  // `name` in `dir_fd` itself, never a symlink's target.
  virtual Result<FileIdentity> stat_at(int dir_fd, const std::string& name) = 0;
  // unlinkat: removes `name` from `dir_fd` (a symlink itself, never its target); a directory must
  // be empty.
  virtual Status remove_at(int dir_fd, const std::string& name, bool is_directory) = 0;
  virtual Result<SpaceInfo> space(const std::string& path) = 0;
  virtual Result<MappedRegion> map(int fd, std::size_t size, MapMode mode) = 0;
  // flock(2): the kernel drops the lock when the process dies.
  virtual Status lock(int fd, LockMode mode, LockWait wait) = 0;
  // Sets the mtime of the open file `fd` to now (futimens): the file the caller opened and checked,
  // never whatever a path names by the time it is touched.
  virtual Status touch(int fd) = 0;
  // A second descriptor of the open regular file `fd` whose reads go around the page cache
  // (O_DIRECT): the disk's bytes straight into the caller's buffer, for a file the page cache does
  // not hold, without the kernel's copy and without filling the page cache. Reads through it are
  // aligned to kUncachedAlignment (buffer, offset and length; one that reaches past the end of the
  // file comes back short). It is the same file as `fd`, never what a path names now: reopened
  // through the process's own descriptor (/proc/self/fd) and compared by device and inode.
  // Unsupported where the file system refuses O_DIRECT, or /proc is not mounted, as this default
  // says of a file system that does not offer it: the caller reads through `fd`.
  virtual Result<UniqueFd> reopen_uncached(int fd);
};

// What reads of a descriptor from FileSystem::reopen_uncached are aligned to: the largest logical
// block of the disks snapcache runs on (a read of another alignment fails with EINVAL).
inline constexpr std::size_t kUncachedAlignment = 4096;

// The real thing: POSIX calls on the local file system.
SNAPCACHE_API std::shared_ptr<FileSystem> posix_file_system();

// The calls of a FileSystem by name, as FileSystemWrapper::admit is told of them. A call in a
// directory opened by descriptor (open_directory_at, list_directory_at, stat_at, remove_at) is told
// as its kin that takes a path: open_directory, list_directory, stat, remove_file or
// remove_directory.
enum class FileSystemCall : int {
  open, pwrite, pread, fsync, fsync_directory, allocate, rename, make_directory, remove_file,
  remove_directory, stat, fstat, list_directory, space, map, lock, touch, open_directory,
  reopen_uncached, link,
};
inline constexpr int kFileSystemCalls = static_cast<int>(FileSystemCall::link) + 1;
SNAPCACHE_API const char* to_string(FileSystemCall call);

// A FileSystem that forwards every call to another one (LevelDB's EnvWrapper): a wrapper that
// slows, logs or changes some calls overrides those alone, and stays correct when the seam gains a
// call. One that must see every call (counts them, fails any of them, dies at the n-th) overrides
// admit, which every call passes first.
class SNAPCACHE_API FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(std::shared_ptr<FileSystem> target) : target_(std::move(target)) {}
  FileSystem& target() const { return *target_; }

  using FileSystem::open;
  using FileSystem::stat;
  Result<UniqueFd> open(const std::string& path, OpenMode mode, Follow follow) override;
  Result<std::size_t> pwrite(int fd, const void* data, std::size_t size, std::uint64_t offset) override;
  Result<std::size_t> pread(int fd, void* data, std::size_t size, std::uint64_t offset) override;
  Status fsync(int fd) override;
  Status fsync_directory(const std::string& path) override;
  Status allocate(int fd, std::uint64_t size) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status link(const std::string& from, const std::string& to) override;
  Status make_directory(const std::string& path) override;
  Status remove_file(const std::string& path) override;
  Status remove_directory(const std::string& path) override;
  Result<FileIdentity> stat(const std::string& path, Follow follow) override;
  Result<FileIdentity> fstat(int fd) override;
  Result<std::vector<DirEntry>> list_directory(const std::string& path) override;
  Result<UniqueFd> open_directory(const std::string& path) override;
  Result<UniqueFd> open_directory_at(int dir_fd, const std::string& name) override;
  Result<std::vector<DirEntry>> list_directory_at(int dir_fd) override;
  Result<FileIdentity> stat_at(int dir_fd, const std::string& name) override;
  Status remove_at(int dir_fd, const std::string& name, bool is_directory) override;
  Result<SpaceInfo> space(const std::string& path) override;
  Result<MappedRegion> map(int fd, std::size_t size, MapMode mode) override;
  Status lock(int fd, LockMode mode, LockWait wait) override;
  Status touch(int fd) override;
  Result<UniqueFd> reopen_uncached(int fd) override;

 protected:
  // What each call does before it forwards: a status other than ok fails the call with it, and the
  // target never sees the call. `path` is the call's path (both of a rename's or a link's, space-separated;
  // the name, for a call in a directory opened by descriptor), `fd` the descriptor it is made on
  // (-1 for none). This one admits every call.
  virtual Status admit(FileSystemCall call, std::string_view path, int fd);

 private:
  std::shared_ptr<FileSystem> target_;
};

}  // namespace snapcache
