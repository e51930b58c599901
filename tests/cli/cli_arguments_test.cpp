// Bad arguments give a message and a non-zero exit, never a crash; every command has --help.
#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"

using namespace snapcache;
using namespace snapcache::test;

TEST_CASE("cli bad arguments give a message and exit code 2", "[cli][arguments]") {
  Cache cache;
  cache.publish(51);
  const std::vector<std::vector<std::string>> bad = {
      {"nosuchcommand"},
      {"ls", "--bogus"},
      {"ls", "extra"},
      {"inspect"},
      {"inspect", "not-hex!"},
      {"verify", "--all", "abc"},
      {"evict"},
      {"evict", "--older-than", "soon"},
      {"evict", "--older-than", "-3d"},
      {"evict", "--to-size", "lots"},
      {"evict", "--to-size", "12XB"},
      {"evict", "--all", "abcdef"},
      {"evict", "--all", "--to-size", "1GiB"},
      {"gc", "--grace", "forever"},
      {"stats", "--zero=maybe"},
      {"why", "a", "b"},
  };
  for (const auto& args : bad) {
    auto run = run_cli(with_dir(cache, args));
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    INFO(joined << "\nstdout: " << run.out << "\nstderr: " << run.err);
    CHECK(run.exit_code == 2);
    CHECK_FALSE(run.err.empty());
  }
  // Nothing was harmed.
  CHECK(count_entries(cache.path() + "/entries") == 1);
}

TEST_CASE("cli problems with the cache or the configuration have their own exit codes", "[cli][arguments]") {
  TempDir dir;
  auto missing = run_cli({"ls", "--dir", dir / "no-cache-here"});
  CHECK(missing.exit_code == 3);
  CHECK(contains(missing.err, "does not exist"));
  CHECK_FALSE(path_exists(dir / "no-cache-here"));  // looking never creates a cache

  auto config = run_cli({"stats"}, {"SNAPCACHE_CAPACITY_GIB=lots"});
  CHECK(config.exit_code == 5);
  CHECK(contains(config.err, "SNAPCACHE_CAPACITY_GIB"));

  write_bytes(dir / "file", "x");
  auto not_dir = run_cli({"ls", "--dir", dir / "file"});
  CHECK(not_dir.exit_code == 5);
  CHECK(contains(not_dir.err, "not a directory"));
}

TEST_CASE("cli every command has help and the tool has a version", "[cli][arguments]") {
  for (const char* command : {"ls", "inspect", "verify", "evict", "gc", "stats", "config", "why"}) {
    auto run = run_cli({command, "--help"});
    INFO(command << ": " << run.out << run.err);
    CHECK(run.exit_code == 0);
    CHECK(contains(run.out, command));
    CHECK(contains(run.out, "--dir"));
  }
  for (const char* command : {"ls", "inspect", "verify", "evict", "gc", "stats", "config", "why"}) {
    auto run = run_cli({command, "--help"});
    CHECK(contains(run.out, "--json"));
  }
  auto top = run_cli({"--help"});
  CHECK(top.exit_code == 0);
  CHECK(contains(top.out, "Exit codes"));
  auto none = run_cli({});
  CHECK(none.exit_code == 0);
  CHECK(contains(none.out, "verify"));
  auto version = run_cli({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(contains(version.out, "snapcache "));
}

namespace {

// Every line on stderr is an error line, "snapcache: ...", or a detail indented under one.
void check_error_lines(const std::string& err) {
  INFO("stderr: " << err);
  CHECK(err.starts_with("snapcache: "));
  std::size_t start = 0;
  while (start < err.size()) {
    std::size_t end = err.find('\n', start);
    if (end == std::string::npos) end = err.size();
    const std::string line = err.substr(start, end - start);
    CHECK((line.starts_with("snapcache: ") || line.starts_with("  ")));
    start = end + 1;
  }
}

}  // namespace

TEST_CASE("cli an unknown command is named as one, with the nearest command when one is close",
          "[cli][arguments]") {
  Cache cache;
  const std::vector<std::pair<std::string, std::string>> typed = {
      {"lss", "ls"},       {"sl", "ls"},          {"inspct", "inspect"}, {"VERIFY", "verify"},
      {"evcit", "evict"},  {"stat", "stats"},     {"confg", "config"},   {"hlep", "help"},
      {"exprot", "export"}, {"imports", "import"}, {"donor", "donors"},
  };
  for (const auto& [word, meant] : typed) {
    INFO(word);
    auto run = run_cli(with_dir(cache, {word}));
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    CHECK(run.err.starts_with("snapcache: unknown command '" + word + "' (did you mean '" + meant + "'?)"));
    check_error_lines(run.err);
  }
  // Nothing close: no guess.
  for (const std::string word : {"xyzzy", "frobnicate", "q", "cleanup"}) {
    INFO(word);
    auto run = run_cli(with_dir(cache, {word}));
    CHECK(run.exit_code == 2);
    CHECK(run.err.starts_with("snapcache: unknown command '" + word + "'"));
    CHECK_FALSE(contains(run.err, "did you mean"));
    check_error_lines(run.err);
  }
  // The exact message of the common case, and the same answer from `help`.
  auto lss = run_cli({"lss"});
  CHECK(lss.err == "snapcache: unknown command 'lss' (did you mean 'ls'?); `snapcache --help` lists the commands\n");
  auto help = run_cli({"help", "lss"});
  CHECK(help.exit_code == 2);
  CHECK(help.err == lss.err);
}

TEST_CASE("cli every error, CLI11's parse errors included, starts with 'snapcache: '", "[cli][arguments]") {
  Cache cache;
  cache.publish(52);
  const std::vector<std::vector<std::string>> bad = {
      {"--bogus"},        {"ls", "--bogus"},        {"ls", "extra"},       {"inspect"},
      {"inspect", "zz"},  {"verify", "--all", "ab"}, {"evict", "--to-size", "lots"},
      {"gc", "--grace"},  {"stats", "--zero=maybe"}, {"why", "a", "b"},     {"inspect", "ffffffffffff"},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    INFO(joined);
    auto run = run_cli(with_dir(cache, args));
    CHECK(run.exit_code != 0);
    check_error_lines(run.err);
    CHECK_FALSE(contains(run.err, "Run with --help"));
  }
  // A parse error names the command and where its options are listed.
  auto extra = run_cli(with_dir(cache, {"ls", "extra"}));
  CHECK(extra.err.starts_with("snapcache: ls: the following argument was not expected: extra"));
  CHECK(contains(extra.err, "`snapcache ls --help`"));
  // So do the errors that are not about arguments.
  TempDir dir;
  check_error_lines(run_cli({"ls", "--dir", dir / "no-cache-here"}).err);
  check_error_lines(run_cli({"stats"}, {"SNAPCACHE_CAPACITY_GIB=lots"}).err);
}

TEST_CASE("cli help points to help that ships, and names the command as `snapcache`", "[cli][arguments]") {
  auto top = run_cli({"--help"});
  INFO(top.out);
  CHECK(top.exit_code == 0);
  // A wheel ships no docs/ and keeps the binary deep in site-packages.
  CHECK_FALSE(contains(top.out, "docs/"));
  CHECK(top.out.starts_with("snapcache: "));  // the description, then the usage line
  CHECK(contains(top.out, "\nUsage: snapcache [OPTIONS] [SUBCOMMAND]"));
  CHECK_FALSE(contains(top.out, SNAPCACHE_CLI));
  CHECK(contains(top.out, "`snapcache help COMMAND`"));
  CHECK(contains(top.out, "`snapcache COMMAND --help`"));
  for (const char* command : {"ls", "inspect", "verify", "evict", "gc", "stats", "config", "why", "donors", "export",
                              "import", "keygen"}) {
    INFO(command);
    auto run = run_cli({command, "--help"});
    CHECK(run.exit_code == 0);
    CHECK(contains(run.out, std::string("Usage: snapcache ") + command + " "));
    CHECK_FALSE(contains(run.out, "docs/"));
    CHECK_FALSE(contains(run.out, SNAPCACHE_CLI));
    // `snapcache help COMMAND` says the same.
    auto help = run_cli({"help", command});
    CHECK(help.exit_code == 0);
    CHECK(help.out == run.out);
  }
  auto help = run_cli({"help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out == top.out);
}
