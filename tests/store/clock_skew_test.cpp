// Times from the cache's files that a wrong clock wrote: in the future (2036), or past what 64-bit
// nanoseconds hold (2300). Real files, their mtimes set with utimensat.
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "util/clock.h"

using namespace snapcache;

namespace {

constexpr std::int64_t k2036 = 2082758400;   // 2036-01-01 00:00:00 UTC
constexpr std::int64_t k2300 = 10413792000;  // 2300-01-01 00:00:00 UTC, past 2262
constexpr std::int64_t kNs = 1'000'000'000;

void set_mtime(const std::string& path, std::int64_t unix_seconds) {
  struct timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(unix_seconds), 0}};
  if (::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
    throw std::runtime_error("utimensat " + path);
}

std::int64_t mtime_ns(const std::string& path) { return posix_file_system()->stat(path, Follow::no).value().mtime_ns; }

}  // namespace

TEST_CASE("a file dated past 2262 reads as the latest time, never as a wrapped one", "[clock]") {
  test::TempDir dir;
  const std::string file = dir / "f";
  test::write_bytes(file, "x");
  set_mtime(file, k2036);
  CHECK(mtime_ns(file) == k2036 * kNs);
  set_mtime(file, k2300);
  CHECK(mtime_ns(file) == util::kLatestUnixNs);  // wrapped, it read as 1861-10-20

  CHECK(util::unix_ns_from(k2300, 5) == util::kLatestUnixNs);
  CHECK(util::unix_ns_from(9223372036, 854775807) == util::kLatestUnixNs);
  CHECK(util::unix_ns_from(9223372036, 854775808) == util::kLatestUnixNs);
  CHECK(util::unix_ns_from(-1, 500) == -999'999'500);
  CHECK(util::unix_ns_from(-k2300, 0) == util::kEarliestUnixNs);  // ext4 itself stops at 1901
}

TEST_CASE("a time in the future counts as now for ordering, shows as the future and protects nothing", "[clock]") {
  const std::int64_t now = util::now_unix_ns();
  CHECK(util::no_later_than(k2036 * kNs, now) == now);
  CHECK(util::no_later_than(now - 5, now) == now - 5);
  CHECK(util::elapsed_ns(k2036 * kNs, now) == 0);
  CHECK(util::elapsed_ns(util::kEarliestUnixNs, now) == util::kLatestUnixNs);  // saturated, not negative
  CHECK(util::elapsed_ns(now - 7 * kNs, now) == 7 * kNs);
  // gc's grace: a date years ahead is not believed; one a few seconds ahead (another host's
  // clock) counts as now.
  CHECK(util::older_than(k2036 * kNs, now, 3600 * kNs));
  CHECK(util::older_than(util::kLatestUnixNs, now, 3600 * kNs));
  CHECK_FALSE(util::older_than(now + 5 * kNs, now, 3600 * kNs));
  CHECK(util::older_than(now + 5 * kNs, now, 0));
  CHECK_FALSE(util::older_than(now - 5 * kNs, now, 3600 * kNs));

  const std::int64_t years = (k2036 * kNs - now) / kNs / (365 * 86400);
  CHECK(format_time_from_now(k2036 * kNs) == "in " + std::to_string(years) + "y");
  CHECK(format_time_from_now(util::kLatestUnixNs) == "in the future");
  CHECK(format_time_from_now(now - 3 * 86400 * kNs - kNs) == "3d ago");
  CHECK(format_time_from_now(now - 400 * 86400 * kNs) == "1y ago");
}

TEST_CASE("least recently used during a publication: a lease dated 2036 or 2300 counts as used now, then ages",
          "[store][capacity][clock]") {
  test::TempDir dir;
  auto roomy = *Store::open(test::test_config(dir.path()));
  const Key in_2036 = test::store_key(1), in_2300 = test::store_key(2), an_hour_ago = test::store_key(3);
  for (const Key& k : {in_2036, in_2300, an_hour_ago})
    REQUIRE(test::publish_raw(*roomy, k, test::raw_model(1)).result == PublishResult::published);
  auto lease = [&](const Key& k) { return roomy->entry_path(key_id(k)) + "/lease"; };
  set_mtime(lease(in_2036), k2036);
  set_mtime(lease(in_2300), k2300);
  set_mtime(lease(an_hour_ago), util::now_unix_ns() / kNs - 3600);

  // Room for three: the fourth evicts one, the least recently used, which is the one used an
  // hour ago. (The 2300 lease wrapped to 1861 and went first.)
  const std::uint64_t entry = total_bytes(*roomy).value() / 3;
  Config tight = test::test_config(dir.path());
  tight.capacity_bytes = 3 * entry + entry / 2;
  auto store = *Store::open(tight);
  const std::int64_t before = util::now_unix_ns();
  auto fourth = test::publish_raw(*store, test::store_key(4), test::raw_model(1));
  REQUIRE(fourth.result == PublishResult::published);
  REQUIRE(fourth.evicted.size() == 1);
  CHECK(fourth.evicted[0].id == key_id(an_hour_ago));
  // The future leases now say when they were counted as used: they age from here.
  for (const Key& k : {in_2036, in_2300}) {
    const std::int64_t t = mtime_ns(lease(k));
    CHECK(t >= before - 20'000'000);  // the file clock is coarse
    CHECK(t <= util::now_unix_ns());
  }
  // So once the fourth has been used since, the next publication evicts one of them, not the
  // fourth (2036 used to outlive every other entry).
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the file clock is coarse
  REQUIRE(store->lookup(test::store_key(4)).result == LookupResult::hit);
  auto fifth = test::publish_raw(*store, test::store_key(5), test::raw_model(1));
  REQUIRE(fifth.result == PublishResult::published);
  REQUIRE(fifth.evicted.size() == 1);
  CHECK((fifth.evicted[0].id == key_id(in_2036) || fifth.evicted[0].id == key_id(in_2300)));
  CHECK(test::path_exists(store->entry_path(key_id(test::store_key(4)))));
}
