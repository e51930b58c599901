#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace snapcache::test {

// A real second process running the test helper (tests/support/helper_main.cpp).
class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& helper_args);
  ~ChildProcess();  // kills the child if it still runs
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Blocks until the child prints a line starting with `marker` on stdout; false on EOF.
  bool wait_for_line(const std::string& marker);
  void kill_now();   // SIGKILL, then reap
  int wait();        // exit code, or 128+signal

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  int status_ = -1;
};

// Runs the helper to completion; returns its exit code.
int run_helper(const std::vector<std::string>& helper_args);

}  // namespace snapcache::test
