// snapcache-demo as README runs it, on the CPU: its work directory, and how it reports the load
// it makes without the cache to compare with.
#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"

using namespace snapcache;
using namespace snapcache::test;

TEST_CASE("demo creates its work directory with missing parents, and its comparison load says it runs without the cache",
          "[cli][demo]") {
  TempDir dir;
  const std::string work = dir / "not/there/yet";
  auto run = run_program(SNAPCACHE_DEMO, {"--work-dir", work, "--dir", dir / "cache", "--size-mib", "16", "--device", "cpu"});
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  bool checkpoint = false;
  for (const auto& name : list_names(work)) checkpoint |= name.ends_with(".safetensors");
  CHECK(checkpoint);
  CHECK(contains(run.out, "bit-identical"));
  // The first process and the restarted one each compare with a load without the cache, and say so.
  const std::string said = "load without the cache (for comparison): ";
  CHECK(run.out.find(said) != run.out.rfind(said));
  // Not as the library would log it, which reads like a failure.
  for (const std::string* text : {&run.out, &run.err}) {
    CHECK_FALSE(contains(*text, "ineligible"));
    CHECK_FALSE(contains(*text, "no cache store is configured"));
  }
  // The loads through the cache are still logged.
  CHECK(contains(run.err, "snapcache[info] load dit"));
}

TEST_CASE("demo says why it cannot make its work directory", "[cli][demo]") {
  TempDir dir;
  write_bytes(dir / "file", "x");
  auto under_file = run_program(SNAPCACHE_DEMO, {"--work-dir", dir / "file/work", "--dir", dir / "cache", "--device", "cpu"});
  CHECK(under_file.exit_code == 1);
  CHECK(contains(under_file.err, "snapcache-demo: "));
  CHECK(contains(under_file.err, "--work-dir: cannot create " + (dir / "file/work") + ": Not a directory"));
  auto is_file = run_program(SNAPCACHE_DEMO, {"--work-dir", dir / "file", "--dir", dir / "cache", "--device", "cpu"});
  CHECK(is_file.exit_code == 1);
  CHECK(contains(is_file.err, "--work-dir: " + (dir / "file") + " exists and is not a directory"));
}
