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
