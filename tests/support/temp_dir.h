#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace snapcache::test {

// A fresh directory on the real file system, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::string& bytes);

// Plain POSIX file helpers. Tests avoid std::filesystem: libtorch.so exports its own copies of
// some std::filesystem functions, and remove_all from there crashes when called from outside.
bool path_exists(const std::string& path);
std::vector<std::string> list_names(const std::string& dir);  // entries but "." and ".."; none if unreadable
std::uint64_t file_size(const std::string& path);
void resize_file(const std::string& path, std::uint64_t size);
void remove_path(const std::string& path);  // file or whole tree
void rename_path(const std::string& from, const std::string& to);
// Sets a file's mtime to `seconds_ago` before now (negative: in the future); its identity changes.
void set_age(const std::string& path, std::int64_t seconds_ago);
// XORs the byte at `offset` with 0x5a: damage a checksum must catch.
void flip_byte(const std::string& path, std::uint64_t offset);
std::size_t count_entries(const std::string& dir, bool directories_only = false);

}  // namespace snapcache::test
