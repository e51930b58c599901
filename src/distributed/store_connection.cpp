#include "distributed/store_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache::distributed {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// torch's constructor is given the time left; this much longer lets it report its own timeout
// before it is left behind.
constexpr milliseconds kReportGrace{250};
// Between two connection attempts while nothing listens yet (rank 0 still starting).
constexpr milliseconds kRetryDelay{50};

// One non-blocking connect to `addr`, waiting at most until `deadline`: 0, or the errno.
int connect_once(const addrinfo& addr, Deadline deadline) {
  const int fd = ::socket(addr.ai_family, addr.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, addr.ai_protocol);
  if (fd < 0) return errno;
  int error = 0;
  if (::connect(fd, addr.ai_addr, addr.ai_addrlen) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<milliseconds::rep>(time_left(deadline).count(), 1000)));
      socklen_t len = sizeof error;
      if (ready <= 0) error = ready == 0 ? ETIMEDOUT : errno;
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
    }
  }
  ::close(fd);
  return error;
}

// Connects (and disconnects) until something accepts at host:port or the deadline passes.
Status wait_for_listener(const std::string& host, std::uint16_t port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  const std::string service = std::to_string(port);
  std::string last = "no attempt";
  do {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    if (rc == EAI_NONAME || rc == EAI_SERVICE || rc == EAI_FAMILY)
      return Status(StatusCode::invalid_argument, fmt::format("cannot resolve {}: {}", host, ::gai_strerror(rc)));
    if (rc != 0) {
      last = ::gai_strerror(rc);
    } else {
      std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
      for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int error = connect_once(*a, deadline);
        if (error == 0) return Status::ok();
        last = std::strerror(error);
      }
    }
    std::this_thread::sleep_for(std::min(kRetryDelay, time_left(deadline)));
  } while (Clock::now() < deadline);
  return Status(StatusCode::io_error, fmt::format("nothing accepted a connection ({})", last));
}

// torch's constructor, on a thread the caller may leave behind.
struct Pending {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  c10::intrusive_ptr<c10d::TCPStore> store;
  Status status;
};

}  // namespace

milliseconds time_left(Deadline deadline) {
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

bool keys_set_by(c10d::Store& store, const std::vector<std::string>& keys, Deadline deadline) {
  std::chrono::microseconds pause(20);
  while (!store.check(keys)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(2));
  }
  return true;
}

Result<c10::intrusive_ptr<c10d::TCPStore>> open_tcp_store(const std::string& host, c10d::TCPStoreOptions options,
                                                          Deadline deadline) {
  if (!options.isServer) SNAPCACHE_RETURN_IF_ERROR(wait_for_listener(host, options.port, deadline));
  options.timeout = time_left(deadline);
  auto pending = std::make_shared<Pending>();
  std::thread([pending, host, options] {
    c10::intrusive_ptr<c10d::TCPStore> store;
    Status status = Status::ok();
    try {
      store = c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (...) {
      status = status_of_current_exception();
    }
    std::lock_guard<std::mutex> lock(pending->mutex);
    pending->store = std::move(store);
    pending->status = std::move(status);
    pending->done = true;
    pending->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(pending->mutex);
  if (!pending->done_cv.wait_until(lock, deadline + kReportGrace, [&] { return pending->done; }))
    return Status(StatusCode::io_error,
                  fmt::format("{}:{} accepted a connection but did not answer as a c10d store (is the port another "
                              "program's?)",
                              host, options.port));
  if (!pending->status) {
    const std::string& why = pending->status.message();
    if (options.isServer && why.find("EADDRINUSE") != std::string::npos)
      return Status(StatusCode::busy, fmt::format("port {} is in use by another process", options.port));
    return Status(pending->status.code(), why);
  }
  return std::move(pending->store);
}

}  // namespace snapcache::distributed
