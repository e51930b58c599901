#include "support/fault_injection.h"
#include "snapcache/extend/file_system.h"

#include <thread>

#include <algorithm>
#include <utility>

namespace snapcache {

void FaultInjectingFileSystem::inject(Fault fault) {
  std::lock_guard lock(mu_);
  faults_.push_back({std::move(fault)});
}

void FaultInjectingFileSystem::slow_writes(std::chrono::milliseconds delay, std::string path_contains) {
  std::lock_guard lock(mu_);
  write_delay_ms_ = delay.count();
  slow_path_ = std::move(path_contains);
}

void FaultInjectingFileSystem::clear_faults() {
  std::lock_guard lock(mu_);
  faults_.clear();
  after_open_ = nullptr;
}

std::string FaultInjectingFileSystem::last_fired_path() const {
  std::lock_guard lock(mu_);
  return last_fired_path_;
}

void FaultInjectingFileSystem::reset_counters() {
  for (auto& c : calls_) c = 0;
  bytes_read_ = 0;
  bytes_written_ = 0;
  fired_ = 0;
}

std::optional<Fault> FaultInjectingFileSystem::check(FsOp op, std::string_view path, int fd) {
  calls_[static_cast<int>(op)]++;
  std::string about(path);
  if (fd >= 0) about = about.empty() ? path_of(fd) : path_of(fd) + "/" + about;
  std::lock_guard lock(mu_);
  for (auto& a : faults_) {
    if (a.fault.op != op) continue;
    if (!a.fault.path_contains.empty() && about.find(a.fault.path_contains) == std::string_view::npos) continue;
    int n = a.seen++;
    if (n < a.fault.skip) continue;
    if (a.fault.times >= 0 && a.fired >= a.fault.times) continue;
    a.fired++;
    fired_++;
    last_fired_path_ = about;
    return a.fault;
  }
  return std::nullopt;
}

namespace {
Status injected(const Fault& f, std::string_view about) {
  return Status::from_errno(f.sys_errno, std::string("injected fault in ") + to_string(f.op) +
                                             (about.empty() ? "" : " " + std::string(about)));
}
}  // namespace

Status FaultInjectingFileSystem::admit(FileSystemCall call, std::string_view path, int fd) {
  if (auto f = check(call, path, fd)) return injected(*f, path);
  return Status::ok();
}

template <typename T>
Result<T> FaultInjectingFileSystem::remember(Result<T> opened, std::string path) {
  if (opened) {
    std::lock_guard lock(mu_);
    opened_[opened->get()] = std::move(path);
  }
  return opened;
}

Result<UniqueFd> FaultInjectingFileSystem::open_directory(const std::string& path) {
  return remember(FileSystemWrapper::open_directory(path), path);
}

Result<UniqueFd> FaultInjectingFileSystem::open_directory_at(int dir_fd, const std::string& name) {
  return remember(FileSystemWrapper::open_directory_at(dir_fd, name), path_of(dir_fd) + "/" + name);
}

Result<UniqueFd> FaultInjectingFileSystem::reopen_uncached(int fd) {
  return remember(FileSystemWrapper::reopen_uncached(fd), path_of(fd));
}

std::string FaultInjectingFileSystem::path_of(int fd) const {
  // A descriptor this file system did not open names nothing; one closed and reused since is
  // renamed by the open that reused it.
  std::lock_guard lock(mu_);
  auto it = opened_.find(fd);
  return it != opened_.end() ? it->second : std::string();
}

Result<UniqueFd> FaultInjectingFileSystem::open(const std::string& path, OpenMode mode, Follow follow) {
  auto fd = remember(FileSystemWrapper::open(path, mode, follow), path);
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
  std::int64_t delay = 0;
  std::string slow_path;
  {
    std::lock_guard lock(mu_);
    delay = write_delay_ms_;
    slow_path = slow_path_;
  }
  if (slow_path.empty() || path_of(fd).find(slow_path) != std::string::npos) {
    while (writes_held_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  }
  if (auto f = check(FsOp::pwrite, {}, fd)) {
    if (!f->short_write) return injected(*f, "");
    size = std::max<std::size_t>(1, size / 2);  // a short write still makes progress
  }
  auto n = target().pwrite(fd, data, size, offset);
  if (n) bytes_written_ += *n;
  return n;
}

Result<std::size_t> FaultInjectingFileSystem::pread(int fd, void* data, std::size_t size,
                                                    std::uint64_t offset) {
  auto n = FileSystemWrapper::pread(fd, data, size, offset);
  if (n) bytes_read_ += *n;
  return n;
}

}  // namespace snapcache
