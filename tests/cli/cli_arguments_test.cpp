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
