#include "util/atomic_file.h"

#include "util/file_io.h"
#include "snapcache/extend/file_system.h"

namespace snapcache {

Result<AtomicFile> AtomicFile::create(FileSystem& fs, std::string path) {
  std::string temp_path = path + ".tmp." + unique_suffix();
  auto fd = fs.open(temp_path, OpenMode::create_exclusive);
  if (!fd) return fd.status().with_context("write " + path);
  return AtomicFile(fs, std::move(path), std::move(temp_path), std::move(*fd));
}

AtomicFile::AtomicFile(FileSystem& fs, std::string path, std::string temp_path, UniqueFd fd)
    : fs_(&fs), path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(std::move(fd)) {}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : fs_(other.fs_),
      path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::move(other.fd_)),
      committed_(other.committed_) {
  other.fs_ = nullptr;
}

AtomicFile::~AtomicFile() {
  if (fs_ == nullptr || committed_) return;
  fd_ = UniqueFd();
  // Nothing to report to: the caller already has the failure that brought us here.
  (void)fs_->remove_file(temp_path_);
}

Status AtomicFile::write(const void* data, std::size_t size, std::uint64_t offset) {
  Status st = write_all(*fs_, fd_.get(), data, size, offset);
  return st ? st : st.with_context("write " + path_);
}

Status AtomicFile::commit(Durability durability) {
  if (durability == Durability::durable)
    if (Status st = fs_->fsync(fd_.get()); !st) return st.with_context("write " + path_);
  if (Status st = fs_->rename(temp_path_, path_); !st) return st.with_context("write " + path_);
  committed_ = true;
  fd_ = UniqueFd();
  if (durability == Durability::unsynced) return Status::ok();
  auto slash = path_.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  if (Status st = fs_->fsync_directory(directory); !st)
    return st.with_context("write " + path_ + " (the file is in place; its directory entry may not be durable)");
  return Status::ok();
}

}  // namespace snapcache
