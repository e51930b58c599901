#include "ipc/unix_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstddef>
#include <cstring>

#include "ipc/private_dir.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/text.h"
#include "util/fmt.h"

namespace snapcache::ipc {

namespace {

// A frame is a 4-byte little-endian body length, then the body.
constexpr std::size_t kHeaderBytes = 4;
static_assert(kMaxMessageBytes <= UINT32_MAX, "a body length must fit the 4-byte header");
constexpr int kListenBacklog = 64;
// A lock file holds one pid and a newline; more than this is not a pid we wrote.
constexpr std::size_t kMaxPidBytes = 32;
// Room for the most descriptors a message may carry. A peer that sends more overflows it, and
// the kernel says so with MSG_CTRUNC.
constexpr std::size_t kControlBytes = CMSG_SPACE(sizeof(int) * kMaxMessageFds);

using Clock = std::chrono::steady_clock;

// One deadline for a whole operation, however many waits it takes (a message may arrive in many
// pieces, a poll may be interrupted).
class Deadline {
 public:
  // poll() counts in int milliseconds, so longer waits (about 24 days) are cut to that.
  explicit Deadline(Timeout timeout)
      : timeout_(std::clamp(timeout, Timeout::zero(), Timeout(INT_MAX))), end_(Clock::now() + timeout_) {}
  // What is left, rounded up, so that a wait never ends before the deadline.
  int poll_ms() const {
    const auto left = std::chrono::ceil<Timeout>(end_ - Clock::now()).count();
    return static_cast<int>(std::clamp<Timeout::rep>(left, 0, INT_MAX));
  }
  std::string describe() const { return format_duration(std::chrono::duration<double>(timeout_).count()); }

 private:
  Timeout timeout_;
  Clock::time_point end_;
};

// Waits until `fd` reports one of `events` (or an error or hang-up, which the caller's next call
// reads): true. The deadline passed first: false.
Result<bool> wait_for(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, deadline.poll_ms());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return Status::from_errno(errno, "poll");
  }
}

Status connection_closed() { return Status(StatusCode::invalid_argument, "the connection is closed"); }

Status peer_closed() { return Status(StatusCode::not_found, "the peer closed the connection"); }

struct SocketAddress {
  sockaddr_un address{};
  socklen_t size = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&address); }
};

Result<SocketAddress> socket_address(const std::string& path) {
  SocketAddress out;
  if (path.empty() || path.find('\0') != std::string::npos)
    return Status(StatusCode::invalid_argument, "a socket path must be non-empty and hold no NUL byte");
  // One byte of sun_path is the terminating NUL that every other program expects.
  constexpr std::size_t kMaxPath = sizeof(out.address.sun_path) - 1;
  if (path.size() > kMaxPath)
    return Status(StatusCode::invalid_argument,
                  fmt::format("the socket path {} is {} bytes, and a Unix socket path holds at most {}: choose a "
                              "shorter socket directory (SNAPCACHE_DONOR_DIR)",
                              path, path.size(), kMaxPath));
  out.address.sun_family = AF_UNIX;
  std::memcpy(out.address.sun_path, path.data(), path.size());
  out.size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return out;
}

void encode_length(std::uint32_t size, unsigned char* out) {
  for (std::size_t i = 0; i < kHeaderBytes; ++i) out[i] = static_cast<unsigned char>(size >> (8 * i));
}

std::uint32_t decode_length(const unsigned char* in) {
  std::uint32_t size = 0;
  for (std::size_t i = 0; i < kHeaderBytes; ++i) size |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  return size;
}

// Drops the first `n` bytes still to send from the message's iovecs.
void advance(msghdr& msg, std::size_t n) {
  while (n > 0 && msg.msg_iovlen > 0) {
    iovec& first = msg.msg_iov[0];
    const std::size_t step = std::min(n, first.iov_len);
    first.iov_base = static_cast<char*>(first.iov_base) + step;
    first.iov_len -= step;
    n -= step;
    if (first.iov_len == 0) {
      ++msg.msg_iov;
      --msg.msg_iovlen;
    }
  }
}

Status too_many_descriptors() {
  return Status(StatusCode::invalid_argument,
                fmt::format("the peer sent more than {} descriptors in one message", kMaxMessageFds));
}

// Reads the bytes of one message, in as many pieces as the kernel hands out, and takes ownership
// of every descriptor that arrives with them, so that an error anywhere closes them all.
class FrameReader {
 public:
  FrameReader(int fd, const Deadline& deadline, std::vector<UniqueFd>& fds)
      : fd_(fd), deadline_(deadline), fds_(fds) {}

  Status read(void* data, std::size_t size) {
    auto* p = static_cast<char*>(data);
    while (size > 0) {
      iovec iov{p, size};
      alignas(cmsghdr) unsigned char control[kControlBytes];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      // Non-blocking, so the deadline is poll's alone; MSG_CMSG_CLOEXEC, so a descriptor never
      // leaks into a program this process runs, not even for the moment between here and fcntl.
      const ssize_t n = ::recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == ECONNRESET) return peer_closed();
        if (errno != EAGAIN && errno != EWOULDBLOCK) return Status::from_errno(errno, "receive");
        auto ready = wait_for(fd_, POLLIN, deadline_);
        if (!ready) return ready.status();
        if (!*ready) return timed_out();
        continue;
      }
      if (n == 0)
        return started_ ? Status(StatusCode::not_found, "the peer closed the connection in the middle of a message")
                        : peer_closed();
      started_ = true;
      SNAPCACHE_RETURN_IF_ERROR(take_descriptors(msg));
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return Status::ok();
  }

  // Whether bytes of this message were consumed: after an error, the stream is then no longer at
  // a frame boundary.
  bool started() const { return started_; }

 private:
  Status take_descriptors(msghdr& msg) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const unsigned char* data = CMSG_DATA(c);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, data + i * sizeof(int), sizeof fd);
        fds_.emplace_back(fd);
      }
    }
    // Those that did not fit the control buffer were never installed here; those that did are
    // in fds_ and close with it.
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds_.size() > kMaxMessageFds) return too_many_descriptors();
    return Status::ok();
  }

  Status timed_out() const {
    if (!started_) return Status(StatusCode::busy, "no message within " + deadline_.describe());
    return Status(StatusCode::busy, "the peer sent part of a message and then nothing until the timeout (" +
                                        deadline_.describe() + ")");
  }

  int fd_;
  const Deadline& deadline_;
  std::vector<UniqueFd>& fds_;
  bool started_ = false;
};

// SO_SNDTIMEO is how long a blocking connect() waits for room in the listener's queue. Zero
// would mean forever there, so the shortest wait asked for is 1 ms.
Status set_send_timeout(int fd, Timeout timeout) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
    return Status::from_errno(errno, "setsockopt SO_SNDTIMEO");
  return Status::ok();
}

Status connect_error(const std::string& path, int err, Timeout timeout) {
  switch (err) {
    case ENOENT:
      return Status(StatusCode::not_found, fmt::format("no donor listens at {} (there is no socket)", path), err);
    case ECONNREFUSED: {
      // connect() says the same of a file that is no socket at all.
      struct stat st {};
      if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
        return Status(StatusCode::not_found, fmt::format("no donor listens at {}: it is not a socket", path), err);
      return Status(StatusCode::not_found,
                    fmt::format("stale socket at {}: the donor that made it is gone (the next donor to start "
                                "there replaces it)",
                                path),
                    err);
    }
    case EAGAIN:
      return Status(StatusCode::busy,
                    fmt::format("the donor at {} took no new connection within {}: its queue of connections is full",
                                path, format_duration(std::chrono::duration<double>(timeout).count())),
                    err);
    case EACCES:
    case EPERM:
      return Status(StatusCode::permission_denied,
                    fmt::format("cannot connect to {}: {}; the socket and its directory must be yours (ls -ld {})",
                                path, std::strerror(err), path),
                    err);
    default: return Status::from_errno(err, "connect to " + path);
  }
}

Status check_socket_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find_first_of(std::string("/\0", 2)) != std::string::npos)
    return Status(StatusCode::invalid_argument,
                  fmt::format("'{}' is no socket name: a name is one path component, without '/'", name));
  return Status::ok();
}

// The pid a holder wrote into its lock file, if there is one to read yet.
std::string holder_of(int lock_fd) {
  char text[kMaxPidBytes];
  const ssize_t n = ::pread(lock_fd, text, sizeof text, 0);
  if (n <= 0) return {};
  long pid = 0;
  const auto [end, ec] = std::from_chars(text, text + n, pid);
  if (ec != std::errc() || pid <= 0 || end == text) return {};
  return std::to_string(pid);
}

// Opens and locks `socket_path`.lock; the holder's pid goes into it for the next one who tries.
Result<UniqueFd> lock_socket_name(const std::string& socket_path) {
  const std::string lock_path = socket_path + ".lock";
  // In a private directory only this user creates files, so O_NOFOLLOW and the type check guard
  // against the user's own accidents, not an attack.
  const int raw = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (raw < 0) {
    if (errno == ELOOP)
      return Status(StatusCode::foreign,
                    fmt::format("{} is a symbolic link, which snapcache does not follow: remove it", lock_path), ELOOP);
    return Status::from_errno(errno, "open " + lock_path);
  }
  UniqueFd lock(raw);
  struct stat st {};
  if (::fstat(raw, &st) != 0) return Status::from_errno(errno, "stat " + lock_path);
  if (!S_ISREG(st.st_mode))
    return Status(StatusCode::foreign, fmt::format("{} is not a regular file: move it away", lock_path));
  for (;;) {
    if (::flock(raw, LOCK_EX | LOCK_NB) == 0) break;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return Status::from_errno(errno, "lock " + lock_path);
    const std::string pid = holder_of(raw);
    if (pid.empty())
      return Status(StatusCode::busy,
                    fmt::format("another donor serves at {} (it is starting and has not written its pid to {} "
                                "yet); stop it first",
                                socket_path, lock_path),
                    EWOULDBLOCK);
    return Status(StatusCode::busy, fmt::format("another donor (pid {}) serves at {}; stop it first", pid, socket_path),
                  EWOULDBLOCK);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(raw, 0) != 0) return Status::from_errno(errno, "truncate " + lock_path);
  const ssize_t n = ::pwrite(raw, pid.data(), pid.size(), 0);
  if (n < 0) return Status::from_errno(errno, "write " + lock_path);
  if (static_cast<std::size_t>(n) != pid.size())
    return Status(StatusCode::io_error, "write " + lock_path + ": the pid was written only in part");
  return lock;
}

// A socket at `path` while we hold its lock is a dead donor's: no live one can hold the lock.
// Anything else there is left alone, since snapcache did not make it.
Status remove_stale_socket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::ok();
    return Status::from_errno(errno, "stat " + path);
  }
  if (!S_ISSOCK(st.st_mode))
    return Status(StatusCode::foreign,
                  fmt::format("{} exists and is not a socket; snapcache replaces only a dead donor's socket: move it "
                              "away or choose another name",
                              path));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return Status::from_errno(errno, "remove the stale socket " + path);
  return Status::ok();
}

// Whether the file at `path` is still the one `fd` has open.
bool same_file(int fd, const std::string& path) {
  struct stat open_file {};
  struct stat named {};
  return ::fstat(fd, &open_file) == 0 && ::lstat(path.c_str(), &named) == 0 && open_file.st_dev == named.st_dev &&
         open_file.st_ino == named.st_ino;
}

}  // namespace

Status Connection::send(const std::string& body, const std::vector<int>& fds) {
  if (!fd_.valid()) return connection_closed();
  if (body.size() > kMaxMessageBytes)
    return Status(StatusCode::invalid_argument,
                  fmt::format("a message of {} is over the limit of {}; nothing was sent", format_size(body.size()),
                              format_size(kMaxMessageBytes)));
  if (fds.size() > kMaxMessageFds)
    return Status(StatusCode::invalid_argument,
                  fmt::format("{} descriptors are more than the {} one message may carry; nothing was sent",
                              fds.size(), kMaxMessageFds));
  for (int fd : fds)
    if (fd < 0)
      return Status(StatusCode::invalid_argument, fmt::format("descriptor {} is not open; nothing was sent", fd));

  unsigned char header[kHeaderBytes];
  encode_length(static_cast<std::uint32_t>(body.size()), header);
  iovec iov[2] = {{header, kHeaderBytes}, {const_cast<char*>(body.data()), body.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  alignas(cmsghdr) unsigned char control[kControlBytes] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  std::size_t left = kHeaderBytes + body.size();
  while (left > 0) {
    // MSG_NOSIGNAL: a peer that went away is an error to report, not a SIGPIPE that kills us.
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) return peer_closed();
      return Status::from_errno(errno, "send");
    }
    // The descriptors went with the first bytes; the rest is plain data.
    msg.msg_control = nullptr;
    msg.msg_controllen = 0;
    advance(msg, static_cast<std::size_t>(n));
    left -= static_cast<std::size_t>(n);
  }
  return Status::ok();
}

Status Connection::limit_send_time(Timeout timeout) {
  if (!fd_.valid()) return connection_closed();
  return set_send_timeout(fd_.get(), std::max(timeout, Timeout(1)));
}

Result<Message> Connection::receive(Timeout timeout) {
  if (!fd_.valid()) return connection_closed();
  const Deadline deadline(timeout);
  Message message;
  FrameReader reader(fd_.get(), deadline, message.fds);
  unsigned char header[kHeaderBytes];
  Status st = reader.read(header, kHeaderBytes);
  if (st) {
    const std::uint32_t size = decode_length(header);
    if (size > kMaxMessageBytes)
      st = Status(StatusCode::invalid_argument, fmt::format("the peer announced a message of {}, over the limit of {}",
                                                            format_size(size), format_size(kMaxMessageBytes)));
    else {
      message.body.resize(size);
      st = reader.read(message.body.data(), size);
    }
  }
  if (!st) {
    // Part of a frame was consumed, so the next bytes are not a frame's start: nothing more can be
    // read or trusted on this connection. Shutting it down says so to both ends.
    if (reader.started()) ::shutdown(fd_.get(), SHUT_RDWR);
    return st;
  }
  return message;
}

Result<bool> Connection::wait_closed(Timeout timeout) {
  if (!fd_.valid()) return connection_closed();
  const Deadline deadline(timeout);
  for (;;) {
    auto ready = wait_for(fd_.get(), POLLIN | POLLRDHUP, deadline);
    if (!ready) return ready.status();
    if (!*ready)
      return Status(StatusCode::busy,
                    "the peer neither closed the connection nor sent anything within " + deadline.describe());
    // A peek without room for control data installs none of the descriptors that may ride on the
    // data, and consumes nothing.
    char byte = 0;
    const ssize_t n = ::recv(fd_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n > 0) return false;
    if (errno == ECONNRESET) return true;
    if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return Status::from_errno(errno, "receive");
  }
}

Result<PeerCredentials> Connection::peer() const {
  if (!fd_.valid()) return connection_closed();
  ucred cred{};
  socklen_t size = sizeof cred;
  if (::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0)
    return Status::from_errno(errno, "read the peer's credentials (SO_PEERCRED)");
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

Status Connection::require_same_user() const {
  auto peer_credentials = peer();
  if (!peer_credentials) return peer_credentials.status();
  const uid_t me = ::geteuid();
  if (peer_credentials->uid == me) return Status::ok();
  return Status(StatusCode::permission_denied,
                fmt::format("the peer (pid {}) runs as uid {}, not as uid {} like this process; donors and loaders "
                            "only talk to their own user",
                            peer_credentials->pid, peer_credentials->uid, me));
}

Result<Connection> connect_to(const std::string& path, Timeout timeout) {
  auto address = socket_address(path);
  if (!address) return address.status();
  const int raw = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (raw < 0) return Status::from_errno(errno, "socket");
  UniqueFd fd(raw);
  // A Unix connect() completes at once, unless the listener's queue is full: then it waits for
  // room, as long as SO_SNDTIMEO allows.
  SNAPCACHE_RETURN_IF_ERROR(set_send_timeout(fd.get(), std::max(timeout, Timeout(1))));
  for (;;) {
    if (::connect(fd.get(), address->get(), address->size) == 0) break;
    // Interrupted while waiting for room: nothing happened yet, so it can be tried again.
    if (errno != EINTR) return connect_error(path, errno, timeout);
  }
  // Sends block without a limit again, as Connection::send expects.
  SNAPCACHE_RETURN_IF_ERROR(set_send_timeout(fd.get(), Timeout::zero()));
  Connection connection(std::move(fd));
  Status same_user = connection.require_same_user();
  if (!same_user) return same_user.with_context("refused the donor at " + path);
  return connection;
}

Result<Listener> Listener::listen_at(const std::string& dir, const std::string& name) {
  SNAPCACHE_RETURN_IF_ERROR(check_socket_name(name));
  const std::string path = dir + "/" + name;
  auto address = socket_address(path);
  if (!address) return address.status();
  SNAPCACHE_RETURN_IF_ERROR(require_private_dir(dir, true));
  auto lock = lock_socket_name(path);
  if (!lock) return lock.status();
  SNAPCACHE_RETURN_IF_ERROR(remove_stale_socket(path));
  // Non-blocking, so that accept() waits in poll() for its deadline and never in accept4().
  const int raw = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (raw < 0) return Status::from_errno(errno, "socket");
  UniqueFd listening(raw);
  if (::bind(raw, address->get(), address->size) != 0) return Status::from_errno(errno, "bind " + path);
  // The socket file is ours from here on: an error below returns through ~Listener, which removes it.
  Listener listener;
  listener.path_ = path;
  listener.fd_ = std::move(listening);
  listener.lock_ = std::move(*lock);
  // The private directory already keeps others out; 0600 on the socket is a second fence, for a
  // directory whose mode someone widens later.
  if (::chmod(path.c_str(), 0600) != 0) return Status::from_errno(errno, "chmod 600 " + path);
  if (::listen(raw, kListenBacklog) != 0) return Status::from_errno(errno, "listen on " + path);
  return listener;
}

Listener& Listener::operator=(Listener&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = std::move(o.fd_);
    lock_ = std::move(o.lock_);
    o.path_.clear();
  }
  return *this;
}

Listener::~Listener() { close(); }

Result<Connection> Listener::accept(Timeout timeout) {
  if (!fd_.valid()) return Status(StatusCode::invalid_argument, "the listener is closed");
  const Deadline deadline(timeout);
  for (;;) {
    const int raw = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (raw >= 0) {
      Connection connection{UniqueFd(raw)};
      Status same_user = connection.require_same_user();
      if (!same_user) return same_user.with_context("refused a connection to " + path_);
      return connection;
    }
    // ECONNABORTED: a client gave up while queued; wait for the next one.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Status::from_errno(errno, "accept on " + path_);
    auto ready = wait_for(fd_.get(), POLLIN, deadline);
    if (!ready) return ready.status();
    if (!*ready)
      return Status(StatusCode::busy, fmt::format("no connection to {} within {}", path_, deadline.describe()));
  }
}

void Listener::close() {
  // Only the lock's holder removes the socket, and only while the lock file at its name is the
  // one it holds: otherwise the name may have passed to another donor, whose socket this would be.
  // Emptying the lock file tells the next one who finds it locked that its holder is starting
  // rather than naming a pid that is long gone.
  //
  // The lock file itself stays. Were it removed, a donor that opened it just before could still
  // lock the removed file while a third one creates and locks a new file at the name: two
  // holders, each sure it owns the socket.
  if (lock_.valid() && same_file(lock_.get(), path_ + ".lock")) {
    ::unlink(path_.c_str());
    (void)::ftruncate(lock_.get(), 0);  // only a hint for the next one; nothing to do if it fails
  }
  fd_ = UniqueFd();
  lock_ = UniqueFd();
}

}  // namespace snapcache::ipc
