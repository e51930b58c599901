// A wrong clock, as the command meets it: leases and strays dated 2036, and past 2262 (what 64-bit
// nanoseconds since 1970 hold), set with utimensat on the real files.
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"

using namespace snapcache;
using namespace snapcache::test;

namespace {

constexpr std::int64_t k2036 = 2082758400;   // 2036-01-01 00:00:00 UTC
constexpr std::int64_t k2300 = 10413792000;  // 2300-01-01 00:00:00 UTC
constexpr std::int64_t kNs = 1'000'000'000;

void set_mtime(const std::string& path, std::int64_t unix_seconds) {
  struct timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(unix_seconds), 0}};
  if (::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
    throw std::runtime_error("utimensat " + path);
}

std::int64_t mtime_seconds(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw std::runtime_error("lstat " + path);
  return st.st_mtim.tv_sec;
}

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string line_with(const std::string& text, const std::string& part) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (contains(line, part)) return line;
  return "";
}

std::set<std::string> evicted_ids(const nlohmann::json& j) {
  std::set<std::string> out;
  for (const auto& e : j["evicted"]) out.insert(e["id"].get<std::string>());
  return out;
}

}  // namespace

TEST_CASE("cli ls and inspect show a last use in 2036 or past 2262 as in the future", "[cli][clock]") {
  Cache cache;
  const std::string in_2036 = cache.publish(41);
  const std::string in_2300 = cache.publish(42);
  set_mtime(cache.lease_path(in_2036), k2036);
  set_mtime(cache.lease_path(in_2300), k2300);

  auto text = run_cli(with_dir(cache, {"ls"}));
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  const std::string years = std::to_string((k2036 - now_seconds()) / (365 * 86400));
  // They read "0s ago" and "60306d ago" (the 2300 time wrapped to 1861).
  CHECK(contains(line_with(text.out, in_2036.substr(0, 12)), "in " + years + "y"));
  CHECK(contains(line_with(text.out, in_2300.substr(0, 12)), "in the future"));

  auto j = run_cli(with_dir(cache, {"ls", "--json"})).json();
  REQUIRE(j["entries"].size() == 2);
  std::map<std::string, std::int64_t> last_use;
  for (const auto& e : j["entries"]) last_use[e["id"].get<std::string>()] = e["last_use_unix_ns"].get<std::int64_t>();
  CHECK(last_use[in_2036] == k2036 * kNs);
  CHECK(last_use[in_2300] == std::numeric_limits<std::int64_t>::max());  // saturated, never negative

  auto inspect = run_cli(with_dir(cache, {"inspect", in_2300.substr(0, 12)}));
  INFO(inspect.out << inspect.err);
  REQUIRE(inspect.exit_code == 0);
  CHECK(contains(inspect.out, "after 2262-04-11 (in the future)"));
  CHECK_FALSE(contains(inspect.out, "1861"));
  auto inspect_2036 = run_cli(with_dir(cache, {"inspect", in_2036.substr(0, 12)}));
  CHECK(contains(inspect_2036.out, "2036-01-01"));
  CHECK(contains(inspect_2036.out, "(in " + years + "y)"));
}

TEST_CASE("cli evict --older-than counts a lease dated in the future as used now, and then lets it age",
          "[cli][clock][evict]") {
  Cache cache;
  const std::string in_2036 = cache.publish(43);
  const std::string in_2300 = cache.publish(44);
  const std::string two_hours_ago = cache.publish(45);
  set_mtime(cache.lease_path(in_2036), k2036);
  set_mtime(cache.lease_path(in_2300), k2300);
  set_mtime(cache.lease_path(two_hours_ago), now_seconds() - 2 * 3600);

  // A dry run says the same and changes nothing.
  auto dry = run_cli(with_dir(cache, {"evict", "--older-than", "1h", "--dry-run", "--json"}));
  INFO(dry.out << dry.err);
  REQUIRE(dry.exit_code == 0);
  CHECK(evicted_ids(dry.json()) == std::set<std::string>{two_hours_ago});
  CHECK(mtime_seconds(cache.lease_path(in_2036)) == k2036);

  // The 2300 lease wrapped to 1861 and went with it; 2036 was never "unused for" anything.
  auto first = run_cli(with_dir(cache, {"evict", "--older-than", "1h", "--json"}));
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  CHECK(evicted_ids(first.json()) == std::set<std::string>{two_hours_ago});
  // Counted as used now, they are dated now, and age from there.
  for (const std::string& id : {in_2036, in_2300}) CHECK(mtime_seconds(cache.lease_path(id)) <= now_seconds());
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto later = run_cli(with_dir(cache, {"evict", "--older-than", "2s", "--json"}));
  INFO(later.out << later.err);
  REQUIRE(later.exit_code == 0);
  CHECK(evicted_ids(later.json()) == std::set<std::string>{in_2036, in_2300});
}

TEST_CASE("cli gc removes strays dated in the future: a wrong clock protects nothing", "[cli][clock][gc]") {
  Cache cache;
  const Key key = cache.reachable_key(46);  // not stale: gc --grace 0 keeps it
  const std::string id = cache.publish(key, 46);
  const std::string in_2036 = cache.path() + "/entries/notes-2036.txt";
  const std::string in_2300 = cache.path() + "/entries/notes-2300.txt";
  const std::string soon = cache.path() + "/entries/notes-soon.txt";  // another host's clock, a little ahead
  for (const auto& p : {in_2036, in_2300, soon}) write_bytes(p, "stray");
  set_mtime(in_2036, k2036);
  set_mtime(in_2300, k2300);
  set_mtime(soon, now_seconds() + 10);

  // With the default hour of grace: the far future is not believed, ten seconds ahead is now.
  auto run = run_cli(with_dir(cache, {"gc", "--json"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  std::set<std::string> removed;
  const auto j = run.json();
  for (const auto& item : j["removed"]) removed.insert(item["path"].get<std::string>());
  CHECK(removed == std::set<std::string>{in_2036, in_2300});
  CHECK(path_exists(soon));
  // --grace 0 takes it too (the 2036 one used to survive even that).
  auto now = run_cli(with_dir(cache, {"gc", "--grace", "0"}));
  INFO(now.out << now.err);
  CHECK(now.exit_code == 0);
  CHECK_FALSE(path_exists(soon));
  CHECK(cache.store->lookup(key).result == LookupResult::hit);
  CHECK(path_exists(cache.store->entry_path(id)));
}
