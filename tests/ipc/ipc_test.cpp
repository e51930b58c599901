// The donor protocol's plumbing: private socket directories, framed messages with descriptors,
// peer credentials, and the per-name lock, with real second processes where another process is
// the point (a running or killed donor, a peer of another user).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ipc/private_dir.h"
#include "ipc/unix_socket.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/temp_dir.h"
#include "snapcache/extend/file_system.h"

using namespace snapcache;
using namespace snapcache::ipc;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The two ends of a connection without a listener, for what concerns only the framing.
std::pair<Connection, Connection> connected_pair() {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  return {Connection(UniqueFd(fds[0])), Connection(UniqueFd(fds[1]))};
}

// An anonymous file holding `text`.
UniqueFd memfd_with(const std::string& text) {
  UniqueFd fd(::memfd_create("snapcache-ipc-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::pwrite(fd.get(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
  return fd;
}

std::string read_fd(int fd, std::size_t size) {
  std::string out(size, '\0');
  const ssize_t n = ::pread(fd, out.data(), size, 0);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

std::size_t open_descriptors() { return test::list_names("/proc/self/fd").size(); }

bool same_file(int a, int b) {
  struct stat sa {};
  struct stat sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Writes bytes and descriptors straight to the socket, as a peer that ignores the framing rules.
void send_raw(int fd, const std::string& bytes, const std::vector<int>& fds = {}) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<cmsghdr> control(CMSG_SPACE(sizeof(int) * fds.size()) / sizeof(cmsghdr) + 1);  // aligned room
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  REQUIRE(::sendmsg(fd, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

std::string frame_header(std::uint32_t size) {
  return {static_cast<char>(size & 0xff), static_cast<char>((size >> 8) & 0xff), static_cast<char>((size >> 16) & 0xff),
          static_cast<char>(size >> 24)};
}

// Sets or removes an environment variable for a scope, and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

constexpr uid_t kNobody = 65534;

}  // namespace

TEST_CASE("a private socket directory is accepted, and a shared, linked, foreign or missing one is refused "
          "with the fix",
          "[ipc]") {
  test::TempDir tmp;  // mkdtemp: 0700, ours
  INFO(require_private_dir(tmp.path(), false).to_string());
  CHECK(require_private_dir(tmp.path(), false).is_ok());

  const std::string open_dir = tmp / "open";
  REQUIRE(::mkdir(open_dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0755) == 0);
  Status st = require_private_dir(open_dir, true);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::permission_denied);
  CHECK(contains(st.message(), "chmod 700 " + open_dir));
  CHECK(contains(st.message(), "0755"));

  const std::string link = tmp / "link";
  REQUIRE(::symlink(tmp.path().c_str(), link.c_str()) == 0);  // to a private directory, still refused
  st = require_private_dir(link, true);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::permission_denied);
  CHECK(contains(st.message(), "symbolic link"));

  const std::string file = tmp / "file";
  test::write_bytes(file, "x");
  st = require_private_dir(file, true);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::invalid_argument);
  CHECK(contains(st.message(), "not a directory"));
  CHECK(test::read_bytes(file) == "x");

  const std::string missing = tmp / "missing";
  st = require_private_dir(missing, false);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::not_found);
  CHECK(contains(st.message(), "mkdir -m 700 " + missing));
  CHECK_FALSE(test::path_exists(missing));

  CHECK(require_private_dir(tmp / "no-parent/dir", true).code() == StatusCode::not_found);
  CHECK_FALSE(test::path_exists(tmp / "no-parent"));
}

TEST_CASE("a missing socket directory is made with mode 0700 when asked to", "[ipc]") {
  test::TempDir tmp;
  const std::string dir = tmp / "sockets";
  const mode_t old_umask = ::umask(0);  // nothing masked: the mode is mkdir's alone
  const Status st = require_private_dir(dir, true);
  ::umask(old_umask);
  INFO(st.to_string());
  REQUIRE(st.is_ok());
  struct stat info {};
  REQUIRE(::lstat(dir.c_str(), &info) == 0);
  CHECK(S_ISDIR(info.st_mode));
  CHECK((info.st_mode & 07777) == 0700);
  CHECK(info.st_uid == ::geteuid());
  CHECK(require_private_dir(dir, true).is_ok());  // and again, now that it exists
}

TEST_CASE("a socket directory of another user is refused", "[ipc][root]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: giving a directory to another user needs root");
    return;
  }
  test::TempDir tmp;
  const std::string dir = tmp / "theirs";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::chown(dir.c_str(), kNobody, kNobody) == 0);
  const Status st = require_private_dir(dir, true);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::permission_denied);
  CHECK(contains(st.message(), "belongs to uid 65534"));
}

TEST_CASE("the default socket directory is SNAPCACHE_DONOR_DIR, else under XDG_RUNTIME_DIR, else in /tmp", "[ipc]") {
  {
    ScopedEnv donor("SNAPCACHE_DONOR_DIR", "/somewhere/donors");
    ScopedEnv runtime("XDG_RUNTIME_DIR", "/run/user/1000");
    CHECK(default_socket_dir() == "/somewhere/donors");
  }
  {
    ScopedEnv donor("SNAPCACHE_DONOR_DIR", "");
    ScopedEnv runtime("XDG_RUNTIME_DIR", "/run/user/1000");
    CHECK(default_socket_dir() == "/run/user/1000/snapcache");
  }
  {
    ScopedEnv donor("SNAPCACHE_DONOR_DIR", nullptr);
    ScopedEnv runtime("XDG_RUNTIME_DIR", "relative/dir");  // not absolute: ignored, as XDG says
    CHECK(default_socket_dir() == "/tmp/snapcache-" + std::to_string(::geteuid()));
  }
}

TEST_CASE("a message and its descriptors cross whole, and the descriptors reach the same files", "[ipc]") {
  test::TempDir dir;
  auto listener = Listener::listen_at(dir.path(), "donor");
  INFO(listener.status().to_string());
  REQUIRE(listener);
  CHECK(listener->path() == dir / "donor");
  auto client = connect_to(listener->path(), 1s);
  INFO(client.status().to_string());
  REQUIRE(client);
  auto server = listener->accept(1s);
  INFO(server.status().to_string());
  REQUIRE(server);

  auto who = server->peer();
  REQUIRE(who);
  CHECK(who->pid == ::getpid());
  CHECK(who->uid == ::geteuid());
  CHECK(who->gid == ::getegid());

  UniqueFd memfd = memfd_with("weights, mapped");
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  UniqueFd pipe_read(pipe_fds[0]), pipe_write(pipe_fds[1]);
  const std::string body = R"({"op":"attach","tensors":3})";
  REQUIRE(client->send(body, {memfd.get(), pipe_write.get()}).is_ok());

  auto message = server->receive(1s);
  INFO(message.status().to_string());
  REQUIRE(message);
  CHECK(message->body == body);
  REQUIRE(message->fds.size() == 2);
  for (const auto& fd : message->fds) CHECK((::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(same_file(message->fds[0].get(), memfd.get()));
  CHECK(read_fd(message->fds[0].get(), 64) == "weights, mapped");
  REQUIRE(::write(message->fds[1].get(), "through", 7) == 7);
  char got[8] = {};
  REQUIRE(::read(pipe_read.get(), got, 7) == 7);
  CHECK(std::string(got) == "through");

  // Back the other way, several in a row: each arrives as sent, the frame boundaries kept.
  const std::vector<std::string> replies = {"", "{}", std::string(100'000, 'r')};
  for (const auto& reply : replies) REQUIRE(server->send(reply).is_ok());
  for (const auto& reply : replies) {
    auto back = client->receive(1s);
    INFO(back.status().to_string());
    REQUIRE(back);
    CHECK(back->body == reply);
    CHECK(back->fds.empty());
  }
}

TEST_CASE("a message of several MiB crosses in pieces, and one over the limits is refused at either end", "[ipc]") {
  auto [a, b] = connected_pair();
  std::string big(8u << 20, '\0');
  std::mt19937 rng(11);
  for (char& c : big) c = static_cast<char>(rng());
  Status sent;
  // Far more than a socket buffer: the sender blocks until the receiver drains it.
  std::thread sender([&] { sent = a.send(big); });
  auto got = b.receive(20s);
  sender.join();
  INFO(sent.to_string());
  CHECK(sent.is_ok());
  INFO(got.status().to_string());
  REQUIRE(got);
  CHECK(got->body == big);

  // Over the body limit when sending: refused before a byte goes out.
  const Status too_big = a.send(std::string(kMaxMessageBytes + 1, 'x'));
  INFO(too_big.to_string());
  CHECK(too_big.code() == StatusCode::invalid_argument);
  CHECK(contains(too_big.message(), "over the limit"));
  CHECK(b.receive(50ms).status().code() == StatusCode::busy);
  // Too many descriptors when sending: likewise.
  UniqueFd memfd = memfd_with("x");
  const Status too_many = a.send("x", std::vector<int>(kMaxMessageFds + 1, memfd.get()));
  CHECK(too_many.code() == StatusCode::invalid_argument);
  CHECK(b.receive(50ms).status().code() == StatusCode::busy);

  // A peer that announces more: refused, and the connection, now out of step, is shut down.
  send_raw(a.fd(), frame_header(static_cast<std::uint32_t>(kMaxMessageBytes) + 1));
  const Status announced = b.receive(1s).status();
  INFO(announced.to_string());
  CHECK(announced.code() == StatusCode::invalid_argument);
  CHECK(contains(announced.message(), "over the limit"));
  auto closed = a.wait_closed(1s);
  REQUIRE(closed);
  CHECK(*closed);
}

TEST_CASE("a peer that sends too many descriptors is refused and none of them stays open here", "[ipc]") {
  UniqueFd memfd = memfd_with("x");
  SECTION("more than fit one message's control buffer") {
    auto [a, b] = connected_pair();
    const std::size_t before = open_descriptors();
    send_raw(a.fd(), frame_header(1) + "x", std::vector<int>(kMaxMessageFds + 1, memfd.get()));
    const Status st = b.receive(1s).status();
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::invalid_argument);
    CHECK(contains(st.message(), "descriptors"));
    CHECK(open_descriptors() == before);
  }
  SECTION("within the limit on each piece, over it together") {
    auto [a, b] = connected_pair();
    const std::size_t before = open_descriptors();
    const std::vector<int> half(kMaxMessageFds / 2 + 1, memfd.get());
    send_raw(a.fd(), frame_header(1), half);
    send_raw(a.fd(), "x", half);
    const Status st = b.receive(1s).status();
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::invalid_argument);
    CHECK(open_descriptors() == before);
  }
  SECTION("exactly the limit is fine") {
    auto [a, b] = connected_pair();
    REQUIRE(a.send("x", std::vector<int>(kMaxMessageFds, memfd.get())).is_ok());
    auto got = b.receive(1s);
    INFO(got.status().to_string());
    REQUIRE(got);
    CHECK(got->fds.size() == kMaxMessageFds);
  }
}

TEST_CASE("a peer that goes away is not_found and never SIGPIPE, and silence is busy after the timeout", "[ipc]") {
  SECTION("closed between messages") {
    auto [a, b] = connected_pair();
    a = Connection();
    const Status st = b.receive(1s).status();
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::not_found);
    CHECK(contains(st.message(), "closed"));
    // Without MSG_NOSIGNAL this send would kill the test process.
    CHECK(b.send("anyone there?").code() == StatusCode::not_found);
  }
  SECTION("closed in the middle of a message") {
    auto [a, b] = connected_pair();
    send_raw(a.fd(), frame_header(100) + "only ten..");
    a = Connection();
    const Status st = b.receive(1s).status();
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::not_found);
    CHECK(contains(st.message(), "middle of a message"));
  }
  SECTION("silent: busy after the timeout, and the connection still works") {
    auto [a, b] = connected_pair();
    const auto start = std::chrono::steady_clock::now();
    const Status st = b.receive(150ms).status();
    const auto waited = std::chrono::steady_clock::now() - start;
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::busy);
    CHECK(waited >= 150ms);
    CHECK(waited < 5s);
    REQUIRE(a.send("late").is_ok());
    auto got = b.receive(1s);
    REQUIRE(got);
    CHECK(got->body == "late");
  }
  SECTION("silent in the middle of a message: busy, and the connection is shut down") {
    auto [a, b] = connected_pair();
    send_raw(a.fd(), frame_header(10) + "abc");
    const Status st = b.receive(100ms).status();
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::busy);
    CHECK(contains(st.message(), "part of a message"));
    auto closed = a.wait_closed(1s);
    REQUIRE(closed);
    CHECK(*closed);
  }
  SECTION("a closed Connection refuses calls") {
    Connection none;
    CHECK(none.send("x").code() == StatusCode::invalid_argument);
    CHECK(none.receive(1ms).status().code() == StatusCode::invalid_argument);
  }
}

TEST_CASE("wait_closed tells a peer that closed from one that sent something, and consumes nothing", "[ipc]") {
  auto [a, b] = connected_pair();
  CHECK(b.wait_closed(50ms).status().code() == StatusCode::busy);

  UniqueFd memfd = memfd_with("kept");
  REQUIRE(a.send("still here", {memfd.get()}).is_ok());
  const std::size_t before = open_descriptors();
  auto closed = b.wait_closed(1s);
  REQUIRE(closed);
  CHECK_FALSE(*closed);
  CHECK(open_descriptors() == before);  // the peek installed no descriptor
  auto got = b.receive(1s);
  REQUIRE(got);
  CHECK(got->body == "still here");
  REQUIRE(got->fds.size() == 1);
  CHECK(read_fd(got->fds[0].get(), 16) == "kept");

  a = Connection();
  closed = b.wait_closed(1s);
  REQUIRE(closed);
  CHECK(*closed);
}

TEST_CASE("a second listener on a name is refused while another process serves it, naming that process",
          "[ipc][process]") {
  test::TempDir dir;
  test::ChildProcess donor(test::kStoreHelper, {"ipc-serve", dir.path(), "donor"});
  REQUIRE(donor.wait_for_line("listening"));
  CHECK(test::read_bytes(dir / "donor.lock") == std::to_string(donor.pid()) + "\n");

  auto second = Listener::listen_at(dir.path(), "donor");
  REQUIRE_FALSE(second);
  INFO(second.status().to_string());
  CHECK(second.status().code() == StatusCode::busy);
  CHECK(contains(second.status().message(), "(pid " + std::to_string(donor.pid()) + ")"));
  CHECK(contains(second.status().message(), "stop it first"));

  // The first still serves at the same socket: the refused one touched nothing.
  auto client = connect_to(dir / "donor", 2s);
  INFO(client.status().to_string());
  REQUIRE(client);
  auto who = client->peer();
  REQUIRE(who);
  CHECK(who->pid == donor.pid());
  UniqueFd memfd = memfd_with("echoed");
  REQUIRE(client->send("ping", {memfd.get()}).is_ok());
  auto echo = client->receive(5s);
  INFO(echo.status().to_string());
  REQUIRE(echo);
  CHECK(echo->body == "ping");
  REQUIRE(echo->fds.size() == 1);
  CHECK(same_file(echo->fds[0].get(), memfd.get()));
}

TEST_CASE("a donor killed with SIGKILL leaves a stale socket, which connect_to names and the next listener replaces",
          "[ipc][process]") {
  test::TempDir dir;
  const std::string path = dir / "donor";
  {
    test::ChildProcess donor(test::kStoreHelper, {"ipc-serve", dir.path(), "donor"});
    REQUIRE(donor.wait_for_line("listening"));
    donor.kill_now();
  }
  REQUIRE(test::path_exists(path));  // nobody removed it

  auto stale = connect_to(path, 1s);
  REQUIRE_FALSE(stale);
  INFO(stale.status().to_string());
  CHECK(stale.status().code() == StatusCode::not_found);
  CHECK(contains(stale.status().message(), "stale socket at " + path));

  auto listener = Listener::listen_at(dir.path(), "donor");
  INFO(listener.status().to_string());
  REQUIRE(listener);
  CHECK(test::read_bytes(path + ".lock") == std::to_string(::getpid()) + "\n");
  auto client = connect_to(path, 1s);
  INFO(client.status().to_string());
  REQUIRE(client);
  auto server = listener->accept(1s);
  REQUIRE(server);
  REQUIRE(client->send("hello again").is_ok());
  auto got = server->receive(1s);
  REQUIRE(got);
  CHECK(got->body == "hello again");

  listener->close();
  CHECK_FALSE(test::path_exists(path));
  CHECK(test::path_exists(path + ".lock"));  // kept on purpose: see Listener::close
  CHECK(connect_to(path, 1s).status().code() == StatusCode::not_found);
}

TEST_CASE("a file that is not a socket at the socket's path is refused and left in place", "[ipc]") {
  test::TempDir dir;
  const std::string path = dir / "donor";
  test::write_bytes(path, "not yours to delete");
  auto listener = Listener::listen_at(dir.path(), "donor");
  REQUIRE_FALSE(listener);
  INFO(listener.status().to_string());
  CHECK(listener.status().code() == StatusCode::foreign);
  CHECK(contains(listener.status().message(), "not a socket"));
  CHECK(test::read_bytes(path) == "not yours to delete");

  auto client = connect_to(path, 1s);
  REQUIRE_FALSE(client);
  INFO(client.status().to_string());
  CHECK(client.status().code() == StatusCode::not_found);
  CHECK(contains(client.status().message(), "not a socket"));

  // And the failed listener left the name free.
  test::remove_path(path);
  CHECK(Listener::listen_at(dir.path(), "donor").is_ok());
}

TEST_CASE("connect_to where nothing listens is not_found, and names and paths a socket cannot have are refused",
          "[ipc]") {
  test::TempDir dir;
  auto none = connect_to(dir / "nobody", 1s);
  REQUIRE_FALSE(none);
  INFO(none.status().to_string());
  CHECK(none.status().code() == StatusCode::not_found);
  CHECK(contains(none.status().message(), "no donor listens at " + dir / "nobody"));

  const std::string long_name(120, 'n');
  auto too_long = connect_to(dir / long_name, 1s);
  REQUIRE_FALSE(too_long);
  INFO(too_long.status().to_string());
  CHECK(too_long.status().code() == StatusCode::invalid_argument);
  CHECK(contains(too_long.status().message(), "at most 107"));
  auto listener = Listener::listen_at(dir.path(), long_name);
  CHECK(listener.status().code() == StatusCode::invalid_argument);
  CHECK(test::count_entries(dir.path()) == 0);  // refused before any file was made

  for (const std::string bad : {"", ".", "..", "a/b"}) {
    INFO("name '" << bad << "'");
    CHECK(Listener::listen_at(dir.path(), bad).status().code() == StatusCode::invalid_argument);
  }
}

TEST_CASE("accept waits for its timeout, and a listener moved or closed removes its socket once and keeps the "
          "lock file",
          "[ipc]") {
  test::TempDir dir;
  const std::string path = dir / "donor";
  auto first = Listener::listen_at(dir.path(), "donor");
  INFO(first.status().to_string());
  REQUIRE(first);

  const auto start = std::chrono::steady_clock::now();
  const Status st = first->accept(120ms).status();
  const auto waited = std::chrono::steady_clock::now() - start;
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::busy);
  CHECK(waited >= 120ms);

  std::optional<Listener> moved(std::move(*first));
  first = Status(StatusCode::not_found, "gone");  // destroys the moved-from listener
  CHECK(test::path_exists(path));
  Listener assigned;
  assigned = std::move(*moved);
  moved.reset();
  CHECK(test::path_exists(path));
  REQUIRE(connect_to(path, 1s).is_ok());
  CHECK(assigned.accept(1s).is_ok());

  assigned.close();
  CHECK_FALSE(test::path_exists(path));
  CHECK(test::path_exists(path + ".lock"));
  CHECK(assigned.accept(1ms).status().code() == StatusCode::invalid_argument);
  assigned.close();  // twice is harmless

  // The lock went with the close: the name is free again.
  auto again = Listener::listen_at(dir.path(), "donor");
  INFO(again.status().to_string());
  CHECK(again);
}

TEST_CASE("connect_to a listener whose queue is full gives up after its timeout with busy", "[ipc]") {
  test::TempDir dir;
  auto listener = Listener::listen_at(dir.path(), "donor");
  REQUIRE(listener);
  // Nobody accepts: the queue fills after about the backlog (64), and then a connect() waits for
  // room, which only the timeout ends.
  std::vector<Connection> queued;
  std::optional<Status> refused;
  std::chrono::steady_clock::duration waited{};
  for (int i = 0; i < 200 && !refused; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto client = connect_to(listener->path(), 100ms);
    waited = std::chrono::steady_clock::now() - start;
    if (client) queued.push_back(std::move(*client));
    else refused = client.status();
  }
  REQUIRE(refused);
  INFO(refused->to_string() << " after " << queued.size() << " queued connections");
  CHECK(refused->code() == StatusCode::busy);
  CHECK(contains(refused->message(), "queue of connections is full"));
  CHECK(waited >= 100ms);
  CHECK(queued.size() >= 64);
  // Connections that did get through still work, and accepting one makes room for the next.
  REQUIRE(listener->accept(1s));
  auto next = connect_to(listener->path(), 1s);
  INFO(next.status().to_string());
  CHECK(next);
}

TEST_CASE("peers of another user are refused at both ends", "[ipc][process][root]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: a peer of another user needs root to switch users");
    return;
  }
  test::TempDir dir;
  // Below, uid 65534 is let through the test's directory by hand: the private-directory rule is
  // what normally keeps another user away, and this test is about the check behind it.
  SECTION("a listener refuses a client of another user") {
    auto listener = Listener::listen_at(dir.path(), "donor");
    INFO(listener.status().to_string());
    REQUIRE(listener);
    REQUIRE(::chmod(dir.path().c_str(), 0711) == 0);
    REQUIRE(::chmod(listener->path().c_str(), 0666) == 0);
    test::ChildProcess client(test::kStoreHelper, {"ipc-connect", listener->path(), std::to_string(kNobody)});
    const Status st = listener->accept(5s).status();
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::permission_denied);
    CHECK(contains(st.message(), "runs as uid 65534"));
    // And the client, as uid 65534, refused this (root) donor from its side.
    CHECK(client.wait_for_line("result permission_denied"));
    CHECK(client.wait() == 1);
  }
  SECTION("connect_to refuses a donor of another user") {
    REQUIRE(::chmod(dir.path().c_str(), 0711) == 0);
    const std::string theirs = dir / "theirs";
    REQUIRE(::mkdir(theirs.c_str(), 0700) == 0);
    REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
    test::ChildProcess donor(test::kStoreHelper, {"ipc-serve", theirs, "donor", std::to_string(kNobody)});
    REQUIRE(donor.wait_for_line("listening"));
    auto client = connect_to(theirs + "/donor", 2s);
    REQUIRE_FALSE(client);
    INFO(client.status().to_string());
    CHECK(client.status().code() == StatusCode::permission_denied);
    CHECK(contains(client.status().message(), "(pid " + std::to_string(donor.pid()) + ") runs as uid 65534"));
  }
}

TEST_CASE("a send to a peer that never reads gives up after the limit set for it", "[ipc]") {
  auto [a, b] = connected_pair();
  REQUIRE(a.limit_send_time(100ms).is_ok());
  const std::string big(8u << 20, 'x');  // far more than the socket buffers hold
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = a.send(big);
  CHECK(!st.is_ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  (void)b;
}
