#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace snapcache::test {

// A real second process running a test helper: kStoreHelper (store_helper_main.cpp, no torch).
class ChildProcess {
 public:
  ChildProcess(const std::string& program, const std::vector<std::string>& helper_args);
  ~ChildProcess();  // kills the child if it still runs
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Blocks until the child prints a line starting with `marker` on stdout; false on EOF.
  bool wait_for_line(const std::string& marker);
  // The line wait_for_line matched, or the last line it read when it found none.
  const std::string& last_line() const { return last_line_; }
  void kill_now();   // SIGKILL, then reap
  int wait();        // exit code, or 128+signal

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  std::string last_line_;
  int status_ = -1;
};

// Runs the helper to completion; returns its exit code.
int run_helper(const std::string& program, const std::vector<std::string>& helper_args);

// The tests' helper process: publish, load or hold raw storages (see store_helper_main.cpp).
#ifdef SNAPCACHE_STORE_HELPER
inline constexpr const char* kStoreHelper = SNAPCACHE_STORE_HELPER;
#endif

}  // namespace snapcache::test
