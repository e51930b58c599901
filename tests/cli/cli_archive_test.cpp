// snapcache export and import: an archive through a real pipe between two processes, from a
// file, from stdin; what import says about entries this machine would never hit; the secondary
// store shown by `snapcache config`.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/archive_forgery.h"
#include "support/catch.h"

using namespace snapcache;
using namespace snapcache::test;

extern char** environ;

namespace {

// `snapcache ARGS` with stdin and stdout on the given descriptors, stderr into `err_path`, in an
// environment without SNAPCACHE_* settings.
pid_t spawn_cli(const std::vector<std::string>& args, int in_fd, int out_fd, const std::string& err_path) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (!std::string(*e).starts_with("SNAPCACHE_") && !std::string(*e).starts_with("HOME=") &&
        !std::string(*e).starts_with("XDG_"))
      env.push_back(*e);
  env.push_back("HOME=/nonexistent/snapcache-cli-test-home");
  std::vector<std::string> argv_s{SNAPCACHE_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv_s[0].c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// store_key(seed) as TP rank `rank` of 2: the two ranks of one model differ in nothing else.
Key rank_key(int seed, std::int64_t rank) {
  Key key = store_key(seed);
  key.topology.tp_rank = rank;
  key.topology.tp_size = 2;
  return key;
}

}  // namespace

TEST_CASE("cli export piped into import in another process fills another cache that hits and verifies",
          "[cli][archive]") {
  Cache source;
  const std::string a = source.publish(61, 2);
  const std::string b = source.publish(62, 1);
  Cache target;
  TempDir io;
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = ::open((io / "import.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t exporter = spawn_cli({"--dir", source.path(), "export", a.substr(0, 10), b, "-o", "-", "--threads", "2"},
                                   devnull, fds[1], io / "export.err");
  const pid_t importer = spawn_cli({"--dir", target.path(), "import", "-", "--json"}, fds[0], out, io / "import.err");
  ::close(fds[0]);
  ::close(fds[1]);
  const int export_rc = wait_exit(exporter);
  const int import_rc = wait_exit(importer);
  ::close(out);
  ::close(devnull);
  const std::string export_err = read_bytes(io / "export.err");
  const std::string import_out = read_bytes(io / "import.out");
  INFO("export: " << export_err << "\nimport: " << import_out << read_bytes(io / "import.err"));
  CHECK(export_rc == 0);
  CHECK(import_rc == 0);
  CHECK(contains(export_err, "exported " + a.substr(0, 12)));  // the archive is on stdout, words on stderr
  auto j = nlohmann::json::parse(import_out);
  CHECK(j["imported"] == 2);
  CHECK(j["status"] == "ok");
  REQUIRE(j["entries"].size() == 2);
  CHECK(j["entries"][0]["id"] == a);
  CHECK(j["entries"][0]["result"] == "imported");
  // The test keys carry a fixed torch identity and checkpoint files that do not exist: import says
  // a load here would never hit them, and imports them anyway.
  CHECK_FALSE(j["entries"][0]["never_hits_here"].empty());

  for (int seed : {61, 62}) {
    auto hit = target.store->lookup(store_key(seed));
    REQUIRE(hit.result == LookupResult::hit);
    CHECK(same_data(*hit.snapshot, raw_model(seed, seed == 61 ? 2 : 1)));
  }
  auto verify = run_cli(with_dir(target, {"verify", "--json"}));
  CHECK(verify.exit_code == 0);
  CHECK(verify.json()["checked"] == 2);
  CHECK(verify.json()["damaged"] == 0);
}

TEST_CASE("cli import reads a file or stdin, says what it did, and refuses a damaged archive", "[cli][archive]") {
  Cache source;
  const std::string id = source.publish(63, 1);
  TempDir io;
  const std::string archive = io / "one.snapcache";
  auto exported = run_cli(with_dir(source, {"export", id, "-o", archive}));
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  CHECK(contains(exported.out, "1 entry of"));
  CHECK(list_names(io.path()) == std::vector<std::string>{"one.snapcache"});  // no temporary left

  Cache target;
  auto first = run_cli(with_dir(target, {"import", archive}));
  INFO(first.out << first.err);
  CHECK(first.exit_code == 0);
  CHECK(contains(first.out, "imported " + id.substr(0, 12)));
  CHECK(contains(first.out, "warning: a load here would never hit it"));
  CHECK(contains(first.out, "torch"));
  auto again = run_cli(with_dir(target, {"import", archive}));
  CHECK(again.exit_code == 0);
  CHECK(contains(again.out, "present  " + id.substr(0, 12)));

  // From stdin, with --require-match: entries this machine cannot hit are skipped with the reason.
  Cache strict;
  TempDir io2;
  const int in = ::open(archive.c_str(), O_RDONLY | O_CLOEXEC);
  const int out = ::open((io2 / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int rc = wait_exit(spawn_cli({"--dir", strict.path(), "import", "-", "--require-match"}, in, out, io2 / "err"));
  ::close(in);
  ::close(out);
  const std::string said = read_bytes(io2 / "out");
  INFO(said << read_bytes(io2 / "err"));
  CHECK(rc == 0);
  CHECK(contains(said, "skipped  " + id.substr(0, 12)));
  CHECK(contains(said, "--require-match"));
  CHECK(count_entries(strict.path() + "/entries") == 0);

  // A damaged archive: refused, exit 1, nothing published.
  std::string bytes = read_bytes(archive);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x20);
  write_bytes(io / "bad.snapcache", bytes);
  Cache victim;
  auto bad = run_cli(with_dir(victim, {"import", io / "bad.snapcache"}));
  INFO(bad.out << bad.err);
  CHECK(bad.exit_code == 1);
  CHECK(count_entries(victim.path() + "/entries") == 0);
  CHECK(count_entries(victim.path() + "/tmp") == 0);

  auto not_archive = run_cli(with_dir(victim, {"import", archive + ".missing"}));
  CHECK(not_archive.exit_code == 3);
}

TEST_CASE("cli import says in its text which entries it evicted to make room", "[cli][archive]") {
  Cache source;
  const std::string id = source.publish(67, 2);
  TempDir io;
  const std::string archive = io / "one.snapcache";
  REQUIRE(run_cli(with_dir(source, {"export", id, "-o", archive})).exit_code == 0);
  // A cache with room for one such entry (about 1.4 MiB): importing the archive evicts the one it
  // holds.
  Cache target;
  const std::string old = target.publish(68, 2);
  write_bytes(io / "snapcache.conf", "capacity = 2MiB\n");
  auto run = run_cli(with_dir(target, {"--config", io / "snapcache.conf", "import", archive}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(contains(run.out, "imported " + id.substr(0, 12)));
  CHECK(contains(run.out, "\n         evicted 1 entry ("));
  CHECK(contains(run.out, ") to make room: " + old.substr(0, 12) + " (dit, "));
  CHECK_FALSE(path_exists(target.store->entry_path(old)));

  // --json lists the same, one object per evicted entry.
  Cache again;
  const std::string other = again.publish(68, 2);
  auto json_run = run_cli(with_dir(again, {"--config", io / "snapcache.conf", "import", archive, "--json"}));
  INFO(json_run.out << json_run.err);
  auto j = json_run.json();
  REQUIRE(j["entries"].size() == 1);
  REQUIRE(j["entries"][0]["evicted"].size() == 1);
  CHECK(j["entries"][0]["evicted"][0]["id"] == other);
  CHECK(j["entries"][0]["evicted"][0]["component"] == "dit");
  CHECK(j["entries"][0]["evicted"][0]["bytes"].get<std::uint64_t>() > 0);
}

TEST_CASE("cli export refuses a terminal as its output", "[cli][archive]") {
  Cache source;
  const std::string id = source.publish(64, 1);
  auto run = run_cli_on_terminal({"--dir", source.path(), "export", id, "-o", "-"});
  CHECK(run.exit_code == 2);
  CHECK(contains(run.out, "stdout is a terminal"));
}

TEST_CASE("cli config shows the secondary store and where it was set", "[cli][archive][config]") {
  auto run = run_cli({"config", "--json"}, {"SNAPCACHE_SECONDARY_DIR=/shared/snapcache"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["settings"]["secondary"]["value"] == "/shared/snapcache");
  CHECK(j["settings"]["secondary"]["source"] == "environment");
  CHECK(j["settings"]["secondary"]["origin"] == "SNAPCACHE_SECONDARY_DIR");
  auto text = run_cli({"config"}, {"SNAPCACHE_SECONDARY_DIR=/shared/snapcache"});
  CHECK(contains(text.out, "secondary"));
  CHECK(contains(text.out, "/shared/snapcache"));
  CHECK(run_cli({"config"}, {"SNAPCACHE_SECONDARY_DIR=relative/dir"}).exit_code == 5);
}

// The campaign's forgery (issue 47, item 10): rank 1's entry exported, its key rewritten to rank
// 0's (a self-consistent manifest: the checksums still prove the data), repacked. Before archives
// were signed this imported cleanly and rank 0's next load was a hit with rank 1's weights.
TEST_CASE("cli import refuses an unsigned archive by default, such as rank 1's entry re-keyed as rank 0",
          "[cli][archive][trust]") {
  Cache source;
  REQUIRE(publish_raw(*source.store, rank_key(71, 1), raw_model(72)).result == PublishResult::published);
  TempDir io;
  const std::string archive = io / "rank1.snapcache";
  auto exported = run_cli(with_dir(source, {"export", key_id(rank_key(71, 1)), "-o", archive}));
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  write_bytes(io / "forged.snapcache",
              rekey_archive(read_bytes(archive), [](Key& k) { k.topology.tp_rank = 0; }));

  Cache victim;
  auto run = run_cli(with_dir(victim, {"import", io / "forged.snapcache"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "unsigned"));
  CHECK(contains(run.err, "--trust-unsigned"));
  CHECK(count_entries(victim.path() + "/entries") == 0);
  CHECK(count_entries(victim.path() + "/tmp") == 0);
  // Rank 0's load finds nothing: it loads its own weights from the checkpoint.
  CHECK(victim.store->lookup(rank_key(71, 0)).result == LookupResult::miss);
}
