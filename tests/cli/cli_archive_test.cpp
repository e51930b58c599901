// snapcache export and import: an archive through a real pipe between two processes, from a
// file, from stdin; what import says about entries this machine would never hit; the secondary
// store shown by `snapcache config`.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
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

// `snapcache keygen FILE`: the public key it made ("ed25519:..."), from its --json.
std::string keygen(const std::string& file) {
  auto run = run_cli({"keygen", file, "--json"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  return run.json()["public_key"].get<std::string>();
}

// A settings file that trusts `keys`, for --config.
std::string trusting_settings(const TempDir& io, const std::string& keys) {
  const std::string path = io / "trusting.conf";
  write_bytes(path, "trusted_archive_keys = " + keys + "\n");
  return path;
}


}  // namespace

TEST_CASE("cli export piped into import in another process fills another cache that hits and verifies",
          "[cli][archive]") {
  Cache source;
  const std::string a = source.publish(61, 2);
  const std::string b = source.publish(62, 1);
  Cache target;
  TempDir io;
  const std::string public_key = keygen(io / "key");
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = ::open((io / "import.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t exporter = spawn_cli({"--dir", source.path(), "export", a.substr(0, 10), b, "-o", "-", "--threads", "2",
                                    "--sign", io / "key"},
                                   devnull, fds[1], io / "export.err");
  const pid_t importer = spawn_cli({"--dir", target.path(), "--config", trusting_settings(io, public_key), "import", "-",
                                    "--json"},
                                   fds[0], out, io / "import.err");
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
  CHECK(j["signer"] == public_key);
  CHECK(j["authorship"] == "proven");
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
  TempDir io, keys;
  const std::string public_key = keygen(keys / "key");
  const std::string settings = trusting_settings(keys, public_key);
  const std::string archive = io / "one.snapcache";
  auto exported = run_cli(with_dir(source, {"export", id, "-o", archive, "--sign", keys / "key"}));
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  CHECK(contains(exported.out, "1 entry of"));
  CHECK(list_names(io.path()) == std::vector<std::string>{"one.snapcache"});  // no temporary left

  Cache target;
  auto first = run_cli(with_dir(target, {"--config", settings, "import", archive}));
  INFO(first.out << first.err);
  CHECK(first.exit_code == 0);
  CHECK(contains(first.out, "imported " + id.substr(0, 12)));
  CHECK(contains(first.out, "warning: a load here would never hit it"));
  CHECK(contains(first.out, "torch"));
  auto again = run_cli(with_dir(target, {"--config", settings, "import", archive}));
  CHECK(again.exit_code == 0);
  CHECK(contains(again.out, "present  " + id.substr(0, 12)));

  // From stdin, with --require-match: entries this machine cannot hit are skipped with the reason.
  Cache strict;
  TempDir io2;
  const int in = ::open(archive.c_str(), O_RDONLY | O_CLOEXEC);
  const int out = ::open((io2 / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int rc = wait_exit(
      spawn_cli({"--dir", strict.path(), "--config", settings, "import", "-", "--require-match"}, in, out, io2 / "err"));
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
  auto bad = run_cli(with_dir(victim, {"--config", settings, "import", io / "bad.snapcache"}));
  INFO(bad.out << bad.err);
  CHECK(bad.exit_code == 1);
  CHECK(count_entries(victim.path() + "/entries") == 0);
  CHECK(count_entries(victim.path() + "/tmp") == 0);

  auto not_archive = run_cli(with_dir(victim, {"--config", settings, "import", archive + ".missing"}));
  CHECK(not_archive.exit_code == 3);
}

TEST_CASE("cli import says in its text which entries it evicted to make room", "[cli][archive]") {
  Cache source;
  const std::string id = source.publish(67, 2);
  TempDir io;
  const std::string public_key = keygen(io / "key");
  const std::string archive = io / "one.snapcache";
  REQUIRE(run_cli(with_dir(source, {"export", id, "-o", archive, "--sign", io / "key"})).exit_code == 0);
  // A cache with room for one such entry (about 1.4 MiB): importing the archive evicts the one it
  // holds.
  Cache target;
  const std::string old = target.publish(68, 2);
  write_bytes(io / "snapcache.conf", "capacity = 2MiB\ntrusted_archive_keys = " + public_key + "\n");
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


TEST_CASE("cli keygen, export --sign and an import that trusts the key: the hit names who signed the entry, and ls "
          "and inspect show it",
          "[cli][archive][trust]") {
  TempDir io;
  const std::string key_file = io / "fleet-key";
  auto made = run_cli({"keygen", key_file});
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  const std::string public_key = read_bytes(key_file + ".pub").substr(0, 8 + 64);
  CHECK(public_key.starts_with("ed25519:"));
  CHECK(contains(made.out, "public key:  " + public_key));
  CHECK(contains(made.out, "trusted_archive_keys = " + public_key));
  struct stat st {};
  REQUIRE(::stat(key_file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto twice = run_cli({"keygen", key_file});
  CHECK(twice.exit_code == 2);
  CHECK(contains(twice.err, "never overwritten"));

  Cache source;
  const std::string id = source.publish(81, 1);
  const std::string archive = io / "signed.snapcache";
  auto exported = run_cli(with_dir(source, {"export", id, "-o", archive, "--sign", key_file}));
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  CHECK(contains(exported.out, "signed by " + public_key));

  Cache target;
  auto imported = run_cli(with_dir(target, {"--config", trusting_settings(io, public_key), "import", archive}));
  INFO(imported.out << imported.err);
  CHECK(imported.exit_code == 0);
  CHECK(contains(imported.out, "imported " + id.substr(0, 12)));
  CHECK(contains(imported.out, "signed by " + public_key + ", a trusted key"));

  auto hit = target.store->lookup(store_key(81));
  REQUIRE(hit.result == LookupResult::hit);
  CHECK(contains(hit.reason, "entry imported from an archive signed by " + public_key + ", a trusted key"));
  CHECK(same_data(*hit.snapshot, raw_model(81, 1)));

  auto ls = run_cli(with_dir(target, {"ls"}));
  CHECK(contains(ls.out, "ORIGIN"));
  CHECK(contains(ls.out, "signed " + public_key.substr(8, 12)));
  auto ls_json = run_cli(with_dir(target, {"ls", "--json"}));
  REQUIRE(ls_json.json()["entries"].size() == 1);
  CHECK(ls_json.json()["entries"][0]["origin"]["kind"] == "imported_signed");
  CHECK(ls_json.json()["entries"][0]["origin"]["signer"] == public_key);
  auto inspect = run_cli(with_dir(target, {"inspect", id.substr(0, 12)}));
  CHECK(contains(inspect.out, "origin    imported from an archive signed by " + public_key + ", a trusted key ("));
  auto inspect_json = run_cli(with_dir(target, {"inspect", id, "--json"}));
  CHECK(inspect_json.json()["origin"]["kind"] == "imported_signed");
  CHECK(inspect_json.json()["origin_problem"].is_null());
  // Where it was published, it says so.
  auto source_ls = run_cli(with_dir(source, {"ls", "--json"}));
  CHECK(source_ls.json()["entries"][0]["origin"]["kind"] == "published");
}

TEST_CASE("cli import refuses an archive signed by a key not trusted, naming the key and how to trust it",
          "[cli][archive][trust]") {
  TempDir io;
  const std::string trusted = keygen(io / "ours");
  const std::string theirs = keygen(io / "theirs");
  Cache source;
  const std::string id = source.publish(82, 1);
  const std::string archive = io / "theirs.snapcache";
  REQUIRE(run_cli(with_dir(source, {"export", id, "-o", archive, "--sign", io / "theirs"})).exit_code == 0);

  Cache target;
  auto run = run_cli(with_dir(target, {"import", archive}), {"SNAPCACHE_TRUSTED_ARCHIVE_KEYS=" + trusted});
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  CHECK(contains(run.err, "the archive is signed by " + theirs));
  CHECK(contains(run.err, "the one key trusted here (trusted_archive_keys, from SNAPCACHE_TRUSTED_ARCHIVE_KEYS) do "
                          "not include it"));
  CHECK(contains(run.err, "--trust-unsigned"));
  CHECK(count_entries(target.path() + "/entries") == 0);

  // Trusting it (both keys, as a fleet with two builders would) takes it, as proven.
  auto both = run_cli(with_dir(target, {"import", archive, "--json"}),
                      {"SNAPCACHE_TRUSTED_ARCHIVE_KEYS=" + trusted + ", " + theirs});
  INFO(both.out << both.err);
  CHECK(both.exit_code == 0);
  CHECK(both.json()["signer"] == theirs);
  CHECK(both.json()["authorship"] == "proven");
  CHECK(both.json()["imported"] == 1);
}

TEST_CASE("cli import --trust-unsigned takes the forged archive, and import, ls, inspect and the hit say its "
          "authorship is unproven",
          "[cli][archive][trust]") {
  Cache source;
  REQUIRE(publish_raw(*source.store, rank_key(73, 1), raw_model(74)).result == PublishResult::published);
  TempDir io;
  const std::string archive = io / "rank1.snapcache";
  REQUIRE(run_cli(with_dir(source, {"export", key_id(rank_key(73, 1)), "-o", archive})).exit_code == 0);
  write_bytes(io / "forged.snapcache", rekey_archive(read_bytes(archive), [](Key& k) { k.topology.tp_rank = 0; }));
  const std::string rank0 = key_id(rank_key(73, 0));

  Cache victim;
  auto run = run_cli(with_dir(victim, {"import", io / "forged.snapcache", "--trust-unsigned"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(contains(run.out, "imported " + rank0.substr(0, 12)));
  CHECK(contains(run.out, "warning: the archive is unsigned; imported with --trust-unsigned: the entries' authorship "
                          "is unproven"));
  // What was trusted: rank 0's lookup gets rank 1's weights, and says on whose word.
  auto hit = victim.store->lookup(rank_key(73, 0));
  REQUIRE(hit.result == LookupResult::hit);
  CHECK(same_data(*hit.snapshot, raw_model(74)));
  CHECK(contains(hit.reason, "entry imported from an unsigned archive with --trust-unsigned: its authorship is unproven"));

  auto ls = run_cli(with_dir(victim, {"ls"}));
  CHECK(contains(ls.out, "unproven"));
  auto ls_json = run_cli(with_dir(victim, {"ls", "--json"}));
  CHECK(ls_json.json()["entries"][0]["origin"]["kind"] == "imported_unproven");
  CHECK(ls_json.json()["entries"][0]["origin"]["signer"].is_null());
  auto inspect = run_cli(with_dir(victim, {"inspect", rank0}));
  CHECK(contains(inspect.out, "origin    imported from an unsigned archive with --trust-unsigned: its authorship is "
                              "unproven ("));
  auto again = run_cli(with_dir(victim, {"import", io / "forged.snapcache", "--trust-unsigned", "--json"}));
  CHECK(again.json()["authorship"] == "unproven");
  CHECK(again.json()["signer"].is_null());
  CHECK(again.json()["already_present"] == 1);
}

TEST_CASE("cli import refuses a signed archive re-keyed after signing, even with --trust-unsigned",
          "[cli][archive][trust]") {
  TempDir io;
  const std::string public_key = keygen(io / "key");
  Cache source;
  REQUIRE(publish_raw(*source.store, rank_key(75, 1), raw_model(76)).result == PublishResult::published);
  const std::string archive = io / "signed.snapcache";
  REQUIRE(run_cli(with_dir(source, {"export", key_id(rank_key(75, 1)), "-o", archive, "--sign", io / "key"}))
              .exit_code == 0);
  write_bytes(io / "forged.snapcache", rekey_archive(read_bytes(archive), [](Key& k) { k.topology.tp_rank = 0; }));
  for (bool trust_unsigned : {false, true}) {
    Cache victim;
    std::vector<std::string> args = {"--config", trusting_settings(io, public_key), "import", io / "forged.snapcache"};
    if (trust_unsigned) args.push_back("--trust-unsigned");
    auto run = run_cli(with_dir(victim, args));
    INFO("--trust-unsigned " << trust_unsigned << ": " << run.out << run.err);
    CHECK(run.exit_code == 1);
    CHECK(contains(run.out, "REFUSED  " + key_id(rank_key(75, 0)).substr(0, 12)));
    CHECK(contains(run.out, "its signature does not hold for the archive's signer " + public_key));
    CHECK(count_entries(victim.path() + "/entries") == 0);
    CHECK(count_entries(victim.path() + "/tmp") == 0);
    CHECK(victim.store->lookup(rank_key(75, 0)).result == LookupResult::miss);
  }
}

TEST_CASE("cli export --sign refuses a key file others may read, or one that is not a key", "[cli][archive][trust]") {
  TempDir io;
  keygen(io / "key");
  ::chmod((io / "key").c_str(), 0644);
  Cache source;
  const std::string id = source.publish(83, 1);
  auto run = run_cli(with_dir(source, {"export", id, "-o", io / "a.snapcache", "--sign", io / "key"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 2);
  CHECK(contains(run.err, "run chmod 600 " + io / "key"));
  CHECK_FALSE(path_exists(io / "a.snapcache"));
  write_bytes(io / "junk", "not a key\n");
  ::chmod((io / "junk").c_str(), 0600);
  auto junk = run_cli(with_dir(source, {"export", id, "-o", io / "a.snapcache", "--sign", io / "junk"}));
  CHECK(junk.exit_code == 2);
  CHECK(contains(junk.err, "is not a signing key"));
}

TEST_CASE("cli config shows the trusted archive keys and where they were set, and refuses one that is not a key",
          "[cli][archive][config]") {
  const std::string key = "ed25519:" + std::string(64, 'a');
  auto run = run_cli({"config", "--json"}, {"SNAPCACHE_TRUSTED_ARCHIVE_KEYS=" + key});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(run.json()["settings"]["trusted_archive_keys"]["value"] == nlohmann::json::array({key}));
  CHECK(run.json()["settings"]["trusted_archive_keys"]["origin"] == "SNAPCACHE_TRUSTED_ARCHIVE_KEYS");
  TempDir io;
  write_bytes(io / "bad.conf", "# fleet\ntrusted_archive_keys = " + key + ", ed25519:12\n");
  auto bad = run_cli({"--config", io / "bad.conf", "config"});
  CHECK(bad.exit_code == 5);
  CHECK(contains(bad.err, io / "bad.conf" + ":2: trusted_archive_keys: 'ed25519:12' is not a public key"));
}
