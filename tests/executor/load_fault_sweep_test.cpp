// The I/O fault sweep over a whole warm load_model: the lookup, the entry's checks, its lease and
// mapping, and the staged read of its data files by the upload engine's host half (which reads
// through the store's FileSystem as the CUDA engine does). For every file-system operation a
// clean warm load makes, fail its k-th call, one fault per trial: the fault must fire, the load
// must succeed with the reference's bytes (from the snapshot, or from the checkpoint after a
// fallback), and the cache must stay sound (the next load hits or publishes again, identically).
//
// CI runs the short sweep (EIO, every third call); every call with six errnos:
// SNAPCACHE_FAULT_SWEEP=long build/default/tests/loaders/snapcache_pipeline_tests "[load-sweep]"
#include <cerrno>
#include <cstdlib>

#include "support/demo_fixture.h"
#include "snapcache/maintenance.h"
#include "support/fault_injection.h"
#include "support/host_staging.h"

using namespace snapcache;

namespace {

struct SweepFixture : test::DemoFixture {
  SweepFixture() {
    config.hidden = 1024;  // conversions of 1 MiB and more stay pending: the staged read transposes
    config.layers = 1;
    REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok());
  }
  LoadPlan staged_plan() const {
    LoadPlan p = plan();
    p.uploader = std::make_shared<test::HostStagingUploader>();
    return p;
  }
};

// A store on a fault-injecting file system holding the fixture's entry, published by a cold load.
std::pair<std::shared_ptr<Store>, std::shared_ptr<FaultInjectingFileSystem>> cache_with_entry(const SweepFixture& f,
                                                                                               const test::TempDir& dir) {
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir / "cache"), fs);
  auto cold = load_model(store.get(), f.staged_plan());
  REQUIRE(cold.is_ok());
  REQUIRE(cold->report.path == LoadPath::miss);
  REQUIRE(cold->publication.wait().outcome() == std::string_view("published"));
  return {store, fs};
}

}  // namespace

TEST_CASE("a fault at the k-th file-system call of a warm load_model, staged read included, costs nothing",
          "[pipeline][faults][load-sweep]") {
  const char* mode = std::getenv("SNAPCACHE_FAULT_SWEEP");
  const bool long_sweep = mode != nullptr && std::string(mode) == "long";
  const std::vector<int> errnos = long_sweep ? std::vector<int>{ENOSPC, EIO, EROFS, EACCES, EDQUOT, ENOMEM}
                                             : std::vector<int>{EIO};
  const std::uint64_t every = long_sweep ? 1 : 3;

  SweepFixture f;
  const NamedTensors reference = f.reference().weights;

  // The calls of a clean warm load, per operation.
  std::vector<std::uint64_t> calls;
  {
    test::TempDir dir;
    auto [store, fs] = cache_with_entry(f, dir);
    fs->reset_counters();
    auto warm = load_model(store.get(), f.staged_plan());
    REQUIRE(warm.is_ok());
    REQUIRE(warm->report.path == LoadPath::hit);
    REQUIRE(demo::identical(warm->weights, reference));
    for (int o = 0; o < kFileSystemCalls; ++o) calls.push_back(fs->calls(static_cast<FsOp>(o)));
  }
  REQUIRE(calls[static_cast<int>(FsOp::pread)] > 0);  // the staged read goes through the seam

  int trials = 0, fell_back = 0, staged_read_failed = 0;
  for (int o = 0; o < kFileSystemCalls; ++o) {
    const FsOp op = static_cast<FsOp>(o);
    const std::uint64_t n = calls[static_cast<std::size_t>(o)];
    std::vector<std::uint64_t> ks;
    for (std::uint64_t k = 0; k < n; k += every) ks.push_back(k);
    if (n > 0 && ks.back() != n - 1) ks.push_back(n - 1);
    for (std::uint64_t k : ks) {
      for (int err : errnos) {
        INFO("warm load: " << to_string(op) << " call " << k << " of " << n << " fails with errno " << err);
        test::TempDir dir;
        auto [store, fs] = cache_with_entry(f, dir);
        fs->reset_counters();
        fs->inject({op, err, static_cast<int>(k), 1, false, ""});
        auto loaded = load_model(store.get(), f.staged_plan());
        if (loaded.is_ok() && loaded->publication.started()) (void)loaded->publication.wait();
        REQUIRE(fs->faults_fired() == 1);  // a trial whose fault did not fire proves nothing
        fs->clear_faults();
        ++trials;
        // A storage failure is never the load's failure: it serves the reference's bytes.
        REQUIRE(loaded.is_ok());
        CHECK(demo::identical(loaded->weights, reference));
        const LoadReport& r = loaded->report;
        if (r.path != LoadPath::hit) ++fell_back;
        // The engine's stage failed and the plain copy served (on the CPU it records no stage).
        for (const auto& s : r.stages)
          if (s.stage == "upload" && !s.error.empty()) ++staged_read_failed;

        // Sound afterwards: the next load hits (or, if the entry was set aside, misses and publishes)
        // with the same bytes, and every entry left verifies.
        auto next = load_model(store.get(), f.staged_plan());
        REQUIRE(next.is_ok());
        if (next->publication.started()) (void)next->publication.wait();
        CHECK(demo::identical(next->weights, reference));
        wait_for_publications();
        auto entries = list_entries(*store);
        REQUIRE(entries.is_ok());
        for (const auto& e : *entries) CHECK(verify_entry(*store, e.id).status.is_ok());
      }
    }
  }
  CHECK(trials > 0);
  CHECK(staged_read_failed > 0);  // some faults hit the staged read, and the load still served
  WARN(trials << " trials; " << fell_back << " loads not served from the snapshot; " << staged_read_failed
              << " with the staged read failing");
}
