#include "support/power_loss_fs.h"
#include "snapcache/extend/file_system.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace snapcache::test {
namespace {

namespace fsys = std::filesystem;

std::string normal(const std::string& path) { return fsys::path(path).lexically_normal().string(); }
std::string parent_of(const std::string& path) { return fsys::path(path).lexically_normal().parent_path().string(); }

bool is_create(OpenMode mode) {
  return mode == OpenMode::create_exclusive || mode == OpenMode::create_truncate || mode == OpenMode::create_read_only;
}

// Puts `bytes` back as the whole content of `path`, whatever its permissions (entry files are 0444).
void restore(const fsys::path& path, const std::string& bytes) {
  std::error_code ec;
  const auto perms = fsys::status(path, ec).permissions();
  fsys::permissions(path, fsys::perms::owner_write, fsys::perm_options::add, ec);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  fsys::permissions(path, perms, fsys::perm_options::replace, ec);
}

}  // namespace

void PowerLossFileSystem::settle() {
  std::lock_guard lock(mutex_);
  for (auto& op : names_) op.durable = true;
  written_.clear();  // what is on disk now is what a crash keeps
  durable_.clear();
}

void PowerLossFileSystem::die_after(std::uint64_t calls) {
  std::lock_guard lock(mutex_);
  die_at_ = calls_ + calls;
}

bool PowerLossFileSystem::died() const {
  std::lock_guard lock(mutex_);
  return died_;
}

std::uint64_t PowerLossFileSystem::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

Status PowerLossFileSystem::admit(FileSystemCall, std::string_view, int) {
  std::lock_guard lock(mutex_);
  if (calls_++ >= die_at_) died_ = true;
  return died_ ? Status::from_errno(EIO, "the power is gone") : Status::ok();
}

void PowerLossFileSystem::log(Kind kind, const std::string& from, const std::string& to) {
  std::lock_guard lock(mutex_);
  names_.push_back({kind, normal(from), normal(to), parent_of(to), kind == Kind::rename ? parent_of(from) : "", false});
}

void PowerLossFileSystem::track(int fd) {
  auto id = target().fstat(fd);
  if (!id) return;
  std::lock_guard lock(mutex_);
  written_fds_[fd] = {id->device, id->inode};
  written_.insert({id->device, id->inode});
}

void PowerLossFileSystem::crash() {
  std::lock_guard lock(mutex_);
  std::error_code ec;
  for (auto it = names_.rbegin(); it != names_.rend(); ++it) {
    if (it->durable) continue;
    switch (it->kind) {
      case Kind::create: fsys::remove(it->to, ec); break;
      case Kind::mkdir: fsys::remove_all(it->to, ec); break;
      case Kind::rename:
        if (fsys::exists(fsys::symlink_status(it->to, ec))) fsys::rename(it->to, it->from, ec);
        break;
    }
  }
  names_.clear();
  // Every file written through here that still has a name goes back to its fsynced bytes. Files
  // are found by inode (a rename moved them) under the directories named through here.
  written_fds_.clear();
  for (auto entry = fsys::recursive_directory_iterator(root_, fsys::directory_options::skip_permission_denied, ec);
       entry != fsys::recursive_directory_iterator(); entry.increment(ec)) {
    if (ec) break;
    struct ::stat st {};
    if (::lstat(entry->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const Inode inode{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
    if (!written_.count(inode)) continue;
    auto durable = durable_.find(inode);
    restore(entry->path(), durable == durable_.end() ? std::string() : durable->second);
  }
  written_.clear();
  durable_.clear();
  died_ = false;
  die_at_ = UINT64_MAX;
}

Result<UniqueFd> PowerLossFileSystem::open(const std::string& path, OpenMode mode, Follow follow) {
  SNAPCACHE_RETURN_IF_ERROR(admit(FileSystemCall::open, path, -1));
  const bool existed = static_cast<bool>(target().stat(path, Follow::no));
  auto fd = target().open(path, mode, follow);
  if (!fd) return fd;
  if (mode != OpenMode::read) track(fd->get());
  if (is_create(mode) && !existed) log(Kind::create, "", path);
  return fd;
}

Status PowerLossFileSystem::fsync(int fd) {
  SNAPCACHE_RETURN_IF_ERROR(FileSystemWrapper::fsync(fd));
  auto id = target().fstat(fd);
  if (!id) return id.status();
  std::string bytes(id->size, '\0');
  for (std::size_t done = 0; done < bytes.size();) {
    auto n = target().pread(fd, bytes.data() + done, bytes.size() - done, done);
    if (!n) return n.status();
    if (*n == 0) break;
    done += *n;
  }
  std::lock_guard lock(mutex_);
  durable_[{id->device, id->inode}] = std::move(bytes);
  return Status::ok();
}

Status PowerLossFileSystem::fsync_directory(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(FileSystemWrapper::fsync_directory(path));
  std::lock_guard lock(mutex_);
  const std::string dir = normal(path);
  for (auto& op : names_)
    if (op.directory == dir || op.other_directory == dir) op.durable = true;
  return Status::ok();
}

Status PowerLossFileSystem::rename(const std::string& from, const std::string& to) {
  SNAPCACHE_RETURN_IF_ERROR(FileSystemWrapper::rename(from, to));
  log(Kind::rename, from, to);
  return Status::ok();
}

Status PowerLossFileSystem::link(const std::string& from, const std::string& to) {
  SNAPCACHE_RETURN_IF_ERROR(FileSystemWrapper::link(from, to));
  log(Kind::create, from, to);
  return Status::ok();
}

Status PowerLossFileSystem::make_directory(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(FileSystemWrapper::make_directory(path));
  log(Kind::mkdir, "", path);
  return Status::ok();
}

}  // namespace snapcache::test
