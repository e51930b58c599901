// Unix stream sockets for the donor protocol: framed messages (a length, then the body) that can
// carry file descriptors (SCM_RIGHTS), peer credentials checked before anything is trusted, and
// a per-socket lock so a second server never replaces a running one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/status.h"

namespace snapcache::ipc {

// The library's owned descriptor (snapcache/extend/file_system.h), closed on destruction.
using UniqueFd = snapcache::UniqueFd;

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// One message: a body (the protocol's JSON text) and the descriptors sent with it.
struct Message {
  std::string body;
  std::vector<UniqueFd> fds;
};

// Bodies above this are refused on both ends (a layout of a large model is a few MiB).
constexpr std::size_t kMaxMessageBytes = 64u << 20;
// Descriptors in one message, at most.
constexpr std::size_t kMaxMessageFds = 64;

using Timeout = std::chrono::milliseconds;

// A connected stream socket.
class Connection {
 public:
  Connection() = default;
  explicit Connection(UniqueFd fd) : fd_(std::move(fd)) {}
  // Sends the body and the descriptors as one message (the descriptors ride on its first bytes).
  Status send(const std::string& body, const std::vector<int>& fds = {});
  // From now on send() fails instead of waiting longer than `timeout` for a peer that does not
  // read (a server answering one client at a time must not hang on it).
  Status limit_send_time(Timeout timeout);
  // Waits up to `timeout` for a whole message. The peer closing the socket is not_found ("the
  // peer closed the connection"); a timeout is busy; a frame over the limits is invalid_argument.
  Result<Message> receive(Timeout timeout);
  // Waits up to `timeout` for the peer to close the socket (true) or for data (false; nothing is
  // consumed). A timeout returns busy.
  Result<bool> wait_closed(Timeout timeout);
  // SO_PEERCRED of the other end.
  Result<PeerCredentials> peer() const;
  // Fails (permission_denied, naming the peer's uid and pid) unless the peer runs as the effective
  // user of this process.
  Status require_same_user() const;
  int fd() const { return fd_.get(); }
  explicit operator bool() const { return fd_.valid(); }

 private:
  UniqueFd fd_;
};

// Connects to the socket at `path`. No socket there: not_found ("no donor listens at PATH"); a
// socket nobody listens on (a server that crashed): not_found ("stale socket ..."); the peer
// credentials are checked (require_same_user) before it returns.
Result<Connection> connect_to(const std::string& path, Timeout timeout);

// A listening socket at `dir/name`, held with an exclusive lock on `dir/name.lock` (flock, which
// the kernel drops when the holder dies). A second listener on the same name fails with busy and
// names the holder's pid (written into the lock file); a socket left by a holder that died is
// replaced. The directory must be private (require_private_dir). The socket file is removed on
// close() and destruction.
class Listener {
 public:
  static Result<Listener> listen_at(const std::string& dir, const std::string& name);
  Listener() = default;
  Listener(Listener&&) noexcept = default;
  Listener& operator=(Listener&&) noexcept;
  ~Listener();
  // Waits up to `timeout` for a connection; busy on timeout. The accepted peer's credentials are
  // checked (require_same_user); a peer of another user is refused and closed, with
  // permission_denied.
  Result<Connection> accept(Timeout timeout);
  // Stops listening: removes the socket file, then closes it and the lock.
  void close();
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
  UniqueFd lock_;
};

}  // namespace snapcache::ipc
