// Helpers composed from FileSystem calls only, so injected faults reach them too.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "util/file_io.h"

#include <random>

#include "util/atomic_file.h"
#include "util/fmt.h"

namespace snapcache {

Status write_all(FileSystem& fs, int fd, const void* data, std::size_t size,
                 std::uint64_t offset) {
  const auto* p = static_cast<const std::byte*>(data);
  while (size > 0) {
    auto n = fs.pwrite(fd, p, size, offset);
    if (!n) return n.status();
    if (*n == 0) return Status(StatusCode::io_error, "write made no progress");
    p += *n;
    size -= *n;
    offset += *n;
  }
  return Status::ok();
}

Status read_all(FileSystem& fs, int fd, void* data, std::size_t size, std::uint64_t offset) {
  auto* p = static_cast<std::byte*>(data);
  while (size > 0) {
    auto n = fs.pread(fd, p, size, offset);
    if (!n) return n.status();
    if (*n == 0) return Status(StatusCode::damaged, "file ends early");
    p += *n;
    size -= *n;
    offset += *n;
  }
  return Status::ok();
}

Result<std::string> read_file(FileSystem& fs, const std::string& path) {
  auto fd = fs.open(path, OpenMode::read);
  if (!fd) return fd.status();
  auto id = fs.fstat(fd->get());
  if (!id) return id.status().with_context(path);
  std::string out(id->size, '\0');
  Status st = read_all(fs, fd->get(), out.data(), out.size(), 0);
  if (!st) return st.with_context("read " + path);
  return out;
}

Status write_file_atomic(FileSystem& fs, const std::string& path, const std::string& contents) {
  auto file = AtomicFile::create(fs, path);
  if (!file) return file.status();
  SNAPCACHE_RETURN_IF_ERROR(file->write(contents.data(), contents.size(), 0));
  return file->commit();
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  static const unsigned seed = std::random_device{}();
  return fmt::format("{}-{}-{:08x}", ::getpid(), counter.fetch_add(1), seed);
}

Status remove_tree(FileSystem& fs, const std::string& path) {
  auto id = fs.stat(path);
  if (!id) return id.status().code() == StatusCode::not_found ? Status::ok() : id.status();
  if (!id->is_directory) {
    Status st = fs.remove_file(path);
    return st.code() == StatusCode::not_found ? Status::ok() : st;
  }
  auto entries = fs.list_directory(path);
  if (!entries) return entries.status();
  for (const auto& e : *entries) SNAPCACHE_RETURN_IF_ERROR(remove_tree(fs, path + "/" + e.name));
  Status st = fs.remove_directory(path);
  return st.code() == StatusCode::not_found ? Status::ok() : st;
}

Result<std::uint64_t> tree_size(FileSystem& fs, const std::string& path) {
  auto id = fs.stat(path);
  if (!id) return id.status();
  if (!id->is_directory) return id->size;
  auto entries = fs.list_directory(path);
  if (!entries) return entries.status();
  std::uint64_t total = 0;
  for (const auto& e : *entries) {
    auto sub = tree_size(fs, path + "/" + e.name);
    if (sub) total += *sub;  // a file removed meanwhile counts as nothing
  }
  return total;
}

Status make_directories(FileSystem& fs, const std::string& path) {
  if (path.empty()) return Status::ok();
  auto id = fs.stat(path);
  if (id) {
    if (id->is_directory) return Status::ok();
    return Status(StatusCode::invalid_argument, path + " exists and is not a directory");
  }
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0)
    SNAPCACHE_RETURN_IF_ERROR(make_directories(fs, path.substr(0, slash)));
  Status st = fs.make_directory(path);
  if (!st && st.sys_errno() == EEXIST) return Status::ok();
  return st;
}

}  // namespace snapcache
