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

// `path` split into the directory that holds it and its last name.
std::pair<std::string, std::string> split_path(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// A walk of one tree by directory descriptors, children before their directory, with no limit on
// its depth: nothing recurses, and only the deepest kOpenLevels directories keep a descriptor. A
// directory whose descriptor was closed is opened again on the way back up as ".." of its child,
// and must be the directory that was left (device and inode): one renamed meanwhile ends the walk
// instead of leading it into whatever holds it now. Names are only ever looked up in a directory
// already opened, with nothing followed, and a directory on another file system (a mount) is not
// entered: what lies there is not the tree's.
class TreeWalk {
 public:
  // What the walk does with each thing it meets; `parent` holds `name`.
  struct Visitor {
    virtual ~Visitor() = default;
    // Anything that is not a directory (a symlink is one of these, never followed).
    virtual Status leaf(int parent, const std::string& name, const FileIdentity& id) = 0;
    // A directory, after everything below it, unless something there was refused (a directory
    // that still holds something cannot be removed, and its removal would only say so).
    virtual Status directory_done(int parent, const std::string& name) = 0;
  };

  TreeWalk(FileSystem& fs, std::string root) : fs_(fs), root_(std::move(root)) {}

  // Walks `root_`. What it returns is an error that stopped the walk: the top cannot be looked at
  // (not_found: there is nothing), or a directory moved while the walk was inside it. A refusal
  // of anything in the tree (the top's own removal included) is recorded instead (first_failure,
  // failures), and the walk goes on with the rest.
  Status run(Visitor& visitor) {
    auto [parent_path, name] = split_path(root_);
    auto parent = fs_.open_directory(parent_path);
    if (!parent) return parent.status();
    auto id = fs_.stat_at(parent->get(), name);
    if (!id) return id.status().with_context(root_);
    if (!id->is_directory) {
      Status st = visitor.leaf(parent->get(), name, *id);
      if (!st && st.code() != StatusCode::not_found) record(st, root_);
      return Status::ok();
    }
    device_ = id->device;
    SNAPCACHE_RETURN_IF_ERROR(enter(parent->get(), name).with_context(root_));
    while (!levels_.empty()) {
      Level& top = levels_.back();
      if (!top.pending.empty()) {
        std::string child = std::move(top.pending.back().name);
        top.pending.pop_back();
        visit(visitor, top.fd.get(), child);
        continue;
      }
      Level done = std::move(levels_.back());
      levels_.pop_back();
      int holder = parent->get();
      if (!levels_.empty()) {
        auto reopened = reopen_parent(done);
        if (!reopened) return reopened.status();
        holder = *reopened;
      }
      Status st = done.failed ? Status(StatusCode::io_error, "not empty") : visitor.directory_done(holder, done.name);
      if (!st && !done.failed && st.code() != StatusCode::not_found)
        record(st, levels_.empty() ? root_ : path_of(done.name));
      if (!st && !levels_.empty()) levels_.back().failed = true;
    }
    return Status::ok();
  }

  const Status& first_failure() const { return first_failure_; }
  std::uint64_t failures() const { return failures_; }

 private:
  static constexpr std::size_t kOpenLevels = 16;

  struct Level {
    std::string name;  // in the level above (the root: in its parent)
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    UniqueFd fd;                    // closed when more than kOpenLevels lie below
    std::vector<DirEntry> pending;  // names not visited yet
    bool failed = false;            // something below was refused
  };

  void visit(Visitor& visitor, int dir, const std::string& name) {
    auto id = fs_.stat_at(dir, name);
    if (!id) {
      if (id.status().code() != StatusCode::not_found) fail(id.status(), name);  // gone meanwhile: nothing to do
      return;
    }
    if (!id->is_directory) {
      Status st = visitor.leaf(dir, name, *id);
      if (!st && st.code() != StatusCode::not_found) fail(st, name);
      return;
    }
    if (id->device != device_) {
      fail(Status(StatusCode::foreign, "a mount point: the file system mounted there is not the tree's"), name);
      return;
    }
    Status st = enter(dir, name);
    if (!st && st.code() != StatusCode::not_found) fail(st, name);
  }

  Status enter(int parent, const std::string& name) {
    auto fd = fs_.open_directory_at(parent, name);
    if (!fd) return fd.status();
    auto id = fs_.fstat(fd->get());
    if (!id) return id.status();
    auto names = fs_.list_directory_at(fd->get());
    if (!names) return names.status();
    levels_.push_back({name, id->device, id->inode, std::move(*fd), std::move(*names), false});
    if (levels_.size() > kOpenLevels) levels_[levels_.size() - 1 - kOpenLevels].fd = UniqueFd();
    return Status::ok();
  }

  // The descriptor of the level above `done`, opened again as its ".." if it was closed.
  Result<int> reopen_parent(const Level& done) {
    Level& up = levels_.back();
    if (up.fd.valid()) return up.fd.get();
    auto fd = fs_.open_directory_at(done.fd.get(), "..");
    if (!fd) return fd.status().with_context(path_of(done.name + "/.."));
    auto id = fs_.fstat(fd->get());
    if (!id) return id.status().with_context(path_of(done.name + "/.."));
    if (id->device != up.device || id->inode != up.inode)
      return Status(StatusCode::foreign, fmt::format("{} was moved out of {} while it was walked; the walk stops there",
                                                     path_of(done.name), root_));
    up.fd = std::move(*fd);
    return up.fd.get();
  }

  void fail(const Status& st, const std::string& name) {
    record(st, path_of(name));
    levels_.back().failed = true;
  }

  void record(const Status& st, const std::string& path) {
    if (failures_++ == 0) first_failure_ = st.with_context(path);
  }

  // The path of `name` in the deepest level, for messages only: a deep tree's paths are long, and
  // making one per level would make the walk quadratic in its depth.
  std::string path_of(const std::string& name) const {
    std::string path = root_;
    for (std::size_t i = 1; i < levels_.size(); ++i) path += "/" + levels_[i].name;
    return name.empty() ? path : path + "/" + name;
  }

  FileSystem& fs_;
  std::string root_;
  std::uint64_t device_ = 0;
  std::vector<Level> levels_;
  Status first_failure_;
  std::uint64_t failures_ = 0;
};

class Remover : public TreeWalk::Visitor {
 public:
  explicit Remover(FileSystem& fs) : fs_(fs) {}
  Status leaf(int parent, const std::string& name, const FileIdentity&) override {
    return fs_.remove_at(parent, name, false);
  }
  Status directory_done(int parent, const std::string& name) override { return fs_.remove_at(parent, name, true); }

 private:
  FileSystem& fs_;
};

class Measurer : public TreeWalk::Visitor {
 public:
  Measurer(SharedFiles shared, FileKeys* seen) : shared_(shared), seen_(seen) {}
  Status leaf(int, const std::string&, const FileIdentity& id) override {
    if (id.is_symlink) return Status::ok();  // a link's target is not the tree's
    if (id.links > 1 && !id.is_directory) {
      in_shared_files += id.size;
      if (seen_ ? !seen_->insert({id.device, id.inode}).second : shared_ == SharedFiles::not_at_all)
        return Status::ok();
    }
    total += id.size;
    return Status::ok();
  }
  Status directory_done(int, const std::string&) override { return Status::ok(); }
  std::uint64_t total = 0;
  std::uint64_t in_shared_files = 0;

 private:
  SharedFiles shared_;
  FileKeys* seen_;
};

Result<TreeBytes> measure_tree(FileSystem& fs, const std::string& path, SharedFiles shared, FileKeys* seen) {
  TreeWalk walk(fs, path);
  Measurer measurer(shared, seen);
  // Below the top, what cannot be looked at counts as nothing, like a file removed while counting.
  SNAPCACHE_RETURN_IF_ERROR(walk.run(measurer));
  return TreeBytes{measurer.total, measurer.in_shared_files};
}

}  // namespace

Status remove_tree(FileSystem& fs, const std::string& path) {
  TreeWalk walk(fs, path);
  Remover remover(fs);
  Status stopped = walk.run(remover);
  if (!stopped) return stopped.code() == StatusCode::not_found ? Status::ok() : stopped;
  const Status& first = walk.first_failure();
  if (walk.failures() <= 1) return first;
  return Status(first.code(),
                fmt::format("{} (and {} more in {} that could not be removed)", first.message(), walk.failures() - 1, path),
                first.sys_errno());
}

Result<std::uint64_t> tree_size(FileSystem& fs, const std::string& path, SharedFiles shared) {
  auto bytes = measure_tree(fs, path, shared, nullptr);
  if (!bytes) return bytes.status();
  return bytes->total;
}

Result<std::uint64_t> tree_size(FileSystem& fs, const std::string& path, FileKeys& seen) {
  auto bytes = measure_tree(fs, path, SharedFiles::in_full, &seen);
  if (!bytes) return bytes.status();
  return bytes->total;
}

Result<TreeBytes> tree_bytes(FileSystem& fs, const std::string& path) {
  return measure_tree(fs, path, SharedFiles::in_full, nullptr);
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
