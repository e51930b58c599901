// Runs the built `snapcache` binary as a separate process and captures what it says.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace snapcache::test {

struct CliRun {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
  // stdout parsed as JSON; fails the test with the output when it is not JSON.
  nlohmann::json json() const;
};

// `env` adds NAME=value pairs (or removes NAME, given bare) to an environment without SNAPCACHE_*
// variables, XDG_CACHE_HOME, and with XDG_CONFIG_HOME and HOME pointing nowhere, so no setting of
// the machine leaks in.
CliRun run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {});
// Another built program (snapcache-demo), the same way.
CliRun run_program(const std::string& program, const std::vector<std::string>& args,
                   const std::vector<std::string>& env = {});

// The same on a pseudo-terminal (stdout and stderr both), as an operator at a shell sees it.
CliRun run_cli_on_terminal(const std::vector<std::string>& args);
// stderr on a pseudo-terminal (in `err`), stdout into a pipe (in `out`): `snapcache export -o -
// | ...` or `snapcache verify > report.txt` typed at a shell.
CliRun run_cli_with_terminal_stderr(const std::vector<std::string>& args);

}  // namespace snapcache::test
