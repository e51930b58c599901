// Ranks that agree: eight processes load the demo model's TP shards with one group (c10d's
// TCPStore from the environment), through the pipeline as a server would. A damaged entry on one
// rank, a failed publication on another and a rank that dies mid-load each change what every
// rank does, and every rank's report says so.
#include <signal.h>

#include <chrono>

#include "support/group_fixture.h"

namespace snapcache::test {
namespace {

constexpr int kRanks = 8;

struct EightRanks : GroupFixture {
  EightRanks() : GroupFixture(kRanks) {}
};

}  // namespace

TEST_CASE("group: eight ranks miss together, publish, then hit together with the same weights", "[group]") {
  EightRanks f;
  auto cold = f.run();
  require_all(cold, "path", "miss");
  require_all(cold, "tier", "ordinary");
  require_same_on_every_rank(cold, "decision");
  REQUIRE_TEXT(cold[0]["decision"], contains, "snapshot missed on all 8 ranks");
  REQUIRE_TEXT(cold[0]["publication"], contains, "published on ranks 0-7");
  require_same_on_every_rank(cold, "publication");
  // A group waits for every rank's publication before it returns, so the ranks publish the loaded
  // tensors themselves: no copy of them.
  for (auto& rank : cold) {
    INFO("stages: " << rank["stages"]);
    REQUIRE(contains(rank["stages"], "publish (wait: "));
    REQUIRE_FALSE(contains(rank["stages"], "copy for the publication"));
  }
  // Eight shards, eight entries, each sound.
  auto entries = list_entries(*f.store());
  REQUIRE(entries.is_ok());
  REQUIRE(entries->size() == kRanks);
  for (const auto& e : *entries) REQUIRE(verify_entry(*f.store(), e.id).status.is_ok());

  auto warm = f.run();
  require_all(warm, "path", "hit");
  require_all(warm, "tier", "snapshot");
  REQUIRE(warm[0]["decision"] == "the snapshot tier served on all 8 ranks");
  REQUIRE(fingerprints(warm) == fingerprints(cold));
  const std::vector<std::string> cold_prints = fingerprints(cold);
  const std::set<std::string> distinct(cold_prints.begin(), cold_prints.end());
  REQUIRE(distinct.size() == kRanks);  // each rank its own shard
}

TEST_CASE("group: a damaged entry on one rank takes every rank to the ordinary path", "[group]") {
  EightRanks f;
  auto cold = f.run();
  require_all(cold, "path", "miss");
  const EntryInfo damaged = f.entry_of(3);
  flip_byte(damaged.path + "/" + damaged.manifest->files[0].name, 4096 + 17);

  auto after = f.run();
  require_all(after, "path", "fallback");
  require_all(after, "tier", "ordinary");
  require_same_on_every_rank(after, "decision");
  require_same_on_every_rank(after, "reason");
  const std::string& decision = after[0]["decision"];
  INFO(decision);
  REQUIRE_TEXT(decision, starts_with, "rank 3: snapshot unusable (");
  REQUIRE_TEXT(decision, contains, "snapshot served on ranks 0-2, 4-7");
  REQUIRE_TEXT(decision, ends_with, "the group took the ordinary tier");
  // Only the rank that lost its entry published it again; the others kept theirs.
  REQUIRE_TEXT(after[0]["publication"], contains, "published on rank 3");
  REQUIRE(fingerprints(after) == fingerprints(cold));

  auto again = f.run();
  require_all(again, "path", "hit");
  REQUIRE(fingerprints(again) == fingerprints(cold));
}

TEST_CASE("group: a rank whose publication fails is named, and the next load takes the ordinary path",
          "[group]") {
  EightRanks f;
  auto cold = f.run({{5, {"--fail-publication"}}});
  require_all(cold, "path", "miss");
  require_same_on_every_rank(cold, "publication");
  const std::string& publication = cold[0]["publication"];
  INFO(publication);
  REQUIRE_TEXT(publication, starts_with, "not kept on every rank: rank 5 failed (");
  REQUIRE_TEXT(publication, contains, "published on ranks 0-4, 6-7");
  REQUIRE_TEXT(publication, contains, "the group's next load takes the ordinary path again");

  auto next = f.run();
  require_all(next, "path", "miss");
  require_all(next, "tier", "ordinary");
  REQUIRE_TEXT(next[0]["decision"], starts_with, "rank 5: snapshot missed");
  REQUIRE_TEXT(next[0]["publication"], contains, "published on rank 5");
  REQUIRE(fingerprints(next) == fingerprints(cold));

  auto warm = f.run();
  require_all(warm, "path", "hit");
}

TEST_CASE("group: a rank that dies mid-load makes the others fail with its name, not hang", "[group]") {
  EightRanks f;
  const auto started = std::chrono::steady_clock::now();
  auto results = f.run({{6, {"--die-in-loader"}}}, /*timeout_ms=*/4000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  REQUIRE(results[6].values.count("dying") == 1);
  REQUIRE(results[6].exit_code == 128 + SIGKILL);
  // Every other rank fails. Rank 0 serves the group's store, so it names the missing rank; a rank
  // still waiting when rank 0 has given up and exited finds the store gone, and says so.
  REQUIRE(results[0].exit_code == 1);
  REQUIRE_TEXT(results[0]["error"], contains, "rank 6 did not answer within 4000 ms");
  for (int r = 1; r < kRanks; ++r) {
    if (r == 6) continue;
    INFO("rank " << r << ": " << results[r]["error"]);
    REQUIRE(results[r].exit_code == 1);
    const std::string& error = results[r]["error"];
    REQUIRE((error.find("rank 6 did not answer within 4000 ms") != std::string::npos ||
             error.find("the group's store cannot be reached any more") != std::string::npos));
  }
  REQUIRE(seconds < 40);
  // The ranks that finished the ordinary load published before the group failed: their entries
  // are whole, and nothing is left half-written.
  auto entries = list_entries(*f.store());
  REQUIRE(entries.is_ok());
  for (const auto& e : *entries) REQUIRE(verify_entry(*f.store(), e.id).status.is_ok());
}

}  // namespace snapcache::test
