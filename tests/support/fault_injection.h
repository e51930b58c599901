// Test-only (never in the shipped library). A FileSystem that forwards to another one and fails
// chosen operations on purpose, so tests can
// check that every storage failure ends in a clean fallback. It also counts calls and bytes read,
// which lets tests prove that a warm load did (or did not) rehash data.
#pragma once

#include <array>
#include <chrono>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "snapcache/extend/file_system.h"

namespace snapcache {

// The calls a fault is armed on and counted by (the seam's own list).
using FsOp = FileSystemCall;

struct Fault {
  FsOp op = FsOp::open;
  int sys_errno = 5;            // EIO
  int skip = 0;                 // let this many matching calls through first
  int times = 1;                // then fail this many (-1: every one after)
  bool short_write = false;     // pwrite: write half and report it, instead of failing
  // Only calls whose path contains this: the path a call names, or for a call on a descriptor, the
  // path it was opened at (with the name, for a call in a directory opened by descriptor).
  std::string path_contains;
};

// Counts and may fail every call (admit); changes writes (short, slow, held) and counts the bytes
// read and written.
class FaultInjectingFileSystem final : public FileSystemWrapper {
 public:
  explicit FaultInjectingFileSystem(std::shared_ptr<FileSystem> base = posix_file_system())
      : FileSystemWrapper(std::move(base)) {}

  void inject(Fault fault);
  // A slow disk, so tests can act while a publication runs: every pwrite to a file whose path
  // contains `path_contains` (the store's tmp/, where publications write, say; every file when
  // empty) sleeps `delay` first, and while writes are held waits until release_writes().
  void slow_writes(std::chrono::milliseconds delay, std::string path_contains = {});
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
  // The path of the call the last fault fired in (as Fault::path_contains sees it).
  std::string last_fired_path() const;
  void reset_counters();

  // The calls that open remember what they opened, for the faults' paths.
  using FileSystemWrapper::open;
  Result<UniqueFd> open(const std::string& path, OpenMode mode, Follow follow) override;
  Result<UniqueFd> open_directory(const std::string& path) override;
  Result<UniqueFd> open_directory_at(int dir_fd, const std::string& name) override;
  Result<UniqueFd> reopen_uncached(int fd) override;
  Result<std::size_t> pwrite(int fd, const void* data, std::size_t size, std::uint64_t offset) override;
  Result<std::size_t> pread(int fd, void* data, std::size_t size, std::uint64_t offset) override;

 protected:
  Status admit(FileSystemCall call, std::string_view path, int fd) override;

 private:
  struct Armed {
    Fault fault;
    int seen = 0;
    int fired = 0;
  };
  // Counts the call and returns the fault to apply, if one is due.
  std::optional<Fault> check(FsOp op, std::string_view path, int fd);
  std::string path_of(int fd) const;  // what `fd` was opened at, as far as this file system saw
  // Remembers what `opened` was opened at.
  template <typename T>
  Result<T> remember(Result<T> opened, std::string path);

  mutable std::mutex mu_;
  std::vector<Armed> faults_;
  std::string after_open_path_;
  std::function<void()> after_open_;
  std::map<int, std::string> opened_;  // descriptor -> the path it was opened at
  std::string last_fired_path_;
  std::array<std::atomic<std::uint64_t>, kFileSystemCalls> calls_{};
  std::atomic<std::uint64_t> bytes_read_{0};
  std::atomic<std::uint64_t> bytes_written_{0};
  std::int64_t write_delay_ms_ = 0;  // under mu_, with:
  std::string slow_path_;
  std::atomic<bool> writes_held_{false};
  std::atomic<std::uint64_t> fired_{0};
};

}  // namespace snapcache
