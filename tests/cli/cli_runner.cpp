#include "cli_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "support/catch.h"
#include "support/env_guard.h"

extern char** environ;

namespace snapcache::test {
namespace {

// Every variable that can change a Config (EnvGuard's list, and any SNAPCACHE_*) is left out;
// settings-file and default-directory lookups point nowhere. `extra` comes last, each NAME=value
// replacing the variable of that name, and a bare NAME removing it.
std::vector<std::string> environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string var = *e;
    const std::string name = var.substr(0, var.find('='));
    const auto& isolated = EnvGuard::isolated_names();
    if (name.starts_with("SNAPCACHE_") || std::find(isolated.begin(), isolated.end(), name) != isolated.end()) continue;
    env.push_back(var);
  }
  env.push_back("XDG_CONFIG_HOME=/nonexistent/snapcache-cli-test-config");
  env.push_back("HOME=/nonexistent/snapcache-cli-test-home");
  for (const std::string& var : extra) {
    const std::string name = var.substr(0, var.find('='));
    std::erase_if(env, [&](const std::string& e) { return e.substr(0, e.find('=')) == name; });
    if (var.find('=') != std::string::npos) env.push_back(var);
  }
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t spawn(const std::string& program, const std::vector<std::string>& args, const std::vector<std::string>& env,
            posix_spawn_file_actions_t* actions) {
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = env;
  auto argv = pointers(argv_s);
  auto envp = pointers(env_s);
  pid_t pid = -1;
  if (::posix_spawn(&pid, argv_s[0].c_str(), actions, nullptr, argv.data(), envp.data()) != 0)
    throw std::runtime_error("posix_spawn " + argv_s[0]);
  return pid;
}

int reap(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace

nlohmann::json CliRun::json() const {
  auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  INFO("stdout: " << out << "\nstderr: " << err);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

CliRun run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  return run_program(SNAPCACHE_CLI, args, env);
}

CliRun run_program(const std::string& program, const std::vector<std::string>& args,
                   const std::vector<std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = spawn(program, args, environment(env), &actions);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  CliRun run;
  // Both pipes at once: a child that fills one while we wait on the other would never finish.
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open = 2;
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[8192];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  run.exit_code = reap(pid);
  return run;
}

CliRun run_cli_on_terminal(const std::vector<std::string>& args) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) throw std::runtime_error("pty");
  const char* name = ::ptsname(master);
  if (name == nullptr) throw std::runtime_error("ptsname");
  // Our own slave descriptor keeps the terminal open: without it, reading the master fails with
  // EIO whenever the child has not opened its side yet, or has already closed it.
  int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) throw std::runtime_error("open pty slave");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, slave, 1);
  posix_spawn_file_actions_adddup2(&actions, slave, 2);
  pid_t pid = spawn(SNAPCACHE_CLI, args, environment({}), &actions);
  posix_spawn_file_actions_destroy(&actions);
  CliRun run;
  bool exited = false;
  int status = 0;
  for (;;) {
    pollfd p{master, POLLIN, 0};
    int ready = ::poll(&p, 1, exited ? 0 : 50);
    if (ready > 0) {
      char buf[8192];
      ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0) {
        run.out.append(buf, static_cast<std::size_t>(n));
        continue;
      }
    }
    if (exited) break;  // and drained
    if (::waitpid(pid, &status, WNOHANG) == pid) exited = true;
  }
  ::close(slave);
  ::close(master);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

CliRun run_cli_with_terminal_stderr(const std::vector<std::string>& args) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) throw std::runtime_error("pty");
  const char* name = ::ptsname(master);
  if (name == nullptr) throw std::runtime_error("ptsname");
  int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);  // kept open: see run_cli_on_terminal
  if (slave < 0) throw std::runtime_error("open pty slave");
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, slave, 2);
  pid_t pid = spawn(SNAPCACHE_CLI, args, environment({}), &actions);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  CliRun run;
  bool exited = false, out_open = true;
  int status = 0;
  for (;;) {
    pollfd fds[2] = {{master, POLLIN, 0}, {out_open ? out_pipe[0] : -1, POLLIN, 0}};
    int ready = ::poll(fds, 2, exited ? 0 : 50);
    bool read_any = false;
    if (ready > 0) {
      char buf[8192];
      if (fds[0].revents & POLLIN) {
        ssize_t n = ::read(master, buf, sizeof buf);
        if (n > 0) {
          run.err.append(buf, static_cast<std::size_t>(n));
          read_any = true;
        }
      }
      if (out_open && fds[1].revents != 0) {
        ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
        if (n > 0) {
          run.out.append(buf, static_cast<std::size_t>(n));
          read_any = true;
        } else {
          out_open = false;
        }
      }
    }
    if (read_any) continue;
    if (exited && !out_open) break;  // and drained
    if (exited && ready <= 0) break;
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true;
  }
  ::close(out_pipe[0]);
  ::close(slave);
  ::close(master);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

}  // namespace snapcache::test
