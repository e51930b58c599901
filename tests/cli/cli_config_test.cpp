// snapcache config: the effective settings and where each came from.
#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"

using namespace snapcache;
using namespace snapcache::test;

TEST_CASE("cli config says whether each value is a default or from the environment a file or a flag",
          "[cli][config]") {
  TempDir dir;
  const std::string file = dir / "snapcache.conf";
  write_bytes(file, "# operator settings\nreserve = 3GiB\ncapacity = 10GiB   # overridden by the environment\n");

  auto run = run_cli({"config", "--json", "--config", file, "--dir", dir.path()}, {"SNAPCACHE_CAPACITY_GIB=2"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  const auto& s = j["settings"];
  CHECK(s["directory"]["value"] == dir.path());
  CHECK(s["directory"]["source"] == "flag");
  CHECK(s["directory"]["origin"] == "--dir");
  CHECK(s["capacity_bytes"]["value"] == 2 * kGiB);
  CHECK(s["capacity_bytes"]["source"] == "environment");
  CHECK(s["capacity_bytes"]["origin"] == "SNAPCACHE_CAPACITY_GIB");
  CHECK(s["reserve_bytes"]["value"] == 3 * kGiB);
  CHECK(s["reserve_bytes"]["source"] == "file");
  CHECK(s["reserve_bytes"]["origin"] == file);
  CHECK(s["enabled"]["value"] == true);
  CHECK(s["enabled"]["source"] == "default");
  CHECK(s["enabled"]["origin"].is_null());
  CHECK(j["config_file"] == file);

  // The same file found through SNAPCACHE_CONFIG, in text.
  auto text = run_cli({"config"}, {"SNAPCACHE_CONFIG=" + file, "SNAPCACHE_DISABLE=1"});
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(contains(text.out, "reserve"));
  CHECK(contains(text.out, "3.0 GiB"));
  CHECK(contains(text.out, "file (" + file + ")"));
  CHECK(contains(text.out, "environment (SNAPCACHE_DISABLE)"));
  CHECK(contains(text.out, "default"));

  // A bad file is named with its line.
  write_bytes(file, "capacity = 10GiB\ncapasity = 3\n");
  auto bad = run_cli({"config", "--config", file});
  CHECK(bad.exit_code == 5);
  CHECK(contains(bad.err, file + ":2"));
  CHECK(contains(bad.err, "capasity"));
  auto missing = run_cli({"config", "--config", dir / "nope.conf"});
  CHECK(missing.exit_code == 5);
  CHECK(contains(missing.err, "nope.conf"));
}

TEST_CASE("cli without a usable HOME has no default cache, and says what to set", "[cli][config]") {
  // HOME unset, empty, and a relative path (which would put the cache wherever the command runs).
  for (const std::string& home : {std::string("HOME"), std::string("HOME="), std::string("HOME=relative")}) {
    INFO(home);
    auto ls = run_cli({"ls"}, {home});
    INFO(ls.out << ls.err);
    CHECK(ls.exit_code == 5);
    CHECK(contains(ls.err, "snapcache: no cache directory: HOME "));
    CHECK(contains(ls.err, "set SNAPCACHE_DIR to an absolute path"));
    CHECK_FALSE(contains(ls.err, "/tmp/snapcache"));

    // A command that would make the cache (import) is refused the same way.
    auto import = run_cli({"import", "/nonexistent/archive.snapcache"}, {home});
    CHECK(import.exit_code == 5);
    CHECK(contains(import.err, "no cache directory: HOME "));

    auto text = run_cli({"config"}, {home});
    CHECK(text.exit_code == 0);
    CHECK(contains(text.out, "none"));
    CHECK(contains(text.out, "set SNAPCACHE_DIR to an absolute path"));
    auto json = run_cli({"config", "--json"}, {home});
    CHECK(json.exit_code == 0);
    const auto directory = json.json()["settings"]["directory"];
    CHECK(directory["value"].is_null());
    CHECK(contains(directory["why_none"].get<std::string>(), "no cache directory: HOME "));
  }
  // SNAPCACHE_DIR, or an absolute XDG_CACHE_HOME, names the cache without a home.
  TempDir dir;
  auto named = run_cli({"config", "--json"}, {"HOME", "SNAPCACHE_DIR=" + dir.path()});
  CHECK(named.json()["settings"]["directory"]["value"] == dir.path());
  auto xdg = run_cli({"config", "--json"}, {"HOME", "XDG_CACHE_HOME=" + dir.path()});
  CHECK(xdg.json()["settings"]["directory"]["value"] == dir / "snapcache");
  auto relative_xdg = run_cli({"ls"}, {"HOME", "XDG_CACHE_HOME=cache"});
  CHECK(relative_xdg.exit_code == 5);
  CHECK(contains(relative_xdg.err, "XDG_CACHE_HOME='cache' is not an absolute path"));
}

TEST_CASE("cli config reads a settings file that starts with a byte-order mark, and shows one elsewhere",
          "[cli][config]") {
  TempDir dir;
  const std::string file = dir / "snapcache.conf";
  write_bytes(file, "\xef\xbb\xbf" "capacity = 10GiB\n");
  auto run = run_cli({"config", "--json", "--config", file});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(run.json()["settings"]["capacity_bytes"]["value"] == 10 * kGiB);
  CHECK(run.json()["settings"]["capacity_bytes"]["source"] == "file");

  // Anywhere else it is an invisible character in a name: the error shows it.
  write_bytes(file, "capacity = 10GiB\n\xef\xbb\xbfreserve = 2GiB\n");
  auto bad = run_cli({"config", "--config", file});
  INFO(bad.err);
  CHECK(bad.exit_code == 5);
  CHECK(contains(bad.err, file + ":2: unknown setting '\\ufeffreserve'"));
  CHECK_FALSE(contains(bad.err, "\xef\xbb\xbf"));
}
