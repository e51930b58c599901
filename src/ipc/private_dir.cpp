#include "ipc/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "util/fmt.h"

namespace snapcache::ipc {
namespace {

// The rules, on what lstat saw: a symlink is judged as a symlink, never as its target, since
// whoever controls the link's target controls the sockets found through it.
Status check_private(const std::string& dir, const struct stat& st) {
  if (S_ISLNK(st.st_mode))
    return Status(StatusCode::permission_denied,
                  fmt::format("{} is a symbolic link; the socket directory must be a real directory, which snapcache "
                              "does not reach through a link: name the directory itself (SNAPCACHE_DONOR_DIR)",
                              dir));
  if (!S_ISDIR(st.st_mode))
    return Status(StatusCode::invalid_argument,
                  fmt::format("{} exists and is not a directory: move it away or choose another socket directory "
                              "(SNAPCACHE_DONOR_DIR)",
                              dir));
  const uid_t me = ::geteuid();
  if (st.st_uid != me)
    return Status(StatusCode::permission_denied,
                  fmt::format("{} belongs to uid {}, not to uid {} who runs this process; its owner could stand in "
                              "for a donor: use a directory of your own (SNAPCACHE_DONOR_DIR)",
                              dir, st.st_uid, me));
  const unsigned shared_bits = st.st_mode & 077;
  if (shared_bits != 0)
    return Status(StatusCode::permission_denied,
                  fmt::format("{} has mode {:04o}, which lets group or others in (they could stand in for a donor or "
                              "attach to one): chmod 700 {}",
                              dir, st.st_mode & 07777, dir));
  return Status::ok();
}

}  // namespace

std::string default_socket_dir() {
  if (const char* dir = std::getenv("SNAPCACHE_DONOR_DIR"); dir != nullptr && *dir != '\0') return dir;
  // The user's runtime directory is private and per-login already; a relative value is invalid
  // by the XDG spec and ignored, as config.cpp does for XDG_CACHE_HOME.
  if (const char* run = std::getenv("XDG_RUNTIME_DIR"); run != nullptr && *run == '/')
    return std::string(run) + "/snapcache";
  return fmt::format("/tmp/snapcache-{}", ::geteuid());
}

Status require_private_dir(const std::string& dir, bool create) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return Status::from_errno(errno, "stat the socket directory " + dir);
    if (!create)
      return Status(StatusCode::not_found,
                    fmt::format("the socket directory {} does not exist: start a donor, which makes it, or "
                                "mkdir -m 700 {}",
                                dir, dir),
                    ENOENT);
    // EEXIST: someone made it between the lstat and here, perhaps another user in a shared /tmp.
    // Either way, what is there now is checked below like anything found.
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::from_errno(errno, "create the socket directory " + dir);
    if (::lstat(dir.c_str(), &st) != 0) return Status::from_errno(errno, "stat the socket directory " + dir);
  }
  return check_private(dir, st);
}

}  // namespace snapcache::ipc
