// Helpers composed from FileSystem calls only, so injected faults reach them too.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "util/file_io.h"

#include <random>

#include "snapcache/extend/file_system.h"
#include "snapcache/text.h"
#include "util/align.h"
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

Status read_all_uncached(FileSystem& fs, int fd, void* data, std::size_t size, std::uint64_t offset) {
  auto* p = static_cast<std::byte*>(data);
  if (reinterpret_cast<std::uintptr_t>(p) % kUncachedAlignment != 0 || offset % kUncachedAlignment != 0)
    return Status(StatusCode::unsupported,
                  fmt::format("a read around the page cache must start on {} bytes", kUncachedAlignment));
  const std::size_t rounded = util::align_up(size, kUncachedAlignment);
  for (std::size_t done = 0; done < size;) {
    // Each read starts where the last ended, on the alignment unless the file ended there.
    if (done % kUncachedAlignment != 0) return Status(StatusCode::damaged, "file ends early");
    auto n = fs.pread(fd, p + done, rounded - done, offset + done);
    if (!n) {
      if (n.status().sys_errno() == EINVAL)
        return Status(StatusCode::unsupported, "the disk refused a read around the page cache of this alignment", EINVAL);
      return n.status();
    }
    if (*n == 0) return Status(StatusCode::damaged, "file ends early");
    done += *n;
  }
  return Status::ok();
}

Result<UniqueFd> open_in_cache(FileSystem& fs, const std::string& path, OpenMode mode) {
  return fs.open(path, mode, Follow::no);
}

Result<std::string> read_open_file(FileSystem& fs, int fd, std::uint64_t max_bytes, const std::string& path) {
  auto id = fs.fstat(fd);
  if (!id) return id.status().with_context(path);
  if (id->size > max_bytes)
    return Status(StatusCode::foreign, fmt::format("{} is {}, more than the {} such a file may be; it was not read",
                                                   path, format_size(id->size), format_size(max_bytes)));
  std::string out(id->size, '\0');
  Status st = read_all(fs, fd, out.data(), out.size(), 0);
  if (!st) return st.with_context("read " + path);
  return out;
}

Result<std::string> read_file(FileSystem& fs, const std::string& path, std::uint64_t max_bytes, Follow follow) {
  auto fd = fs.open(path, OpenMode::read, follow);
  if (!fd) return fd.status();
  return read_open_file(fs, fd->get(), max_bytes, path);
}

Result<std::string> read_own_file(FileSystem& fs, const std::string& path, std::uint64_t max_bytes) {
  auto fd = open_in_cache(fs, path, OpenMode::read);
  if (!fd) return fd.status();
  auto id = fs.fstat(fd->get());
  if (!id) return id.status().with_context(path);
  if (id->links > 1)
    return Status(StatusCode::foreign, fmt::format("{} has {} names (a hard link): the store writes such a file only "
                                                   "by replacing it, so its bytes are not the store's",
                                                   path, id->links));
  return read_open_file(fs, fd->get(), max_bytes, path);
}

Status write_file_atomic(FileSystem& fs, const std::string& path, const std::string& contents,
                         AtomicFile::Durability durability) {
  auto file = AtomicFile::create(fs, path);
  if (!file) return file.status();
  SNAPCACHE_RETURN_IF_ERROR(file->write(contents.data(), contents.size(), 0));
  return file->commit(durability);
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  static const unsigned seed = std::random_device{}();
  return fmt::format("{}-{}-{:08x}", ::getpid(), counter.fetch_add(1), seed);
}

namespace {

Status ok_if_gone(Status st) { return st.code() == StatusCode::not_found ? Status::ok() : st; }

Status too_deep(const std::string& path) {
  return Status(StatusCode::foreign, fmt::format("{} is nested more than {} levels deep; snapcache makes no such "
                                                 "tree and leaves it alone",
                                                 path, kMaxTreeDepth));
}

// `path` split into the directory that holds it and its last name.
std::pair<std::string, std::string> split_path(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// `name` in the open directory `parent` and everything below it. Only names are looked up, each
// in the directory already opened, with nothing followed: a symlink anywhere is unlinked itself.
Status remove_at_depth(FileSystem& fs, int parent, const std::string& name, const std::string& path, int depth) {
  auto id = fs.stat_at(parent, name);
  if (!id) return ok_if_gone(id.status().with_context("remove " + path));
  if (!id->is_directory) return ok_if_gone(fs.remove_at(parent, name, false).with_context(path));
  if (depth >= kMaxTreeDepth) return too_deep(path);
  auto dir = fs.open_directory_at(parent, name);
  if (!dir) return ok_if_gone(dir.status().with_context("remove " + path));
  auto entries = fs.list_directory_at(dir->get());
  if (!entries) return entries.status().with_context("remove " + path);
  for (const auto& e : *entries)
    SNAPCACHE_RETURN_IF_ERROR(remove_at_depth(fs, dir->get(), e.name, path + "/" + e.name, depth + 1));
  return ok_if_gone(fs.remove_at(parent, name, true).with_context(path));
}

Result<std::uint64_t> size_at_depth(FileSystem& fs, int parent, const std::string& name, const std::string& path,
                                    int depth) {
  auto id = fs.stat_at(parent, name);
  if (!id) return id.status().with_context("measure " + path);
  if (id->is_symlink) return std::uint64_t{0};  // its target is not the cache's
  if (!id->is_directory) return id->size;
  if (depth >= kMaxTreeDepth) return too_deep(path);
  auto dir = fs.open_directory_at(parent, name);
  if (!dir) return dir.status().with_context("measure " + path);
  auto entries = fs.list_directory_at(dir->get());
  if (!entries) return entries.status().with_context("measure " + path);
  std::uint64_t total = 0;
  for (const auto& e : *entries) {
    auto sub = size_at_depth(fs, dir->get(), e.name, path + "/" + e.name, depth + 1);
    if (sub) total += *sub;  // a file removed meanwhile counts as nothing
  }
  return total;
}

}  // namespace

Status remove_tree(FileSystem& fs, const std::string& path) {
  auto [parent_path, name] = split_path(path);
  auto parent = fs.open_directory(parent_path);
  if (!parent) return ok_if_gone(parent.status());
  return remove_at_depth(fs, parent->get(), name, path, 0);
}

Result<std::uint64_t> tree_size(FileSystem& fs, const std::string& path) {
  auto [parent_path, name] = split_path(path);
  auto parent = fs.open_directory(parent_path);
  if (!parent) return parent.status();
  return size_at_depth(fs, parent->get(), name, path, 0);
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
