// Progress on a terminal: the commands that can take a while (verify, export, import, gc) draw one
// line on stderr, rewritten with \r and cleared at the end, only when stderr is a terminal; never
// into a pipe, a file or --json.
#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"

using namespace snapcache;
using namespace snapcache::test;

namespace {

const std::string kClearLine = "\r\033[K";

// The line was drawn and then cleared: what a person saw go by and what stays on the screen.
void check_drawn_and_cleared(const CliRun& run, const std::string& words) {
  INFO(run.err);
  CHECK(contains(run.err, "\r"));
  CHECK(contains(run.err, words));
  CHECK(run.err.rfind(kClearLine) != std::string::npos);
  // Nothing of the line stays after the last clear but the command's own lines.
  const std::string after = run.err.substr(run.err.rfind(kClearLine) + kClearLine.size());
  CHECK_FALSE(contains(after, words));
}

void check_no_progress(const CliRun& run) {
  INFO(run.out << run.err);
  CHECK_FALSE(contains(run.out + run.err, "\r"));
  CHECK_FALSE(contains(run.out + run.err, "\033["));
}

}  // namespace

TEST_CASE("cli export import verify and gc show progress on a terminal's stderr and never into a pipe",
          "[cli][progress]") {
  Cache cache;
  cache.publish(70, 2);
  cache.publish(71, 1);
  TempDir work;
  const std::string archive = work / "all.snapcache";

  // stdout a pipe, stderr a terminal: the line goes where the person looks.
  auto exported = run_cli_with_terminal_stderr(with_dir(cache, {"export", "--all", "-o", archive}));
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  check_drawn_and_cleared(exported, "entry 1 of 2");
  CHECK(contains(exported.out, "2 entries of"));
  CHECK_FALSE(contains(exported.out, "\r"));

  // Unsigned, and taken as such: what is tested here is the progress line.
  Cache other;
  auto imported = run_cli_with_terminal_stderr({"--dir", other.path(), "import", archive, "--trust-unsigned"});
  INFO(imported.out << imported.err);
  REQUIRE(imported.exit_code == 0);
  check_drawn_and_cleared(imported, "of the archive read");
  CHECK(contains(imported.err, "%"));  // a file's size is known: a bar with a percentage
  CHECK(contains(imported.out, "2 imported"));

  auto verified = run_cli_with_terminal_stderr(with_dir(cache, {"verify"}));
  REQUIRE(verified.exit_code == 0);
  check_drawn_and_cleared(verified, "/s");
  CHECK(contains(verified.out, "2 entries verified"));

  auto collected = run_cli_with_terminal_stderr(with_dir(cache, {"gc", "--dry-run"}));
  REQUIRE(collected.exit_code == 0);
  check_drawn_and_cleared(collected, "looking for garbage");

  // Pipes, as a script or a test captures output: no progress at all.
  check_no_progress(run_cli(with_dir(cache, {"export", "--all", "-o", work / "piped.snapcache"})));
  Cache third;
  check_no_progress(run_cli({"--dir", third.path(), "import", archive, "--trust-unsigned"}));
  check_no_progress(run_cli(with_dir(cache, {"verify"})));
  check_no_progress(run_cli(with_dir(cache, {"gc", "--dry-run"})));

  // --json on a terminal: the output is for a program, and so is stderr.
  for (const auto& args : std::vector<std::vector<std::string>>{{"verify", "--json"}, {"gc", "--json"},
                                                                {"export", "--all", "--json", "-o", work / "j.snapcache"}}) {
    auto run = run_cli_with_terminal_stderr(with_dir(cache, args));
    INFO(args[0]);
    CHECK(run.exit_code == 0);
    check_no_progress(run);
    CHECK_FALSE(run.json().empty());
  }
}
