// snapcache donors: the donor sockets of a directory, asked what they serve. Without a GPU here,
// the sockets are the test helper's (an echo server, which answers nothing a donor would) and a
// socket left behind by a killed helper; a real donor is listed in tests/gpu.
#include <sys/stat.h>

#include "cli_runner.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/temp_dir.h"

using namespace snapcache;
using namespace snapcache::test;

TEST_CASE("cli donors lists each socket, and says why one does not answer", "[cli][donors]") {
  TempDir dir;
  const std::string sockets = dir / "sockets";
  REQUIRE(::mkdir(sockets.c_str(), 0700) == 0);

  auto none = run_cli({"donors", "--socket-dir", sockets});
  INFO(none.out << none.err);
  CHECK(none.exit_code == 0);
  CHECK(none.out.find("no donors") != std::string::npos);

  // A socket that answers, but not as a donor; and a stale one whose server was killed.
  ChildProcess echo(kStoreHelper, {"ipc-serve", sockets, "GPU-echo.sock"});
  REQUIRE(echo.wait_for_line("listening"));
  {
    ChildProcess killed(kStoreHelper, {"ipc-serve", sockets, "GPU-dead.sock"});
    REQUIRE(killed.wait_for_line("listening"));
    killed.kill_now();
  }
  auto run = run_cli({"donors", "--socket-dir", sockets, "--json"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  REQUIRE(j.size() == 2);
  CHECK(j[0]["socket"] == sockets + "/GPU-dead.sock");
  CHECK(j[0]["error"].get<std::string>().find("stale socket") != std::string::npos);
  CHECK(j[1]["socket"] == sockets + "/GPU-echo.sock");
  CHECK(j[1]["error"].get<std::string>().find("malformed") != std::string::npos);
  CHECK(j[1]["components"].empty());

  auto table = run_cli({"donors", "--socket-dir", sockets});
  CHECK(table.exit_code == 0);
  CHECK(table.out.find("not answering: stale socket") != std::string::npos);
}

TEST_CASE("cli donors refuses a socket directory that is not private", "[cli][donors]") {
  TempDir dir;
  const std::string open_dir = dir / "open";
  REQUIRE(::mkdir(open_dir.c_str(), 0755) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0755) == 0);
  auto run = run_cli({"donors", "--socket-dir", open_dir});
  INFO(run.out << run.err);
  CHECK(run.exit_code == 5);
  CHECK(run.err.find("chmod 700") != std::string::npos);
}
