// snapcache why: the key fields that make a load miss.
#include <unistd.h>

#include <map>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"

using namespace snapcache;
using namespace snapcache::test;

TEST_CASE("cli why names the key fields that differ from the nearest entry", "[cli][why]") {
  Cache cache;
  const std::string published = cache.publish(41);
  Key wanted = store_key(41);
  wanted.dtype = "float16";
  wanted.topology.tp_size = 2;
  const std::string missed = key_id(wanted);
  CHECK(cache.store->lookup(wanted).result == LookupResult::miss);

  auto list = run_cli(with_dir(cache, {"why", "--json"}));
  INFO(list.out << list.err);
  REQUIRE(list.exit_code == 0);
  auto l = list.json();
  REQUIRE(l["misses"].size() == 1);
  CHECK(l["misses"][0]["key_id"] == missed);
  CHECK(l["misses"][0]["nearest"]["id"] == published);

  auto run = run_cli(with_dir(cache, {"why", missed.substr(0, 8), "--json"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["key_id"] == missed);
  CHECK(j["source"] == "recorded_miss");
  CHECK(j["entry_exists"] == false);
  CHECK(j["key"]["dtype"] == "float16");
  CHECK(j["nearest"]["id"] == published);
  std::map<std::string, std::pair<std::string, std::string>> diffs;
  for (const auto& d : j["nearest"]["differences"])
    diffs[d["field"].get<std::string>()] = {d["wanted"].get<std::string>(), d["found"].get<std::string>()};
  CHECK(diffs.size() == 2);
  CHECK(diffs["dtype"] == std::make_pair(std::string("float16"), std::string("bfloat16")));
  CHECK(diffs["topology.tp_size"] == std::make_pair(std::string("2"), std::string("1")));

  // A key file written by the application works the same.
  TempDir elsewhere;
  const std::string file = elsewhere / "load.key";
  REQUIRE(write_key_file(cache.store->fs(), file, wanted).is_ok());
  auto text = run_cli(with_dir(cache, {"why", file}));
  INFO(text.out << text.err);
  CHECK(text.exit_code == 0);
  CHECK(contains(text.out, "differs in 2 fields"));
  CHECK(contains(text.out, "dtype"));
  CHECK(contains(text.out, "float16"));
  CHECK(contains(text.out, "bfloat16"));

  // Once the entry exists, the miss is explained by its absence at the time.
  PublishOptions options;
  REQUIRE(publish_raw(*cache.store, wanted, raw_model(41, 1), options).result == PublishResult::published);
  auto later = run_cli(with_dir(cache, {"why", missed}));
  CHECK(later.exit_code == 0);
  CHECK(contains(later.out, "published after the miss"));

  auto garbage = elsewhere / "not-a-key";
  write_bytes(garbage, "hello");
  auto bad = run_cli(with_dir(cache, {"why", garbage}));
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "not a snapcache key file"));
  auto unknown = run_cli(with_dir(cache, {"why", "ffffffffffff"}));
  CHECK(unknown.exit_code == 3);
}

TEST_CASE("cli why, ls and inspect show a checkpoint keyed by content by its digest, never by a path",
          "[cli][why]") {
  Cache cache;
  Key built = store_key(42);
  built.checkpoint[0].content_digest = std::string(32, 'a');
  REQUIRE(publish_raw(*cache.store, built, raw_model(42, 1)).result == PublishResult::published);
  const std::string id = key_id(built);

  // Other bytes at another path: the miss names the digest and nothing about where the file is.
  Key wanted = built;
  wanted.checkpoint[0].path = "/elsewhere/model.safetensors";
  wanted.checkpoint[0].inode += 7;
  wanted.checkpoint[0].content_digest = std::string(32, 'b');
  CHECK(cache.store->lookup(wanted).result == LookupResult::miss);
  auto run = run_cli(with_dir(cache, {"why", key_id(wanted), "--json"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["nearest"]["id"] == id);
  REQUIRE(j["nearest"]["differences"].size() == 1);
  CHECK(j["nearest"]["differences"][0]["field"] == "checkpoint[0].content_digest");
  CHECK(j["nearest"]["differences"][0]["wanted"] == std::string(32, 'b'));
  CHECK(j["nearest"]["differences"][0]["found"] == std::string(32, 'a'));
  CHECK(j["key"]["checkpoint"][0]["path"] == "");  // a recorded miss keeps the identity only

  auto ls = run_cli(with_dir(cache, {"ls"}));
  INFO(ls.out << ls.err);
  CHECK(contains(ls.out, "content aaaaaaaaaaaa"));
  CHECK_FALSE(contains(ls.out, "model-42"));
  auto inspect = run_cli(with_dir(cache, {"inspect", id}));
  INFO(inspect.out << inspect.err);
  CHECK(contains(inspect.out, "content digest " + std::string(32, 'a')));
  CHECK(contains(inspect.out, "keyed by content"));
}

TEST_CASE("cli why keeps the cause of a miss after the entry is published, and gc keeps the record",
          "[cli][why]") {
  Cache cache;
  const std::string published = cache.publish(43);
  Key wanted = store_key(43);
  wanted.topology.tp_size = 2;
  const std::string missed = key_id(wanted);
  REQUIRE(cache.store->lookup(wanted).result == LookupResult::miss);
  // The load that missed went on to publish, as a cold load does.
  REQUIRE(publish_raw(*cache.store, wanted, raw_model(43, 1)).result == PublishResult::published);

  auto text = run_cli(with_dir(cache, {"why", missed}));
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(contains(text.out, "published after the miss"));
  // Before, only "(published since)": the difference that caused the miss was gone.
  CHECK(contains(text.out, "why, at the miss: no entry for this key; nearest entry " + published.substr(0, 12)));
  CHECK(contains(text.out, "topology.tp_size"));

  auto list = run_cli(with_dir(cache, {"why", "--json"}));
  REQUIRE(list.exit_code == 0);
  auto l = list.json();
  REQUIRE(l["misses"].size() == 1);
  CHECK(l["misses"][0]["entry_exists"] == true);
  CHECK(contains(l["misses"][0]["reason_at_miss"].get<std::string>(), "topology.tp_size"));

  // The reason file is the store's own: gc of strays keeps it, and a planted one is not trusted.
  auto gc = run_cli(with_dir(cache, {"gc", "--grace", "0"}));
  INFO(gc.out << gc.err);
  REQUIRE(gc.exit_code == 0);
  auto again = run_cli(with_dir(cache, {"why", missed}));
  CHECK(contains(again.out, "why, at the miss:"));
  const std::string reason_file = cache.path() + "/misses/" + missed + ".reason";
  REQUIRE(::unlink(reason_file.c_str()) == 0);
  TempDir elsewhere;
  write_bytes(elsewhere / "forged", "forged\x1b[2Jreason");
  REQUIRE(::link((elsewhere / "forged").c_str(), reason_file.c_str()) == 0);  // a second name: not ours
  auto forged = run_cli(with_dir(cache, {"why", missed}));
  INFO(forged.out);
  CHECK_FALSE(contains(forged.out, "forged"));
}
