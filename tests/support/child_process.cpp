#include "support/child_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

extern char** environ;

namespace snapcache::test {

ChildProcess::ChildProcess(const std::string& program, const std::vector<std::string>& helper_args) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> args{program};
  args.insert(args.end(), helper_args.begin(), helper_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = ::posix_spawn(&pid_, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  out_fd_ = fds[0];
  if (rc != 0) throw std::runtime_error("posix_spawn failed");
}

ChildProcess::~ChildProcess() {
  if (status_ < 0 && pid_ > 0) kill_now();
  if (out_fd_ >= 0) ::close(out_fd_);
}

bool ChildProcess::wait_for_line(const std::string& marker) {
  for (;;) {
    std::size_t pos;
    while ((pos = buffer_.find('\n')) != std::string::npos) {
      last_line_ = buffer_.substr(0, pos);
      buffer_.erase(0, pos + 1);
      if (last_line_.rfind(marker, 0) == 0) return true;
    }
    char buf[4096];
    ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<std::size_t>(n));
  }
}

void ChildProcess::kill_now() {
  if (status_ >= 0) return;
  ::kill(pid_, SIGKILL);
  wait();
}

int ChildProcess::wait() {
  if (status_ >= 0) return status_;
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0) {
  }
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

int run_helper(const std::string& program, const std::vector<std::string>& helper_args) {
  ChildProcess child(program, helper_args);
  return child.wait();
}

}  // namespace snapcache::test
