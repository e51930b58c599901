// The I/O fault sweep (issue 10's harness): for publication, load, verify, evict and gc, fail the
// k-th call of every file-system operation they make, with each errno, one fault per trial. Each
// trial must end cleanly (an error or a fallback, never a crash), the fault must have fired, and
// afterwards the cache must still be sound: a lookup hits with the published bytes or misses,
// never hits with other bytes, and an I/O error never costs a good entry.
//
// CI runs the short sweep (two errnos, every third call). The long one, every call with six
// errnos: SNAPCACHE_FAULT_SWEEP=long build/default/tests/snapcache_store_tests "[sweep]"
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "support/fault_injection.h"

using namespace snapcache;

namespace {

struct Sweep {
  std::vector<int> errnos;
  std::uint64_t every = 1;  // fail call k for k = 0, every, 2 * every, ... and the last
};

Sweep sweep_from_environment() {
  const char* mode = std::getenv("SNAPCACHE_FAULT_SWEEP");
  if (mode != nullptr && std::string(mode) == "long") return {{ENOSPC, EIO, EROFS, EACCES, EDQUOT, ENOMEM}, 1};
  return {{EIO, ENOSPC}, 3};
}

// One operation under test, on a cache that holds `model` published under `key` (unless the
// operation is the publication itself).
struct Operation {
  std::string name;
  bool needs_entry = true;
  std::function<void(Store&, const Key&, const test::RawModel&)> run;
};

struct Counts {
  std::uint64_t trials = 0;
  std::uint64_t ended_in_error = 0;
};

std::vector<Operation> operations() {
  return {
      {"publication", false,
       [](Store& s, const Key& k, const test::RawModel& m) {
         PublishOptions options;
         options.chunk_size = 128 * 1024;  // several chunks, several writes
         (void)test::publish_raw(s, k, m, options);
       }},
      {"load", true,
       [](Store& s, const Key& k, const test::RawModel& m) {
         LookupOutcome out = s.lookup(k, VerifyPolicy::always_rehash);
         if (out.result == LookupResult::hit) CHECK(test::same_data(*out.snapshot, m));
       }},
      {"verify", true,
       [](Store& s, const Key& k, const test::RawModel&) {
         VerifyReport r = verify_entry(s, key_id(k));
         // An I/O error says nothing about the entry: reported as damage, `verify --repair` would
         // remove a good entry.
         if (!r.status.is_ok()) CHECK_FALSE(is_entry_damage(r.status.code()));
       }},
      {"evict", true,
       [](Store& s, const Key&, const test::RawModel&) {
         EvictRequest all;
         all.all = true;
         (void)evict(s, all);
       }},
      {"gc", true,
       [](Store& s, const Key&, const test::RawModel&) {
         GarbageOptions options;
         options.grace_seconds = 0;
         (void)collect_garbage(s, options);
       }},
  };
}

// Calls of each operation kind a clean run makes.
std::vector<std::uint64_t> clean_calls(const Operation& op, const test::RawModel& model) {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  const Key key = test::store_key(61);
  if (op.needs_entry) REQUIRE(test::publish_raw(*store, key, model).result == PublishResult::published);
  fs->reset_counters();
  op.run(*store, key, model);
  std::vector<std::uint64_t> calls;
  for (int i = 0; i < kFileSystemCalls; ++i) calls.push_back(fs->calls(static_cast<FsOp>(i)));
  return calls;
}

}  // namespace

TEST_CASE("a fault at the k-th call of any file-system operation leaves a sound cache", "[store][faults][sweep]") {
  const Sweep sweep = sweep_from_environment();
  const test::RawModel model = test::raw_model(61, 1);
  for (const Operation& op : operations()) {
    Counts counts;
    const std::vector<std::uint64_t> calls = clean_calls(op, model);
    for (int o = 0; o < kFileSystemCalls; ++o) {
      const FsOp fs_op = static_cast<FsOp>(o);
      const std::uint64_t n = calls[static_cast<std::size_t>(o)];
      std::vector<std::uint64_t> ks;
      for (std::uint64_t k = 0; k < n; k += sweep.every) ks.push_back(k);
      if (n > 0 && ks.back() != n - 1) ks.push_back(n - 1);
      for (std::uint64_t k : ks) {
        for (int err : sweep.errnos) {
          INFO(op.name << ": " << to_string(fs_op) << " call " << k << " of " << n << " fails with errno " << err);
          test::TempDir dir;
          auto fs = std::make_shared<FaultInjectingFileSystem>();
          auto store = *Store::open(test::test_config(dir.path()), fs);
          const Key key = test::store_key(61);
          if (op.needs_entry) REQUIRE(test::publish_raw(*store, key, model).result == PublishResult::published);
          fs->inject({fs_op, err, static_cast<int>(k), 1, false, ""});
          op.run(*store, key, model);
          REQUIRE(fs->faults_fired() == 1);  // a trial whose fault did not fire proves nothing
          fs->clear_faults();
          ++counts.trials;

          // The cache is sound: the entry is whole or gone, and an I/O error cost no good entry
          // (only evict and gc may remove it, and only on purpose).
          LookupOutcome after = store->lookup(key, VerifyPolicy::always_rehash);
          if (after.result == LookupResult::hit) CHECK(test::same_data(*after.snapshot, model));
          else CHECK(after.result == LookupResult::miss);
          if (op.needs_entry && op.name != "evict") CHECK(after.result == LookupResult::hit);
          if (after.result != LookupResult::hit) ++counts.ended_in_error;
        }
      }
    }
    INFO(op.name);
    CHECK(counts.trials > 0);
    WARN(op.name << ": " << counts.trials << " trials, " << counts.ended_in_error << " without the entry afterwards");
  }
}
