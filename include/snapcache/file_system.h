// The file-system seam. Every byte snapcache reads or writes on disk goes through a FileSystem, so
// a FileSystem that wraps another one can fail any single operation (ENOSPC, EIO, EROFS, EACCES,
// short writes) and show that nothing breaks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
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
  bool operator==(const FileIdentity&) const = default;
};

struct DirEntry {
  std::string name;
  bool is_directory = false;
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
};

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

  virtual Result<UniqueFd> open(const std::string& path, OpenMode mode) = 0;
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
  virtual Status make_directory(const std::string& path) = 0;  // EEXIST is an error
  virtual Status remove_file(const std::string& path) = 0;
  virtual Status remove_directory(const std::string& path) = 0;  // empty directories only
  virtual Result<FileIdentity> stat(const std::string& path) = 0;
  virtual Result<FileIdentity> fstat(int fd) = 0;
  virtual Result<std::vector<DirEntry>> list_directory(const std::string& path) = 0;
  virtual Result<SpaceInfo> space(const std::string& path) = 0;
  virtual Result<MappedRegion> map(int fd, std::size_t size, MapMode mode) = 0;
  // flock(2): the kernel drops the lock when the process dies.
  virtual Status lock(int fd, LockMode mode, LockWait wait) = 0;
  virtual Status touch(const std::string& path) = 0;  // sets mtime to now
};

// The real thing: POSIX calls on the local file system.
SNAPCACHE_API std::shared_ptr<FileSystem> posix_file_system();

}  // namespace snapcache
