// Test-only (never in the shipped library). A FileSystem that forwards to another one and fails
// chosen operations on purpose, so tests can
// check that every storage failure ends in a clean fallback. It also counts calls and bytes read,
// which lets tests prove that a warm load did (or did not) rehash data.
#pragma once

#include <array>
#include <chrono>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"

namespace snapcache {

enum class FsOp : int {
  open, pwrite, pread, fsync, fsync_directory, allocate, rename, make_directory, remove_file,
  remove_directory, stat, fstat, list_directory, space, map, lock, touch, open_directory,
  reopen_uncached,
  count_  // number of operations, keep last
};
const char* to_string(FsOp op);

struct Fault {
  FsOp op = FsOp::open;
  int sys_errno = 5;            // EIO
  int skip = 0;                 // let this many matching calls through first
  int times = 1;                // then fail this many (-1: every one after)
  bool short_write = false;     // pwrite: write half and report it, instead of failing
  std::string path_contains;    // only calls whose path contains this (path-taking ops only)
};

// Every call is counted, so it overrides them all; a wrapper of your own (FileSystemWrapper)
// overrides only the calls it changes.
class FaultInjectingFileSystem final : public FileSystemWrapper {
 public:
  explicit FaultInjectingFileSystem(std::shared_ptr<FileSystem> base = posix_file_system())
      : FileSystemWrapper(std::move(base)) {}

  void inject(Fault fault);
  // Every pwrite sleeps this long first: a slow disk, so tests can act while a publication runs.
  void set_write_delay(std::chrono::milliseconds delay) { write_delay_ms_ = delay.count(); }
  // Every pwrite waits until release_writes(): a publication that cannot end before the test lets it.
  void hold_writes() { writes_held_ = true; }
  void release_writes() { writes_held_ = false; }
  void clear_faults();
  // Runs `action` once, right after the first successful open whose path contains
  // `path_contains`: a test changes the file system between two steps of an operation (swaps a
  // data file between the entry check and the rehash, say).
  void after_open(std::string path_contains, std::function<void()> action);
  std::uint64_t calls(FsOp op) const { return calls_[static_cast<int>(op)].load(); }
  std::uint64_t bytes_read() const { return bytes_read_.load(); }
  std::uint64_t bytes_written() const { return bytes_written_.load(); }
  std::uint64_t faults_fired() const { return fired_.load(); }
  void reset_counters();

  using FileSystemWrapper::open;
  using FileSystemWrapper::stat;
  // The *_at calls count as (and fail like) their path-taking kin: open_directory, list_directory,
  // stat, remove_file or remove_directory, with the name as the path.
  Result<UniqueFd> open(const std::string& path, OpenMode mode, Follow follow) override;
  Result<std::size_t> pwrite(int fd, const void* data, std::size_t size,
                             std::uint64_t offset) override;
  Result<std::size_t> pread(int fd, void* data, std::size_t size, std::uint64_t offset) override;
  Status fsync(int fd) override;
  Status fsync_directory(const std::string& path) override;
  Status allocate(int fd, std::uint64_t size) override;
  Status rename(const std::string& from, const std::string& to) override;
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

 private:
  struct Armed {
    Fault fault;
    int seen = 0;
    int fired = 0;
  };
  // Counts the call and returns the fault to apply, if one is due.
  std::optional<Fault> check(FsOp op, const std::string& path = {});

  std::mutex mu_;
  std::vector<Armed> faults_;
  std::string after_open_path_;
  std::function<void()> after_open_;
  std::array<std::atomic<std::uint64_t>, static_cast<int>(FsOp::count_)> calls_{};
  std::atomic<std::uint64_t> bytes_read_{0};
  std::atomic<std::uint64_t> bytes_written_{0};
  std::atomic<std::int64_t> write_delay_ms_{0};
  std::atomic<bool> writes_held_{false};
  std::atomic<std::uint64_t> fired_{0};
};

}  // namespace snapcache
