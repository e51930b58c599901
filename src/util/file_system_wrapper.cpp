// Each call goes to the target unchanged (include/snapcache/extend/file_system.h: FileSystemWrapper).
#include "snapcache/extend/file_system.h"

namespace snapcache {

Result<UniqueFd> FileSystemWrapper::open(const std::string& path, OpenMode mode, Follow follow) {
  return target_->open(path, mode, follow);
}
Result<std::size_t> FileSystemWrapper::pwrite(int fd, const void* data, std::size_t size, std::uint64_t offset) {
  return target_->pwrite(fd, data, size, offset);
}
Result<std::size_t> FileSystemWrapper::pread(int fd, void* data, std::size_t size, std::uint64_t offset) {
  return target_->pread(fd, data, size, offset);
}
Status FileSystemWrapper::fsync(int fd) { return target_->fsync(fd); }
Status FileSystemWrapper::fsync_directory(const std::string& path) { return target_->fsync_directory(path); }
Status FileSystemWrapper::allocate(int fd, std::uint64_t size) { return target_->allocate(fd, size); }
Status FileSystemWrapper::rename(const std::string& from, const std::string& to) { return target_->rename(from, to); }
Status FileSystemWrapper::make_directory(const std::string& path) { return target_->make_directory(path); }
Status FileSystemWrapper::remove_file(const std::string& path) { return target_->remove_file(path); }
Status FileSystemWrapper::remove_directory(const std::string& path) { return target_->remove_directory(path); }
Result<FileIdentity> FileSystemWrapper::stat(const std::string& path, Follow follow) {
  return target_->stat(path, follow);
}
Result<FileIdentity> FileSystemWrapper::fstat(int fd) { return target_->fstat(fd); }
Result<std::vector<DirEntry>> FileSystemWrapper::list_directory(const std::string& path) {
  return target_->list_directory(path);
}
Result<UniqueFd> FileSystemWrapper::open_directory(const std::string& path) { return target_->open_directory(path); }
Result<UniqueFd> FileSystemWrapper::open_directory_at(int dir_fd, const std::string& name) {
  return target_->open_directory_at(dir_fd, name);
}
Result<std::vector<DirEntry>> FileSystemWrapper::list_directory_at(int dir_fd) {
  return target_->list_directory_at(dir_fd);
}
Result<FileIdentity> FileSystemWrapper::stat_at(int dir_fd, const std::string& name) {
  return target_->stat_at(dir_fd, name);
}
Status FileSystemWrapper::remove_at(int dir_fd, const std::string& name, bool is_directory) {
  return target_->remove_at(dir_fd, name, is_directory);
}
Result<SpaceInfo> FileSystemWrapper::space(const std::string& path) { return target_->space(path); }
Result<MappedRegion> FileSystemWrapper::map(int fd, std::size_t size, MapMode mode) {
  return target_->map(fd, size, mode);
}
Status FileSystemWrapper::lock(int fd, LockMode mode, LockWait wait) { return target_->lock(fd, mode, wait); }
Status FileSystemWrapper::touch(int fd) { return target_->touch(fd); }
Result<UniqueFd> FileSystemWrapper::reopen_uncached(int fd) { return target_->reopen_uncached(fd); }

}  // namespace snapcache
