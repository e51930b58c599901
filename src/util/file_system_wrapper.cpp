// Each call is admitted, then goes to the target unchanged (include/snapcache/extend/file_system.h:
// FileSystemWrapper).
#include "snapcache/extend/file_system.h"

namespace snapcache {

const char* to_string(FileSystemCall call) {
  static constexpr const char* names[kFileSystemCalls] = {
      "open", "pwrite", "pread", "fsync", "fsync_directory", "allocate", "rename",
      "make_directory", "remove_file", "remove_directory", "stat", "fstat", "list_directory",
      "space", "map", "lock", "touch", "open_directory", "reopen_uncached", "link"};
  const int i = static_cast<int>(call);
  return i >= 0 && i < kFileSystemCalls ? names[i] : "?";
}

Status FileSystemWrapper::admit(FileSystemCall, std::string_view, int) { return Status::ok(); }

Result<UniqueFd> FileSystemWrapper::open(const std::string& path, OpenMode mode, Follow follow) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::open, path, -1));
  return target_->open(path, mode, follow);
}
Result<std::size_t> FileSystemWrapper::pwrite(int fd, const void* data, std::size_t size, std::uint64_t offset) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::pwrite, {}, fd));
  return target_->pwrite(fd, data, size, offset);
}
Result<std::size_t> FileSystemWrapper::pread(int fd, void* data, std::size_t size, std::uint64_t offset) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::pread, {}, fd));
  return target_->pread(fd, data, size, offset);
}
Status FileSystemWrapper::fsync(int fd) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::fsync, {}, fd));
  return target_->fsync(fd);
}
Status FileSystemWrapper::fsync_directory(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::fsync_directory, path, -1));
  return target_->fsync_directory(path);
}
Status FileSystemWrapper::allocate(int fd, std::uint64_t size) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::allocate, {}, fd));
  return target_->allocate(fd, size);
}
Status FileSystemWrapper::rename(const std::string& from, const std::string& to) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::rename, from + " " + to, -1));
  return target_->rename(from, to);
}

Status FileSystemWrapper::link(const std::string& from, const std::string& to) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::link, from + " " + to, -1));
  return target_->link(from, to);
}
Status FileSystemWrapper::make_directory(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::make_directory, path, -1));
  return target_->make_directory(path);
}
Status FileSystemWrapper::remove_file(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::remove_file, path, -1));
  return target_->remove_file(path);
}
Status FileSystemWrapper::remove_directory(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::remove_directory, path, -1));
  return target_->remove_directory(path);
}
Result<FileIdentity> FileSystemWrapper::stat(const std::string& path, Follow follow) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::stat, path, -1));
  return target_->stat(path, follow);
}
Result<FileIdentity> FileSystemWrapper::fstat(int fd) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::fstat, {}, fd));
  return target_->fstat(fd);
}
Result<std::vector<DirEntry>> FileSystemWrapper::list_directory(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::list_directory, path, -1));
  return target_->list_directory(path);
}
Result<UniqueFd> FileSystemWrapper::open_directory(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::open_directory, path, -1));
  return target_->open_directory(path);
}
Result<UniqueFd> FileSystemWrapper::open_directory_at(int dir_fd, const std::string& name) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::open_directory, name, dir_fd));
  return target_->open_directory_at(dir_fd, name);
}
Result<std::vector<DirEntry>> FileSystemWrapper::list_directory_at(int dir_fd) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::list_directory, {}, dir_fd));
  return target_->list_directory_at(dir_fd);
}
Result<FileIdentity> FileSystemWrapper::stat_at(int dir_fd, const std::string& name) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::stat, name, dir_fd));
  return target_->stat_at(dir_fd, name);
}
Status FileSystemWrapper::remove_at(int dir_fd, const std::string& name, bool is_directory) {
  const FileSystemCall call = is_directory ? FileSystemCall::remove_directory : FileSystemCall::remove_file;
  SNAPCACHE_RETURN_IF_ERROR(admit(call, name, dir_fd));
  return target_->remove_at(dir_fd, name, is_directory);
}
Result<SpaceInfo> FileSystemWrapper::space(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::space, path, -1));
  return target_->space(path);
}
Result<MappedRegion> FileSystemWrapper::map(int fd, std::size_t size, MapMode mode) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::map, {}, fd));
  return target_->map(fd, size, mode);
}
Status FileSystemWrapper::lock(int fd, LockMode mode, LockWait wait) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::lock, {}, fd));
  return target_->lock(fd, mode, wait);
}
Status FileSystemWrapper::touch(int fd) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::touch, {}, fd));
  return target_->touch(fd);
}
Result<UniqueFd> FileSystemWrapper::reopen_uncached(int fd) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::reopen_uncached, {}, fd));
  return target_->reopen_uncached(fd);
}

}  // namespace snapcache
