#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "snapcache/extend/file_system.h"
#include "util/clock.h"

namespace snapcache {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

MappedRegion::MappedRegion(MappedRegion&& other) noexcept
    : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedRegion& MappedRegion::operator=(MappedRegion&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedRegion::~MappedRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

namespace {

FileIdentity identity_of(const struct stat& st) {
  FileIdentity id;
  id.device = static_cast<std::uint64_t>(st.st_dev);
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  id.size = static_cast<std::uint64_t>(st.st_size);
  // Saturated, never wrapped: a file dated after 2262 reads as the latest time, not as 1861.
  id.mtime_ns = util::unix_ns_from(st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  id.ctime_ns = util::unix_ns_from(st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
  id.is_directory = S_ISDIR(st.st_mode);
  id.is_symlink = S_ISLNK(st.st_mode);
  id.is_regular = S_ISREG(st.st_mode);
  id.permissions = static_cast<std::uint32_t>(st.st_mode & 07777);
  id.owner = static_cast<std::uint32_t>(st.st_uid);
  id.links = static_cast<std::uint64_t>(st.st_nlink);
  return id;
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// readdir's answer; DT_UNKNOWN (some file systems) is settled by fstatat without following.
DirEntry dir_entry(int dir_fd, const struct dirent& e) {
  DirEntry out{e.d_name, e.d_type == DT_DIR};
  if (e.d_type == DT_UNKNOWN) {
    struct stat st {};
    out.is_directory = ::fstatat(dir_fd, e.d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
  }
  return out;
}

// Lists an open DIR stream and closes it.
Result<std::vector<DirEntry>> read_directory(DIR* dir, const std::string& what) {
  std::vector<DirEntry> out;
  errno = 0;
  while (struct dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    out.push_back(dir_entry(::dirfd(dir), *e));
    errno = 0;
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return Status::from_errno(err, "list " + what);
  return out;
}

class PosixFileSystem final : public FileSystem {
 public:
  Result<UniqueFd> open(const std::string& path, OpenMode mode, Follow follow) override {
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever. It is cleared again
    // once the file is known to be a regular one, where it means nothing anyway.
    int flags = O_CLOEXEC | O_NONBLOCK;
    mode_t permissions = 0644;
    switch (mode) {
      case OpenMode::read: flags |= O_RDONLY; break;
      case OpenMode::read_write: flags |= O_RDWR; break;
      case OpenMode::create_exclusive: flags |= O_RDWR | O_CREAT | O_EXCL; break;
      case OpenMode::create_truncate: flags |= O_RDWR | O_CREAT | O_TRUNC; break;
      case OpenMode::create_read_only:
        flags |= O_RDWR | O_CREAT | O_EXCL;
        permissions = 0444;
        break;
    }
    if (follow == Follow::no) flags |= O_NOFOLLOW;
    int fd = ::open(path.c_str(), flags, permissions);
    if (fd < 0) {
      if (errno == ELOOP && follow == Follow::no)
        return Status(StatusCode::foreign, path + " is a symbolic link, which snapcache does not follow here", ELOOP);
      return Status::from_errno(errno, "open " + path);
    }
    UniqueFd guard(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::from_errno(errno, "fstat " + path);
    if (!S_ISREG(st.st_mode))
      return Status(StatusCode::foreign, path + " is " + kind_of(st.st_mode) + ", not a regular file");
    const int status_flags = ::fcntl(fd, F_GETFL);
    if (status_flags < 0 || ::fcntl(fd, F_SETFL, status_flags & ~O_NONBLOCK) != 0)
      return Status::from_errno(errno, "fcntl " + path);
    return guard;
  }

  Result<std::size_t> pwrite(int fd, const void* data, std::size_t size,
                             std::uint64_t offset) override {
    for (;;) {
      ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) return Status::from_errno(errno, "write");
    }
  }

  Result<std::size_t> pread(int fd, void* data, std::size_t size, std::uint64_t offset) override {
    for (;;) {
      ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) return Status::from_errno(errno, "read");
    }
  }

  Status fsync(int fd) override {
    if (::fsync(fd) != 0) return Status::from_errno(errno, "fsync");
    return Status::ok();
  }

  Status fsync_directory(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::from_errno(errno, "open directory " + path);
    UniqueFd guard(fd);
    if (::fsync(fd) != 0) return Status::from_errno(errno, "fsync directory " + path);
    return Status::ok();
  }

  Status allocate(int fd, std::uint64_t size) override {
    if (size == 0) return Status::ok();
    int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    // Some file systems (tmpfs on old kernels, network file systems) cannot preallocate; the
    // writes that follow will still report ENOSPC, just later.
    if (rc == 0 || rc == EOPNOTSUPP || rc == EINVAL) return Status::ok();
    return Status::from_errno(rc, "allocate");
  }

  Status link(const std::string& from, const std::string& to) override {
    if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), 0) != 0)
      return Status::from_errno(errno, "link " + from + " -> " + to);
    return Status::ok();
  }
  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return Status::from_errno(errno, "rename " + from + " -> " + to);
    return Status::ok();
  }

  Status make_directory(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return Status::from_errno(errno, "mkdir " + path);
    return Status::ok();
  }

  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return Status::from_errno(errno, "unlink " + path);
    return Status::ok();
  }

  Status remove_directory(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return Status::from_errno(errno, "rmdir " + path);
    return Status::ok();
  }

  Result<FileIdentity> stat(const std::string& path, Follow follow) override {
    struct stat st {};
    int rc = follow == Follow::yes ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
    if (rc != 0) return Status::from_errno(errno, "stat " + path);
    return identity_of(st);
  }

  Result<FileIdentity> fstat(int fd) override {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::from_errno(errno, "fstat");
    return identity_of(st);
  }

  Result<std::vector<DirEntry>> list_directory(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return Status::from_errno(errno, "list " + path);
    return read_directory(dir, path);
  }

  Result<UniqueFd> open_directory(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::from_errno(errno, "open directory " + path);
    return UniqueFd(fd);
  }

  Result<UniqueFd> open_directory_at(int dir_fd, const std::string& name) override {
    int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Status::from_errno(errno, "open directory " + name);
    return UniqueFd(fd);
  }

  Result<std::vector<DirEntry>> list_directory_at(int dir_fd) override {
    // fdopendir takes the descriptor it is given; the caller keeps its own.
    int fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return Status::from_errno(errno, "list directory");
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      int err = errno;
      ::close(fd);
      return Status::from_errno(err, "list directory");
    }
    ::rewinddir(dir);  // the duplicate shares its offset with the caller's descriptor
    return read_directory(dir, "directory");
  }

  Result<FileIdentity> stat_at(int dir_fd, const std::string& name) override {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Status::from_errno(errno, "stat " + name);
    return identity_of(st);
  }

  Status remove_at(int dir_fd, const std::string& name, bool is_directory) override {
    if (::unlinkat(dir_fd, name.c_str(), is_directory ? AT_REMOVEDIR : 0) != 0)
      return Status::from_errno(errno, (is_directory ? "rmdir " : "unlink ") + name);
    return Status::ok();
  }

  Result<SpaceInfo> space(const std::string& path) override {
    struct statvfs sv {};
    if (::statvfs(path.c_str(), &sv) != 0) return Status::from_errno(errno, "statvfs " + path);
    SpaceInfo info;
    info.total_bytes = static_cast<std::uint64_t>(sv.f_blocks) * sv.f_frsize;
    info.available_bytes = static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
    return info;
  }

  Result<MappedRegion> map(int fd, std::size_t size, MapMode mode) override {
    if (size == 0) return MappedRegion();
    int prot = PROT_READ;
    int flags = MAP_SHARED;
    if (mode == MapMode::copy_on_write_private) {
      prot |= PROT_WRITE;
      flags = MAP_PRIVATE;
    }
    void* p = ::mmap(nullptr, size, prot, flags, fd, 0);
    if (p == MAP_FAILED) return Status::from_errno(errno, "mmap");
    return MappedRegion(p, size);
  }

  Status lock(int fd, LockMode mode, LockWait wait) override {
    int op = mode == LockMode::shared ? LOCK_SH : LOCK_EX;
    if (wait == LockWait::no_wait) op |= LOCK_NB;
    for (;;) {
      if (::flock(fd, op) == 0) return Status::ok();
      if (errno != EINTR) return Status::from_errno(errno, "flock");
    }
  }

  Status touch(int fd) override {
    if (::futimens(fd, nullptr) != 0) return Status::from_errno(errno, "touch");
    return Status::ok();
  }

  Result<UniqueFd> reopen_uncached(int fd) override {
    struct stat before {};
    if (::fstat(fd, &before) != 0) return Status::from_errno(errno, "fstat");
    if (!S_ISREG(before.st_mode)) return Status(StatusCode::foreign, std::string("a descriptor of ") + kind_of(before.st_mode) + " cannot be read around the page cache");
    // The process's own link to the open file: what `fd` is, whatever its path names now.
    // O_NONBLOCK: should `fd` be closed and its number taken by a FIFO meanwhile, the open must not
    // wait for a writer (the identity check then refuses it).
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const int direct = ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_DIRECT);
    if (direct < 0) {
      if (errno == EINVAL)
        return Status(StatusCode::unsupported, "the file system does not read around the page cache (O_DIRECT)", EINVAL);
      return Status::from_errno(errno, "reopening a file around the page cache (" + self + ")");
    }
    UniqueFd guard(direct);
    struct stat after {};
    if (::fstat(direct, &after) != 0) return Status::from_errno(errno, "fstat " + self);
    if (!S_ISREG(after.st_mode) || after.st_dev != before.st_dev || after.st_ino != before.st_ino)
      return Status(StatusCode::foreign, self + " is no longer the file it was opened as");
    const int status_flags = ::fcntl(direct, F_GETFL);
    if (status_flags < 0 || ::fcntl(direct, F_SETFL, status_flags & ~O_NONBLOCK) != 0)
      return Status::from_errno(errno, "fcntl " + self);
    return guard;
  }
};

}  // namespace

Result<UniqueFd> FileSystem::reopen_uncached(int) {
  return Status(StatusCode::unsupported, "this file system does not read around the page cache");
}

std::shared_ptr<FileSystem> posix_file_system() {
  static std::shared_ptr<FileSystem> fs = std::make_shared<PosixFileSystem>();
  return fs;
}

}  // namespace snapcache
