// A file that appears at its path whole or not at all (after ccache's AtomicFile): written under a
// unique temporary name in the same directory, then fsynced, renamed over the path, and the
// directory fsynced. Dropped without commit(), it removes its temporary file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "snapcache/extend/file_system.h"

namespace snapcache {

class AtomicFile {
 public:
  // Creates "<path>.tmp.<unique suffix>" (see unique_suffix) next to `path`.
  static Result<AtomicFile> create(FileSystem& fs, std::string path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  // All `size` bytes at `offset` of the temporary file.
  Status write(const void* data, std::size_t size, std::uint64_t offset);
  // How commit() makes the new file last. `durable`: fsync the file before the rename and the
  // directory after it. `unsynced`: neither, for files that are only observability (the counters):
  // a crash may leave the old file or an empty one, and a load never waits for a disk flush.
  enum class Durability { durable, unsynced };
  // fsync the file, rename it over `path`, fsync the directory. After a failed fsync or rename the
  // temporary file is still removed by the destructor; a failed directory fsync is reported, but
  // the file is already in place. The rename replaces the name, never the file it named: a hard
  // link or symlink planted at `path` loses that name and its target keeps its bytes.
  [[nodiscard]] Status commit(Durability durability = Durability::durable);

 private:
  AtomicFile(FileSystem& fs, std::string path, std::string temp_path, UniqueFd fd);

  FileSystem* fs_;  // null once moved from
  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;
  bool committed_ = false;
};

}  // namespace snapcache
