// Every storage failure, at every operation, ends in a clean outcome: the publication fails or is
// skipped with the reason, nothing half-written is ever used, and a later load is a miss or an
// exact hit.
#include <cerrno>

#include "snapcache/snapshot.h"
#include "support/catch.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"
#include "util/fault_injection.h"

using namespace snapcache;

namespace {

std::size_t entries_in(const std::string& dir) { return test::count_entries(dir + "/entries", true); }
std::size_t tmp_in(const std::string& dir) { return test::count_entries(dir + "/tmp"); }

}  // namespace

TEST_CASE("a fault at any operation of a publication leaves no entry and no debris", "[store][faults]") {
  const std::vector<int> errnos = {ENOSPC, EIO, EROFS, EACCES, EDQUOT};
  const std::vector<FsOp> ops = {FsOp::open, FsOp::pwrite, FsOp::fsync, FsOp::fsync_directory, FsOp::allocate,
                                 FsOp::rename, FsOp::make_directory, FsOp::stat, FsOp::fstat, FsOp::space,
                                 FsOp::lock, FsOp::list_directory};
  NamedTensors tensors = test::model_tensors(21, 1);
  for (FsOp op : ops) {
    for (int err : errnos) {
      // Fail the first, then (in a second round) a later, call of this operation.
      for (int skip : {0, 2}) {
        test::TempDir dir;
        auto fs = std::make_shared<FaultInjectingFileSystem>();
        auto store = *Store::open(test::test_config(dir.path()), fs);
        fs->inject({op, err, skip, 1, false, ""});
        PublishOptions options;
        options.chunk_size = 128 * 1024;
        auto out = publish_tensors(*store, test::test_key(21), tensors, options);
        INFO(to_string(op) << " errno " << err << " skip " << skip << ": " << to_string(out.result) << " "
                           << out.status.to_string());
        if (fs->faults_fired() == 0) continue;  // this operation is not reached that often
        fs->clear_faults();
        if (out.result == PublishResult::published) {
          // Only faults after the commit (the parent fsync) may leave a published entry, and
          // then a whole one.
          CHECK((op == FsOp::fsync_directory || op == FsOp::list_directory || op == FsOp::stat ||
                 op == FsOp::space));
        } else {
          CHECK((out.result == PublishResult::failed || out.result == PublishResult::skipped));
          CHECK_FALSE(out.status.is_ok());
          CHECK(entries_in(dir.path()) == 0);
        }
        CHECK(tmp_in(dir.path()) == 0);
        auto loaded = load_tensors(*store, test::test_key(21));
        if (loaded.lookup.result == LookupResult::hit) CHECK(test::same_tensors(loaded.tensors, tensors));
        else CHECK(loaded.lookup.result == LookupResult::miss);
      }
    }
  }
}

TEST_CASE("short writes are completed and not mistaken for success or failure", "[store][faults]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  fs->inject({FsOp::pwrite, 0, 0, -1, true, ""});  // every write transfers half
  NamedTensors tensors = test::model_tensors(22, 1);
  auto out = publish_tensors(*store, test::test_key(22), tensors);
  INFO(out.status.to_string());
  REQUIRE(out.result == PublishResult::published);
  CHECK(fs->faults_fired() > 10);
  fs->clear_faults();
  auto loaded = load_tensors(*store, test::test_key(22), nullptr, VerifyPolicy::always_rehash);
  REQUIRE(loaded.lookup.result == LookupResult::hit);
  CHECK(test::same_tensors(loaded.tensors, tensors));
}

TEST_CASE("a fault at any operation of a load falls back without reusing or losing a good entry", "[store][faults]") {
  const std::vector<FsOp> ops = {FsOp::open, FsOp::pread, FsOp::stat, FsOp::fstat, FsOp::map, FsOp::lock};
  NamedTensors tensors = test::model_tensors(23, 1);
  for (FsOp op : ops) {
    for (int err : {EIO, EACCES, ENOMEM}) {
      test::TempDir dir;
      auto fs = std::make_shared<FaultInjectingFileSystem>();
      auto store = *Store::open(test::test_config(dir.path()), fs);
      REQUIRE(publish_tensors(*store, test::test_key(23), tensors).result == PublishResult::published);
      fs->inject({op, err, 0, 1, false, ""});
      auto loaded = load_tensors(*store, test::test_key(23), nullptr, VerifyPolicy::always_rehash);
      INFO(to_string(op) << " errno " << err << ": " << to_string(loaded.lookup.result) << " " << loaded.lookup.reason);
      if (fs->faults_fired() == 0) continue;
      CHECK(loaded.lookup.result != LookupResult::hit);
      CHECK(loaded.tensors.empty());
      CHECK((loaded.lookup.result == LookupResult::fallback || loaded.lookup.result == LookupResult::miss));
      // An I/O failure is not damage: the good entry survives and the next load hits.
      fs->clear_faults();
      auto again = load_tensors(*store, test::test_key(23));
      REQUIRE(again.lookup.result == LookupResult::hit);
      CHECK(test::same_tensors(again.tensors, tensors));
    }
  }
}

TEST_CASE("a read-only cache directory falls back cleanly", "[store][faults]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  for (FsOp op : {FsOp::make_directory, FsOp::open, FsOp::rename}) fs->inject({op, EROFS, 0, -1, false, ""});
  auto out = publish_tensors(*store, test::test_key(24), test::model_tensors(24));
  CHECK(out.result == PublishResult::failed);
  CHECK(out.status.code() == StatusCode::read_only);
  auto loaded = load_tensors(*store, test::test_key(24));
  CHECK((loaded.lookup.result == LookupResult::miss || loaded.lookup.result == LookupResult::fallback));
}
