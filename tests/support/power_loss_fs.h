// A FileSystem that loses power: the test-only model of what a crash keeps, after LevelDB's
// fault-injection environment. It forwards to another FileSystem and remembers what is durable:
// a file's bytes as of its last fsync, and a name made by create, mkdir or rename only once its
// directory was fsynced (for a rename, either directory). die_after(n) makes the n+1-th call from then on, and every later one,
// fail as if the process had died there (nothing it does afterwards reaches the disk); crash()
// then throws away everything that was not durable, as a power loss would, so a test can check
// what a restarted machine finds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "snapcache/extend/file_system.h"

namespace snapcache::test {

class PowerLossFileSystem final : public FileSystemWrapper {
 public:
  // `root`: the directory the test works in; crash() finds the files written there.
  explicit PowerLossFileSystem(std::string root, std::shared_ptr<FileSystem> base = posix_file_system())
      : FileSystemWrapper(std::move(base)), root_(std::move(root)) {}

  // Everything so far is durable (the machine synced before the trial).
  void settle();
  // From now, the first `calls` calls succeed and the rest fail with EIO, without effect.
  void die_after(std::uint64_t calls);
  bool died() const;
  std::uint64_t calls() const;
  // Power loss: unsynced names are undone (newest first), unsynced bytes are lost (a file written
  // through here goes back to its last fsynced bytes, or empty). Then the file system is alive.
  void crash();

  // The calls crash() must know of (names made, bytes and names made durable); every other call
  // is only admitted.
  // Removals are taken as durable at once: the model loses what was added, not what was removed.
  using FileSystemWrapper::open;
  Result<UniqueFd> open(const std::string& path, OpenMode mode, Follow follow) override;
  Status fsync(int fd) override;
  Status fsync_directory(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status link(const std::string& from, const std::string& to) override;  // a name made, as by create
  Status make_directory(const std::string& path) override;

 protected:
  // Counts the call; past die_after's count the power is gone, and it fails.
  Status admit(FileSystemCall call, std::string_view path, int fd) override;

 private:
  enum class Kind { create, mkdir, rename };
  struct NameOp {
    Kind kind;
    std::string from, to;  // create, mkdir: `to` only
    // Durable once one of these is fsynced: the parent of `to`, and for a rename also the parent
    // of `from` (a journaling file system commits a rename as one transaction).
    std::string directory, other_directory;
    bool durable = false;
  };
  using Inode = std::pair<std::uint64_t, std::uint64_t>;  // device, inode

  void log(Kind kind, const std::string& from, const std::string& to);
  void track(int fd);

  std::string root_;
  mutable std::mutex mutex_;
  std::uint64_t calls_ = 0;
  std::uint64_t die_at_ = UINT64_MAX;
  bool died_ = false;
  std::vector<NameOp> names_;
  std::map<int, Inode> written_fds_;
  std::set<Inode> written_;                 // files written through here
  std::map<Inode, std::string> durable_;    // their bytes at the last fsync
};

}  // namespace snapcache::test
