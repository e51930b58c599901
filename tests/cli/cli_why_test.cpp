// snapcache why: the key fields that make a load miss.
#include <unistd.h>

#include <map>
#include <sstream>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"
#include "snapcache/key.h"

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

  // Other bytes at another path: a checkpoint keyed by content is its bytes, so these are another
  // checkpoint, this model's first load; nothing says where the file is.
  Key wanted = built;
  wanted.checkpoint[0].path = "/elsewhere/model.safetensors";
  wanted.checkpoint[0].inode += 7;
  wanted.checkpoint[0].content_digest = std::string(32, 'b');
  CHECK(cache.store->lookup(wanted).result == LookupResult::miss);
  auto run = run_cli(with_dir(cache, {"why", key_id(wanted), "--json"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["nearest"].is_null());
  CHECK(j["first_load"] == true);
  CHECK_FALSE(contains(run.out, "elsewhere"));
  // The same bytes at another path, under another torch: the same checkpoint, named by its digest.
  Key moved = built;
  moved.checkpoint[0].path = "/elsewhere/model.safetensors";
  moved.torch.version = "2.99.0";
  CHECK(cache.store->lookup(moved).result == LookupResult::miss);
  auto same = run_cli(with_dir(cache, {"why", key_id(moved), "--json"})).json();
  CHECK(same["nearest"]["id"] == id);
  REQUIRE(same["nearest"]["differences"].size() == 1);
  CHECK(same["nearest"]["differences"][0]["field"] == "torch.version");
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
  CHECK(contains(text.out, "TP size 1 -> 2"));

  auto list = run_cli(with_dir(cache, {"why", "--json"}));
  REQUIRE(list.exit_code == 0);
  auto l = list.json();
  REQUIRE(l["misses"].size() == 1);
  CHECK(l["misses"][0]["entry_exists"] == true);
  CHECK(contains(l["misses"][0]["reason_at_miss"].get<std::string>(), "TP size 1 -> 2"));

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

TEST_CASE("cli why says what changed in words, comparing only with the same component and checkpoint",
          "[cli][why]") {
  Cache cache;
  Key wanted = store_key(60);
  wanted.checkpoint[0].mtime_ns += 180'000'000'000;  // the checkpoint modified three minutes later
  // The same model and checkpoint before the change, under another torch and dtype: 3 fields.
  Key before = store_key(60);
  before.torch.version = "2.10.0";
  before.dtype = "float16";
  // The same model from another checkpoint: 2 fields (a file new, a file gone).
  Key other_checkpoint = wanted;
  other_checkpoint.checkpoint[0].path = "/checkpoints/other.safetensors";
  // Another model on the very same files: 1 field.
  Key other_model = wanted;
  other_model.component = "LlamaForCausalLM";
  for (const Key& k : {before, other_checkpoint, other_model})
    REQUIRE(publish_raw(*cache.store, k, raw_model(60, 1)).result == PublishResult::published);
  const std::string missed = key_id(wanted);
  REQUIRE(cache.store->lookup(wanted).result == LookupResult::miss);

  auto text = run_cli(with_dir(cache, {"why", missed}));
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  const std::string nearest = key_id(before).substr(0, 12);
  CHECK(contains(text.out, "the nearest, " + nearest + " (same component and checkpoint), differs in 3 fields"));
  CHECK(contains(text.out, "  checkpoint model-60.safetensors modified 3m after the version the entry was made from\n"));
  CHECK(contains(text.out, "  torch 2.10.0 -> " + wanted.torch.version + "\n"));
  CHECK(contains(text.out, "  dtype float16 -> bfloat16\n"));
  // The words at the miss, recorded: no raw nanoseconds, no "!=".
  CHECK(contains(text.out, "why, at the miss: no entry for this key; nearest entry " + nearest +
                               " (same component and checkpoint): checkpoint model-60.safetensors modified 3m"));
  CHECK_FALSE(contains(text.out, "mtime_ns"));
  CHECK_FALSE(contains(text.out, "!="));
  CHECK_FALSE(contains(text.out, "LlamaForCausalLM"));

  auto j = run_cli(with_dir(cache, {"why", missed, "--json"})).json();
  CHECK(j["nearest"]["id"] == key_id(before));
  REQUIRE(j["nearest"]["differences"].size() == 3);
  // The values stay for programs, with the words beside them.
  CHECK(j["nearest"]["differences"][0]["field"] == "checkpoint[/checkpoints/model-60.safetensors].mtime_ns");
  CHECK(j["nearest"]["differences"][0]["wanted"] == std::to_string(wanted.checkpoint[0].mtime_ns));
  CHECK(contains(j["nearest"]["differences"][0]["words"].get<std::string>(), "modified 3m after"));

  // A checkpoint no entry of the component has: this model's first load, compared with nothing (not
  // with the same component's other checkpoint, nor with another model on the same files).
  Key fresh = store_key(60);
  fresh.checkpoint[0].path = "/checkpoints/fresh.safetensors";
  const LookupOutcome fresh_miss = cache.store->lookup(fresh);
  REQUIRE(fresh_miss.result == LookupResult::miss);
  CHECK(fresh_miss.reason == "no entry of component 'dit' for this checkpoint yet: this model's first load");
  auto fresh_text = run_cli(with_dir(cache, {"why", key_id(fresh)}));
  INFO(fresh_text.out);
  CHECK(contains(fresh_text.out, "why, at the miss: no entry of component 'dit' for this checkpoint yet: this "
                                 "model's first load\n"));
  CHECK(contains(fresh_text.out, "\nno entry of component 'dit' for this checkpoint yet: this model's first load\n"));
  CHECK_FALSE(contains(fresh_text.out, "nearest"));
  CHECK_FALSE(contains(fresh_text.out, "is new"));
  CHECK_FALSE(contains(fresh_text.out, "LlamaForCausalLM"));
  auto fresh_json = run_cli(with_dir(cache, {"why", key_id(fresh), "--json"})).json();
  CHECK(fresh_json["nearest"].is_null());
  CHECK(fresh_json["first_load"] == true);
  CHECK(j["first_load"] == false);

  // A model no entry has: the same, however near another model's key is.
  Key vae = wanted;
  vae.component = "vae";
  REQUIRE(cache.store->lookup(vae).result == LookupResult::miss);
  auto vae_text = run_cli(with_dir(cache, {"why", key_id(vae)}));
  INFO(vae_text.out);
  CHECK(contains(vae_text.out, "no entry of component 'vae' for this checkpoint yet: this model's first load"));
  CHECK_FALSE(contains(vae_text.out, "LlamaForCausalLM"));
  // The list says the same.
  auto list = run_cli(with_dir(cache, {"why"}));
  INFO(list.out);
  CHECK(contains(list.out, "  vae  "));
  CHECK_FALSE(contains(list.out, "LlamaForCausalLM -> vae"));
}

TEST_CASE("cli why tells a load that failed after its miss from a miss", "[cli][why]") {
  Cache cache;
  cache.publish(61);
  Key failing = store_key(61);
  failing.dtype = "float16";
  Key missing = store_key(61);
  missing.topology.tp_size = 2;
  REQUIRE(cache.store->lookup(failing).result == LookupResult::miss);
  REQUIRE(cache.store->lookup(missing).result == LookupResult::miss);
  // What the snapshot tier does when the load goes on to fail (Tier::load_failed); the name in the
  // error is someone else's and is printed escaped.
  record_failed_load(*cache.store, failing, "exception: ordinary loader: RuntimeError: no \x1b[31mshard");

  auto list = run_cli(with_dir(cache, {"why"}));
  INFO(list.out << list.err);
  REQUIRE(list.exit_code == 0);
  std::string failed_line, missed_line;
  std::istringstream lines(list.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(key_id(failing).substr(0, 12))) failed_line = line;
    if (line.starts_with(key_id(missing).substr(0, 12))) missed_line = line;
  }
  CHECK(contains(failed_line, "  failed  "));
  CHECK(contains(failed_line, "failed: exception: ordinary loader: RuntimeError: no \\x1b[31mshard"));
  CHECK_FALSE(contains(failed_line, "  miss  "));
  CHECK(contains(missed_line, "  miss  "));
  CHECK(contains(missed_line, "TP size 1 -> 2"));
  CHECK_FALSE(contains(list.out, "\x1b"));

  auto detail = run_cli(with_dir(cache, {"why", key_id(failing)}));
  INFO(detail.out);
  CHECK(contains(detail.out, "\nfailed: exception: ordinary loader: RuntimeError: no \\x1b[31mshard\n"));
  auto j = run_cli(with_dir(cache, {"why", key_id(failing), "--json"})).json();
  CHECK(j["outcome"] == "failed");
  CHECK(j["failed"] == "exception: ordinary loader: RuntimeError: no \x1b[31mshard");
  auto listed = run_cli(with_dir(cache, {"why", "--json"})).json();
  std::map<std::string, std::string> outcomes;
  for (const auto& m : listed["misses"]) outcomes[m["key_id"].get<std::string>()] = m["outcome"].get<std::string>();
  CHECK(outcomes[key_id(failing)] == "failed");
  CHECK(outcomes[key_id(missing)] == "miss");

  // The failure is the store's own file: gc keeps it; a new miss of the key is a miss again.
  REQUIRE(run_cli(with_dir(cache, {"gc", "--grace", "0"})).exit_code == 0);
  CHECK(contains(run_cli(with_dir(cache, {"why", key_id(failing)})).out, "failed: "));
  REQUIRE(cache.store->lookup(failing).result == LookupResult::miss);
  auto again = run_cli(with_dir(cache, {"why", key_id(failing), "--json"})).json();
  CHECK(again["outcome"] == "miss");
  CHECK(again["failed"].is_null());

  // A failure file with a second name is not the store's: not shown.
  record_failed_load(*cache.store, failing, "real failure");
  const std::string failed_file = cache.path() + "/misses/" + key_id(failing) + ".failed";
  REQUIRE(::unlink(failed_file.c_str()) == 0);
  TempDir elsewhere;
  write_bytes(elsewhere / "forged", "forged failure");
  REQUIRE(::link((elsewhere / "forged").c_str(), failed_file.c_str()) == 0);
  auto forged = run_cli(with_dir(cache, {"why", key_id(failing)}));
  CHECK_FALSE(contains(forged.out, "forged"));
}
