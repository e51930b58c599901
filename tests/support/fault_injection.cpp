#include "support/fault_injection.h"
#include "snapcache/extend/file_system.h"

#include <thread>

#include <algorithm>
#include <utility>

namespace snapcache {

const char* to_string(FsOp op) {
  static constexpr const char* names[] = {
      "open", "pwrite", "pread", "fsync", "fsync_directory", "allocate", "rename",
      "make_directory", "remove_file", "remove_directory", "stat", "fstat", "list_directory",
      "space", "map", "lock", "touch", "open_directory", "reopen_uncached"};
  int i = static_cast<int>(op);
  return i >= 0 && i < static_cast<int>(FsOp::count_) ? names[i] : "?";
}

void FaultInjectingFileSystem::inject(Fault fault) {
  std::lock_guard lock(mu_);
  faults_.push_back({std::move(fault)});
}

void FaultInjectingFileSystem::clear_faults() {
  std::lock_guard lock(mu_);
  faults_.clear();
  after_open_ = nullptr;
}

void FaultInjectingFileSystem::reset_counters() {
  for (auto& c : calls_) c = 0;
  bytes_read_ = 0;
  bytes_written_ = 0;
  fired_ = 0;
}

std::optional<Fault> FaultInjectingFileSystem::check(FsOp op, const std::string& path) {
  calls_[static_cast<int>(op)]++;
  std::lock_guard lock(mu_);
  for (auto& a : faults_) {
    if (a.fault.op != op) continue;
    if (!a.fault.path_contains.empty() && path.find(a.fault.path_contains) == std::string::npos)
      continue;
    int n = a.seen++;
    if (n < a.fault.skip) continue;
    if (a.fault.times >= 0 && a.fired >= a.fault.times) continue;
    a.fired++;
    fired_++;
    return a.fault;
  }
  return std::nullopt;
}

namespace {
Status injected(const Fault& f, const std::string& what) {
  return Status::from_errno(f.sys_errno, std::string("injected fault in ") + to_string(f.op) +
                                             (what.empty() ? "" : " " + what));
}
}  // namespace

Result<UniqueFd> FaultInjectingFileSystem::open(const std::string& path, OpenMode mode, Follow follow) {
  if (auto f = check(FsOp::open, path)) return injected(*f, path);
  auto fd = target().open(path, mode, follow);
  std::function<void()> action;
  if (fd) {
    std::lock_guard lock(mu_);
    if (after_open_ && path.find(after_open_path_) != std::string::npos) action = std::exchange(after_open_, nullptr);
  }
  if (action) action();  // outside the lock: the action may use this file system
  return fd;
}

void FaultInjectingFileSystem::after_open(std::string path_contains, std::function<void()> action) {
  std::lock_guard lock(mu_);
  after_open_path_ = std::move(path_contains);
  after_open_ = std::move(action);
}

Result<std::size_t> FaultInjectingFileSystem::pwrite(int fd, const void* data, std::size_t size,
                                                     std::uint64_t offset) {
  while (writes_held_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (const auto delay = write_delay_ms_.load(); delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  if (auto f = check(FsOp::pwrite)) {
    if (!f->short_write) return injected(*f, "");
    size = std::max<std::size_t>(1, size / 2);  // a short write still makes progress
  }
  auto n = target().pwrite(fd, data, size, offset);
  if (n) bytes_written_ += *n;
  return n;
}

Result<std::size_t> FaultInjectingFileSystem::pread(int fd, void* data, std::size_t size,
                                                    std::uint64_t offset) {
  if (auto f = check(FsOp::pread)) return injected(*f, "");
  auto n = target().pread(fd, data, size, offset);
  if (n) bytes_read_ += *n;
  return n;
}

Status FaultInjectingFileSystem::fsync(int fd) {
  if (auto f = check(FsOp::fsync)) return injected(*f, "");
  return target().fsync(fd);
}

Status FaultInjectingFileSystem::fsync_directory(const std::string& path) {
  if (auto f = check(FsOp::fsync_directory, path)) return injected(*f, path);
  return target().fsync_directory(path);
}

Status FaultInjectingFileSystem::allocate(int fd, std::uint64_t size) {
  if (auto f = check(FsOp::allocate)) return injected(*f, "");
  return target().allocate(fd, size);
}

Status FaultInjectingFileSystem::rename(const std::string& from, const std::string& to) {
  if (auto f = check(FsOp::rename, from + " " + to)) return injected(*f, from);
  return target().rename(from, to);
}

Status FaultInjectingFileSystem::make_directory(const std::string& path) {
  if (auto f = check(FsOp::make_directory, path)) return injected(*f, path);
  return target().make_directory(path);
}

Status FaultInjectingFileSystem::remove_file(const std::string& path) {
  if (auto f = check(FsOp::remove_file, path)) return injected(*f, path);
  return target().remove_file(path);
}

Status FaultInjectingFileSystem::remove_directory(const std::string& path) {
  if (auto f = check(FsOp::remove_directory, path)) return injected(*f, path);
  return target().remove_directory(path);
}

Result<FileIdentity> FaultInjectingFileSystem::stat(const std::string& path, Follow follow) {
  if (auto f = check(FsOp::stat, path)) return injected(*f, path);
  return target().stat(path, follow);
}

Result<FileIdentity> FaultInjectingFileSystem::fstat(int fd) {
  if (auto f = check(FsOp::fstat)) return injected(*f, "");
  return target().fstat(fd);
}

Result<std::vector<DirEntry>> FaultInjectingFileSystem::list_directory(const std::string& path) {
  if (auto f = check(FsOp::list_directory, path)) return injected(*f, path);
  return target().list_directory(path);
}

Result<UniqueFd> FaultInjectingFileSystem::open_directory(const std::string& path) {
  if (auto f = check(FsOp::open_directory, path)) return injected(*f, path);
  return target().open_directory(path);
}

Result<UniqueFd> FaultInjectingFileSystem::open_directory_at(int dir_fd, const std::string& name) {
  if (auto f = check(FsOp::open_directory, name)) return injected(*f, name);
  return target().open_directory_at(dir_fd, name);
}

Result<std::vector<DirEntry>> FaultInjectingFileSystem::list_directory_at(int dir_fd) {
  if (auto f = check(FsOp::list_directory)) return injected(*f, "");
  return target().list_directory_at(dir_fd);
}

Result<FileIdentity> FaultInjectingFileSystem::stat_at(int dir_fd, const std::string& name) {
  if (auto f = check(FsOp::stat, name)) return injected(*f, name);
  return target().stat_at(dir_fd, name);
}

Status FaultInjectingFileSystem::remove_at(int dir_fd, const std::string& name, bool is_directory) {
  if (auto f = check(is_directory ? FsOp::remove_directory : FsOp::remove_file, name)) return injected(*f, name);
  return target().remove_at(dir_fd, name, is_directory);
}

Result<SpaceInfo> FaultInjectingFileSystem::space(const std::string& path) {
  if (auto f = check(FsOp::space, path)) return injected(*f, path);
  return target().space(path);
}

Result<MappedRegion> FaultInjectingFileSystem::map(int fd, std::size_t size, MapMode mode) {
  if (auto f = check(FsOp::map)) return injected(*f, "");
  return target().map(fd, size, mode);
}

Status FaultInjectingFileSystem::lock(int fd, LockMode mode, LockWait wait) {
  if (auto f = check(FsOp::lock)) return injected(*f, "");
  return target().lock(fd, mode, wait);
}

Status FaultInjectingFileSystem::touch(int fd) {
  if (auto f = check(FsOp::touch)) return injected(*f, "");
  return target().touch(fd);
}

Result<UniqueFd> FaultInjectingFileSystem::reopen_uncached(int fd) {
  if (auto f = check(FsOp::reopen_uncached)) return injected(*f, "");
  return target().reopen_uncached(fd);
}

}  // namespace snapcache
