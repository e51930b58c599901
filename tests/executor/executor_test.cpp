// The load executor's seams on the demo model: the tiers a load tried and what each answered, a
// tier that serves prepared device tensors, the uploader seam and what it is told about the host
// storages, stages that fail, and exceptions from every hook becoming a Status.
#include <ATen/Functions.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "support/demo_fixture.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/extend/tier.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/printable.h"
#include "snapcache/text.h"
#include "support/captured_stderr.h"
#include "support/host_copies.h"
#include "support/page_cache.h"

using namespace snapcache;

namespace {

// "snapshot missed, ordinary served": each tier tried and its answer.
std::string tiers_of(const LoadReport& report) {
  std::string out;
  for (const auto& t : report.tiers) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", t.tier, to_string(t.outcome));
  return out;
}

bool has_stage(const LoadReport& report, const std::string& stage) {
  return std::any_of(report.stages.begin(), report.stages.end(), [&](const StageTime& s) { return s.stage == stage; });
}

const StageTime& stage_named(const LoadReport& report, const std::string& stage) {
  for (const auto& s : report.stages)
    if (s.stage == stage) return s;
  FAIL("no stage " << stage);
  return report.stages.front();
}

// A tier in front of the others that serves what it was given, as a GPU donor would: prepared
// (post-load applied) tensors already on the plan's device.
class PreparedTier final : public Tier {
 public:
  explicit PreparedTier(NamedTensors prepared) : prepared_(std::move(prepared)) {}
  std::string name() const override { return "prepared"; }
  Result<TierAnswer> serve(LoadContext&) override {
    ++served;
    return TierAnswer::served(prepared_, Residence::device_prepared, Provenance::cache, "held prepared");
  }
  int served = 0;

 private:
  NamedTensors prepared_;
};

// A tier in front of the others that serves host tensors it was given, as a tier of a user's own
// would, saying or not that it checked them against the plan's layout.
class HostTier final : public Tier {
 public:
  HostTier(NamedTensors tensors, bool checked) : tensors_(std::move(tensors)), checked_(checked) {}
  std::string name() const override { return "host"; }
  Result<TierAnswer> serve(LoadContext&) override {
    TierAnswer served = TierAnswer::served(tensors_, Residence::host, Provenance::cache, "held on the host");
    served.layout_checked = checked_;
    return served;
  }

 private:
  NamedTensors tensors_;
  bool checked_;
};

class ThrowingTier final : public Tier {
 public:
  std::string name() const override { return "throwing"; }
  Result<TierAnswer> serve(LoadContext&) override { throw std::runtime_error("the donor socket went away"); }
};

// Counts its calls and what it was told about the storages, then delegates to the default.
class RecordingUploader final : public Uploader {
 public:
  std::string name() const override { return "recording"; }
  void expect(std::uint64_t bytes, c10::Device device) override {
    events.push_back(fmt::format("expect {} bytes onto {}", bytes, device.str()));
  }
  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& storages, c10::Device device) override {
    ++calls;
    events.emplace_back("upload");
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const HostStorage& s = storages.storages[storages.storage_of[i]];
      written[tensors[i].first] = s.written_by_post_load;
      in_file[tensors[i].first] = s.file.has_value();
    }
    return per_storage_uploader()->upload(tensors, storages, device);
  }
  int calls = 0;
  std::map<std::string, bool> written;
  std::map<std::string, bool> in_file;  // an uploader may read it from the snapshot's data file
  std::vector<std::string> events;  // expect and upload, in order
};

// A tier in front of the others that notes that it was asked, and passes.
class NotingTier final : public Tier {
 public:
  explicit NotingTier(std::vector<std::string>& events) : events_(events) {}
  std::string name() const override { return "noting"; }
  Result<TierAnswer> serve(LoadContext&) override {
    events_.emplace_back("tier asked");
    return TierAnswer::skipped("it only notes");
  }

 private:
  std::vector<std::string>& events_;
};

class FailingUploader final : public Uploader {
 public:
  std::string name() const override { return "failing"; }
  Result<Uploaded> upload(const NamedTensors&, const HostStorages&, c10::Device) override {
    ++calls;
    return Status(StatusCode::no_space, "device out of memory");
  }
  int calls = 0;
};

class CountingMethod final : public PostLoadMethod {
 public:
  std::string name() const override { return "counting"; }
  std::vector<std::string> targets(const NamedTensors&) const override { return {}; }
  Status apply(NamedTensors&) const override {
    ++calls;
    return Status::ok();
  }
  mutable int calls = 0;
};

// Scales final_norm.weight in place, declaring (by default) that it may write in place.
class InPlaceMethod final : public PostLoadMethod {
 public:
  std::string name() const override { return "in-place"; }
  std::vector<std::string> targets(const NamedTensors&) const override { return {"final_norm.weight"}; }
  Status apply(NamedTensors& tensors) const override {
    for (auto& [name, t] : tensors)
      if (name == "final_norm.weight") t.mul_(1);
    return Status::ok();
  }
};

class ThrowingMethod final : public PostLoadMethod {
 public:
  std::string name() const override { return "throwing"; }
  std::vector<std::string> targets(const NamedTensors&) const override { return {}; }
  Status apply(NamedTensors& tensors) const override {
    // A libtorch error, as a real method would hit one: matmul of mismatched shapes.
    (void)at::matmul(tensors.front().second, at::ones({7, 3}, tensors.front().second.options()));
    return Status::ok();
  }
};

// Collects the library's log lines for the duration of a test.
struct LogCapture {
  std::mutex mutex;
  std::string text;
  LogLevel before = log_level();
  LogCapture() {
    set_log_level(LogLevel::warn);
    set_log_sink([this](LogLevel, std::string_view line) {
      std::lock_guard lock(mutex);
      text += std::string(line) + "\n";
    });
  }
  ~LogCapture() {
    set_log_sink({});
    set_log_level(before);
  }
};

}  // namespace

TEST_CASE("the report's table adds up: time no stage timed has a line of its own", "[executor]") {
  LoadReport report;
  report.stages = {{"lookup", 0.004, 0, ""}, {"upload", 0.006, 1 << 20, ""}};
  report.seconds = 0.025;
  std::vector<std::string> lines = report.table_lines();
  REQUIRE(lines.size() == 5);
  CHECK(lines[3].find("outside the stages") != std::string::npos);
  CHECK(lines[3].find("15.0") != std::string::npos);
  CHECK(lines[4].find("total") != std::string::npos);
  CHECK(lines[4].find("25.0") != std::string::npos);

  // Stages that take the whole load: no such line.
  report.seconds = 0.0101;
  lines = report.table_lines();
  REQUIRE(lines.size() == 4);
  CHECK(lines[3].find("total") != std::string::npos);
}

TEST_CASE("the report lists every tier tried with its answer", "[executor]") {
  test::DemoFixture f;
  auto store = f.store();
  auto cold = load_model(store.get(), f.plan());
  REQUIRE(cold.is_ok());
  CHECK(tiers_of(cold->report) == "snapshot missed, ordinary served");
  CHECK(cold->report.tiers[0].reason.find("this model's first load") != std::string::npos);
  // A CPU load hands its host tensors out: the background publication writes only the bytes they
  // had then (their fingerprint), and the load does not wait for it.
  CHECK(has_stage(cold->report, "fingerprint for the publication"));
  CHECK(!has_stage(cold->report, "copy for the publication"));
  CHECK(has_stage(cold->report, "publish (started)"));
  CHECK(!has_stage(cold->report, "publish (wait: the published host tensors are handed out)"));
  wait_for_publications();
  // The table's columns line up however long a stage's name: each time ends under "ms".
  const std::vector<std::string> lines = cold->report.table_lines();
  const std::size_t ms_end = lines[0].find(" ms") + 3;
  for (std::size_t i = 1; i <= cold->report.stages.size() + 1; ++i) {
    INFO(lines[i]);
    REQUIRE(lines[i].size() >= ms_end);
    CHECK(std::isdigit(static_cast<unsigned char>(lines[i][ms_end - 1])));
    CHECK((lines[i].size() == ms_end || lines[i][ms_end] == ' '));
  }

  auto warm = load_model(store.get(), f.plan());
  REQUIRE(warm.is_ok());
  CHECK(tiers_of(warm->report) == "snapshot served");
  CHECK(!has_stage(warm->report, "ordinary load"));

  auto none = load_model(nullptr, f.plan());
  REQUIRE(none.is_ok());
  CHECK(tiers_of(none->report) == "snapshot skipped, ordinary served");
  CHECK(none->report.path == LoadPath::ineligible);
}

TEST_CASE("the report says how much of an entry came from the disk, and how fast the stages that read it went",
          "[executor]") {
  LoadReport report;
  report.path = LoadPath::hit;
  report.bytes_checked = 16ull << 30;
  report.file_bytes = 16ull << 30;
  CHECK(report.page_cache().empty());  // every byte was in the page cache
  report.bytes_from_disk = 8ull << 30;
  // No stage read the entry (a CPU hit hands out tensors over its mapping): its pages come from the
  // disk when the caller first reads them, at no rate this load could know.
  const std::string on_first_use =
      "8.0 GiB of 16.0 GiB not in the page cache: read from the disk as the tensors handed out are first used";
  CHECK(report.page_cache() == on_first_use);
  // Nor did an upload that moved nothing: its bytes over no time would make a rate of nothing.
  report.stages.push_back({"upload", 0.000001, 0, ""});
  CHECK(report.page_cache() == on_first_use);
  // A read-ahead for the post-load methods reads their targets, not the entry: its time, no rate.
  report.stages.push_back({"read-ahead", 2.0, 1'000'000'000, ""});
  CHECK(report.page_cache() == on_first_use + ", and for the post-load methods during the read-ahead (2.00 s)");
  report.stages.clear();
  report.stages.push_back({"upload (fallback)", 1.0, 1'000'000'000, ""});  // not a stage that reads the entry
  report.stages.push_back({"upload", 4.0, 16'000'000'000, ""});
  CHECK(report.page_cache() ==
        "8.0 GiB of 16.0 GiB not in the page cache, read from the disk during the upload (4.00 s, 2.15 GB/s)");
  CHECK(report.summary().find("; 8.0 GiB of 16.0 GiB not in the page cache") != std::string::npos);
  // A read-ahead brought part of it in first: the upload then reads those bytes from the page cache,
  // and the disk's rate is over both stages (on the GPU machine the upload's own rate had said 5.93
  // GB/s of a disk that gave 1.75).
  report.stages.insert(report.stages.begin(), {"read-ahead", 6.0, 10'000'000'000, ""});
  CHECK(report.page_cache() ==
        "8.0 GiB of 16.0 GiB not in the page cache, read from the disk during the read-ahead and the upload "
        "(10.00 s, 0.86 GB/s)");

  // Few of the entry's bytes from the disk: the stages' time, no rate (a few MiB over seconds of
  // other work says nothing of the disk).
  report.bytes_from_disk = 255ull << 20;
  CHECK(report.page_cache() ==
        "255.0 MiB of 16.0 GiB not in the page cache, read from the disk during the read-ahead and the upload "
        "(10.00 s)");

  // From the checkpoint: the loader reads what it needs of it (a TP rank, its slices), so the line
  // gives the stages' time and no rate; the read-ahead for post-load, post-load and the upload read
  // the rest. The read-ahead alongside the loader is in the loader's time: not counted again.
  report.path = LoadPath::miss;
  report.bytes_from_disk = 8ull << 30;
  report.stages = {{"key", 0.5, 0, ""},
                   {"lookup", 0.5, 0, ""},
                   {"checkpoint read-ahead (with the loader)", 2.9, 16'000'000'000, ""},
                   {"ordinary load", 3.0, 16'000'000'000, ""},
                   {"read-ahead", 6.0, 0, ""},
                   {"post-load", 0.5, 0, ""},
                   {"upload", 4.5, 16'000'000'000, ""}};
  CHECK(report.page_cache() ==
        "8.0 GiB of the checkpoint's 16.0 GiB not in the page cache as the loader started: what the load read of it "
        "came from the disk, during the ordinary load, the read-ahead, the post-load and the upload (14.00 s)");
  // A streaming loader's parts went through post-load and the upload while it ran (their stages
  // overlap its own); what was left after it is the rest of the reading.
  report.stages = {{"ordinary load", 7.0, 16'000'000'000, ""},
                   {"post-load", 6.5, 0, ""},
                   {"upload", 6.0, 16'000'000'000, ""},
                   {"upload (after the loader)", 1.0, 0, ""}};
  CHECK(report.page_cache() ==
        "8.0 GiB of the checkpoint's 16.0 GiB not in the page cache as the loader started: what the load read of it "
        "came from the disk, during the ordinary load and the upload (after the loader) (8.00 s)");
}

TEST_CASE("a CPU load reports no upload: the plain copy hands its tensors out as they are", "[executor][disk]") {
  test::DemoFixture f;
  auto store = f.store();
  // A CPU load hands out tensors over the entry's mapping, and no drop takes a page that is mapped:
  // each load is let go of before the drop.
  for (LoadPath expected : {LoadPath::miss, LoadPath::hit}) {
    auto loaded = load_model(store.get(), f.plan());
    REQUIRE(loaded.is_ok());
    (void)loaded->publication.wait();
    INFO(loaded->report.summary());
    CHECK(loaded->report.path == expected);
    CHECK_FALSE(has_stage(loaded->report, "upload"));
    CHECK(loaded->report.summary().find("upload") == std::string::npos);
    CHECK(has_stage(loaded->report, "post-load"));  // the stages that ran are all there
  }
  const auto data_files = test::data_files_under(store->config().directory);
  REQUIRE_FALSE(data_files.empty());
  double left = 0;
  for (const auto& file : data_files) left = std::max(left, test::drop_from_page_cache(file, 0, 0));
  if (left > 0.75) {
    WARN("SKIPPED: this file system keeps its files in memory (tmpfs)");
    return;
  }
  // The entry off the page cache: the hit says so, reads the methods' targets ahead, and gives no
  // rate, since no stage of the load read the entry.
  auto warm = load_model(store.get(), f.plan());
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(warm->report.bytes_from_disk > warm->report.file_bytes / 2);
  const std::string said = warm->report.page_cache();
  INFO(said);
  CHECK(said.find("not in the page cache: read from the disk as the tensors handed out are first used") !=
        std::string::npos);
  CHECK(said.find("GB/s") == std::string::npos);
  CHECK(said.find("upload") == std::string::npos);
  CHECK_FALSE(has_stage(warm->report, "upload"));
}

TEST_CASE("a load from the checkpoint says how much of the checkpoint was not in the page cache", "[executor][disk]") {
  test::DemoFixture f;
  const std::uint64_t size = std::filesystem::file_size(f.checkpoint);
  // A CPU load hands out tensors over the checkpoint's mapping, and no drop takes a page that is
  // mapped: each load is let go of before the next drop.
  {  // Just written: every page in the page cache, nothing to say.
    auto cached = load_model(nullptr, f.plan());
    REQUIRE(cached.is_ok());
    CHECK(cached->report.file_bytes == size);
    CHECK(cached->report.bytes_from_disk == 0);
    CHECK(cached->report.page_cache().empty());
  }
  // The checkpoint's second half dropped: about half of it came from the disk, and the line says
  // during which stages.
  if (test::drop_from_page_cache(f.checkpoint, size / 2, 0) > 0.75) {
    WARN("SKIPPED: this file system keeps its files in memory (tmpfs)");
    return;
  }
  auto store = f.store();
  {
    auto cold = load_model(store.get(), f.plan());
    REQUIRE(cold.is_ok());
    (void)cold->publication.wait();
    REQUIRE(cold->report.path == LoadPath::miss);
    CHECK(cold->report.file_bytes == size);
    const double share = static_cast<double>(cold->report.bytes_from_disk) / static_cast<double>(size);
    CHECK(share > 0.4);
    CHECK(share < 0.6);
    const std::string said = cold->report.page_cache();
    INFO(said);
    CHECK(said.starts_with(format_size(cold->report.bytes_from_disk) + " of the checkpoint's " + format_size(size) +
                           " not in the page cache as the loader started: what the load read of it came from the "
                           "disk, during the ordinary load"));
    CHECK(said.ends_with(" s)"));
    CHECK(cold->report.summary().find(said) != std::string::npos);
  }
  // The whole checkpoint dropped, a load without a cache: all of it. Then a hit, which reads the
  // entry and not the checkpoint, speaks of the entry's files (just written: in the page cache).
  REQUIRE(test::drop_from_page_cache(f.checkpoint, 0, 0) < 0.25);
  {
    auto ordinary = load_model(nullptr, f.plan());
    REQUIRE(ordinary.is_ok());
    CHECK(ordinary->report.bytes_from_disk > size * 9 / 10);
    CHECK(ordinary->report.bytes_from_disk <= size);
  }
  auto warm = load_model(store.get(), f.plan());
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(warm->report.file_bytes > 0);
  CHECK(warm->report.file_bytes != size);
  CHECK(warm->report.page_cache().empty());
}

TEST_CASE("a stage that fails appears in the report with its error, and the load goes on to the next tier",
          "[executor]") {
  test::DemoFixture f;
  auto store = f.store();
  REQUIRE(load_model(store.get(), f.plan()).is_ok());
  wait_for_publications();
  auto entries = list_entries(*store);
  REQUIRE(entries.is_ok());
  REQUIRE(entries->size() == 1);
  test::write_bytes((*entries)[0].path + "/manifest.snap", "SNAPCACHE-MANIF not a manifest");
  auto loaded = load_model(store.get(), f.plan());
  REQUIRE(loaded.is_ok());
  CHECK(loaded->report.path == LoadPath::fallback);
  CHECK(tiers_of(loaded->report) == "snapshot unusable, ordinary served");
  const StageTime& lookup = stage_named(loaded->report, "lookup");
  CHECK(lookup.error.find("manifest") != std::string::npos);
  CHECK(loaded->report.table().find("failed: ") != std::string::npos);
  CHECK(stage_named(loaded->report, "ordinary load").error.empty());
}

TEST_CASE("a tier that serves prepared device tensors skips post-load and upload", "[executor]") {
  test::DemoFixture f;
  LoadedModel ref = f.reference();
  auto prepared = std::make_shared<PreparedTier>(ref.weights);
  auto counting = std::make_shared<CountingMethod>();
  auto uploader = std::make_shared<RecordingUploader>();
  LoadPlan plan = f.plan();
  plan.tiers = {prepared, snapshot_tier(), ordinary_tier()};
  plan.post_load.push_back(counting);
  plan.uploader = uploader;
  auto store = f.store();
  auto loaded = load_model(store.get(), plan);
  REQUIRE(loaded.is_ok());
  CHECK(prepared->served == 1);
  CHECK(counting->calls == 0);
  CHECK(uploader->calls == 0);
  CHECK(loaded->report.path == LoadPath::hit);
  CHECK(loaded->report.reason == "held prepared");
  CHECK(!has_stage(loaded->report, "post-load"));
  CHECK(!has_stage(loaded->report, "upload"));
  CHECK(has_stage(loaded->report, "refresh"));  // derived buffers are still built
  CHECK(demo::identical(ref, *loaded));
  CHECK(loaded->weights.front().second.data_ptr() == ref.weights.front().second.data_ptr());  // not copied
  wait_for_publications();
  auto entries = list_entries(*store);
  REQUIRE(entries.is_ok());
  CHECK(entries->empty());  // nothing was read from the checkpoint, so nothing was published
}

TEST_CASE("served host tensors are checked against the plan's layout once: by the tier, or else by the load",
          "[executor]") {
  test::DemoFixture f;
  const LoadedModel ref = f.reference();
  LoadPlan plan = f.plan();
  auto read = run_ordinary_loader(plan);  // host tensors before post-load, as a tier serves them
  REQUIRE(read.is_ok());

  SECTION("a tier that did not check them: the load refuses what is not the plan's layout") {
    NamedTensors broken = *read;
    broken[1].second = broken[1].second.unsqueeze(0);
    plan.tiers = {std::make_shared<HostTier>(broken, false)};
    auto loaded = load_model(nullptr, plan);
    REQUIRE_FALSE(loaded.is_ok());
    INFO(loaded.status().message());
    CHECK(loaded.status().code() == StatusCode::mismatch);
    CHECK(loaded.status().message().find("the served tensors are not the plan's layout") != std::string::npos);
    CHECK(loaded.status().message().find("tensor '" + broken[1].first + "': shape") != std::string::npos);

    plan.tiers = {std::make_shared<HostTier>(*read, false)};
    auto fine = load_model(nullptr, plan);
    REQUIRE(fine.is_ok());
    CHECK(demo::identical(ref, *fine));
  }
  SECTION("the default tiers check what they serve themselves, and say so") {
    auto store = f.store();
    auto key = key_for_plan(*store, plan);
    REQUIRE(key.is_ok());
    LoadReport report;
    LoadContext load{plan, store.get(), &*key, "", report};
    auto cold = ordinary_tier()->serve(load);
    REQUIRE(cold.is_ok());
    CHECK(cold->layout_checked);
    CHECK(cold->storages.storage_of.size() == cold->tensors.size());  // described once, handed over

    auto published = load_model(store.get(), plan);
    REQUIRE(published.is_ok());
    wait_for_publications();
    auto warm = snapshot_tier()->serve(load);
    REQUIRE(warm.is_ok());
    REQUIRE(warm->outcome == TierOutcome::served);
    CHECK(warm->layout_checked);
  }
}

// Holds a publication back until release(): the entry's data file is created only then, so whatever
// the caller writes before that, the publication surely reads afterwards.
class HeldPublication : public FileSystemWrapper {
 public:
  HeldPublication() : FileSystemWrapper(posix_file_system()) {}
  using FileSystemWrapper::open;
  Result<UniqueFd> open(const std::string& path, OpenMode mode, Follow follow) override {
    if (mode != OpenMode::read && path.ends_with("/data-0000.bin")) released_.wait();
    return FileSystemWrapper::open(path, mode, follow);
  }
  void release() {
    std::call_once(once_, [&] { release_.set_value(); });
  }

 private:
  std::once_flag once_;
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
};

TEST_CASE("a CPU load's caller may change its tensors at once: the entry holds what the loader gave, or nothing",
          "[executor]") {
  test::DemoFixture f;
  auto held = std::make_shared<HeldPublication>();
  struct ReleasedAtTheEnd {  // a failed check must not leave the publication waiting for ever
    HeldPublication& held;
    ~ReleasedAtTheEnd() { held.release(); }
  } released_at_the_end{*held};
  auto store = f.store(held);
  const LoadedModel reference = f.reference();
  auto cold = load_model(store.get(), f.plan());
  REQUIRE(cold.is_ok());
  REQUIRE(cold->report.path == LoadPath::miss);
  REQUIRE(has_stage(cold->report, "fingerprint for the publication"));

  SECTION("written into before the publication reads them: nothing kept, and the next load publishes a copy") {
    // As vLLM's post-processing might: write into the tensors handed out.
    for (auto& [name, t] : cold->weights) t.fill_(7);
    held->release();
    const PublicationReport first = cold->publication.wait();
    INFO(first.status.to_string());
    CHECK(first.status.code() == StatusCode::mismatch);
    CHECK(first.status.message().find("its owner wrote into the tensors while they were published") !=
          std::string::npos);
    auto key = key_for_plan(*store, f.plan());
    REQUIRE(key.is_ok());
    CHECK(sources_changed_while_published(*store, *key));
    auto listed = list_entries(*store);
    REQUIRE(listed.is_ok());
    CHECK(listed->empty());  // nothing kept of the changed bytes

    // The key's next load publishes a copy of what it hands out: its caller's writes change nothing.
    auto again = load_model(store.get(), f.plan());
    REQUIRE(again.is_ok());
    REQUIRE(again->report.path == LoadPath::miss);
    REQUIRE(has_stage(again->report, "copy for the publication"));
    for (auto& [name, t] : again->weights) t.fill_(7);
    wait_for_publications();
  }
  SECTION("pointed at other storages (`param.data = ...`), the loader's then held by nothing else: published") {
    for (auto& [name, t] : cold->weights) t.set_data(at::full_like(t, 7));
    held->release();
    const PublicationReport published = cold->publication.wait();
    INFO(published.status.to_string());
    REQUIRE(published.status.is_ok());
  }
  auto warm = load_model(store.get(), f.plan());
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(demo::identical(reference, *warm));
}

TEST_CASE("the uploader hears how many bytes a load will bring before any tier is asked", "[executor]") {
  test::DemoFixture f;
  auto uploader = std::make_shared<RecordingUploader>();
  LoadPlan plan = f.plan();
  plan.uploader = uploader;
  plan.tiers = {std::make_shared<NotingTier>(uploader->events), snapshot_tier(), ordinary_tier()};
  // What the model declares: the demo has no alias groups, so each tensor counts once.
  std::uint64_t declared = 0;
  for (const ExpectedTensor& t : plan.expected) {
    REQUIRE(t.alias_group.empty());
    std::uint64_t bytes = element_size(t.dtype);
    for (std::int64_t d : t.sizes) bytes *= static_cast<std::uint64_t>(d);
    declared += bytes;
  }
  REQUIRE(declared > 0);
  auto store = f.store();
  const std::string expect = fmt::format("expect {} bytes onto cpu", declared);
  for (LoadPath path : {LoadPath::miss, LoadPath::hit}) {
    INFO(to_string(path));
    uploader->events.clear();
    auto loaded = load_model(store.get(), plan);
    REQUIRE(loaded.is_ok());
    CHECK(loaded->report.path == path);
    // A cold load from the demo's streaming loader uploads each part it took: one upload or more.
    REQUIRE(uploader->events.size() >= 3);
    CHECK(uploader->events[0] == expect);
    CHECK(uploader->events[1] == "tier asked");
    CHECK(std::all_of(uploader->events.begin() + 2, uploader->events.end(), [](const auto& e) { return e == "upload"; }));
    if (path == LoadPath::hit) CHECK(uploader->events.size() == 3);
  }
}

TEST_CASE("the uploader seam gets every load's host tensors and knows which storages post-load wrote",
          "[executor]") {
  test::DemoFixture f;
  auto uploader = std::make_shared<RecordingUploader>();
  LoadPlan plan = f.plan();
  plan.uploader = uploader;
  plan.post_load.push_back(std::make_shared<InPlaceMethod>());
  auto store = f.store();
  for (LoadPath expected : {LoadPath::miss, LoadPath::hit}) {
    INFO(to_string(expected));
    uploader->written.clear();
    uploader->in_file.clear();
    auto loaded = load_model(store.get(), plan);
    REQUIRE(loaded.is_ok());
    CHECK(loaded->report.path == expected);
    // On the CPU it hands the tensors out as they are (the plain copy): no upload stage.
    CHECK_FALSE(has_stage(loaded->report, "upload"));
    REQUIRE(uploader->written.size() == loaded->weights.size());
    // Converted to column-major by a method: new bytes.
    CHECK(uploader->written.at("blocks.0.attn.proj.weight"));
    CHECK(uploader->written.at("blocks.0.adaln.weight"));
    CHECK(uploader->written.at("blocks.0.mlp.down.weight_scale"));
    // Flattened (a view) or untouched: the bytes are still those the tier served.
    CHECK_FALSE(uploader->written.at("blocks.0.mlp.up.weight_scale"));
    CHECK_FALSE(uploader->written.at("blocks.0.attn.qkv.weight"));
    CHECK_FALSE(uploader->written.at("blocks.0.mlp.down.weight"));
    // A method that may write in place marks its targets.
    CHECK(uploader->written.at("final_norm.weight"));
    // Untouched storages are also in a file: the snapshot's, or the checkpoint's where the loader
    // handed on a tensor or a share of its rows as they lie there (not the fused QKV or a share of
    // columns, which it wrote). What a method wrote never is.
    const bool warm = expected == LoadPath::hit;
    CHECK(uploader->in_file.at("blocks.0.attn.qkv.weight") == warm);
    CHECK(uploader->in_file.at("blocks.0.mlp.down.weight") == warm);
    CHECK(uploader->in_file.at("blocks.0.mlp.up.weight_scale"));
    CHECK(uploader->in_file.at("blocks.0.norm1.weight"));
    CHECK_FALSE(uploader->in_file.at("blocks.0.attn.proj.weight"));
    CHECK_FALSE(uploader->in_file.at("final_norm.weight"));
  }
  CHECK(uploader->calls == 2);
}

TEST_CASE("an uploader that fails falls back to the per-storage copy and the report says why", "[executor]") {
  test::DemoFixture f;
  LoadedModel ref = f.reference();
  auto failing = std::make_shared<FailingUploader>();
  LoadPlan plan = demo::with_whole_loader(f.plan());  // one upload, after the loader
  plan.uploader = failing;
  auto loaded = load_model(nullptr, plan);
  REQUIRE(loaded.is_ok());
  CHECK(failing->calls == 1);
  CHECK(stage_named(loaded->report, "upload").error.find("device out of memory") != std::string::npos);
  // The plain copy then hands a CPU load's tensors out as they are: nothing moved, no stage.
  CHECK_FALSE(has_stage(loaded->report, "upload (fallback)"));
  CHECK(loaded->report.reason.find("(failing): device out of memory; uploaded by the per-storage copy instead") !=
        std::string::npos);
  CHECK(demo::identical(ref, *loaded));
}

TEST_CASE("exceptions from libtorch and from the plan's hooks come back as a Status", "[executor]") {
  test::DemoFixture f;
  auto store = f.store();
  LogCapture logs;

  SECTION("a post-load method") {
    LoadPlan plan = f.plan();
    plan.post_load.push_back(std::make_shared<ThrowingMethod>());
    Result<LoadedModel> loaded = Status();
    REQUIRE_NOTHROW(loaded = load_model(store.get(), plan));
    REQUIRE_FALSE(loaded.is_ok());
    CHECK(loaded.status().code() == StatusCode::exception);
    CHECK(loaded.status().message().find("post-load method throwing") != std::string::npos);
    // The failed load still logged how far it got, the failing stage with its error.
    std::lock_guard lock(logs.mutex);
    CHECK(logs.text.find("post-load") != std::string::npos);
    CHECK(logs.text.find("failed: exception") != std::string::npos);
  }
  SECTION("the ordinary loader") {
    LoadPlan plan = f.plan();
    plan.ordinary_loader = [](const LoadPlan&) -> Result<NamedTensors> { throw std::runtime_error("disk on fire"); };
    auto loaded = load_model(store.get(), plan);
    REQUIRE_FALSE(loaded.is_ok());
    CHECK(loaded.status().code() == StatusCode::exception);
    CHECK(loaded.status().message() == "ordinary loader: disk on fire");
    // Its lookup missed, then the load failed: recorded as a failure, not a miss (snapcache why).
    auto misses = recorded_misses(*store);
    REQUIRE(misses.size() == 1);
    CHECK(misses[0].failure.find("ordinary loader: disk on fire") != std::string::npos);
    // A load of the same key that goes on is a miss again.
    REQUIRE(load_model(store.get(), f.plan()).is_ok());
    misses = recorded_misses(*store);
    REQUIRE(misses.size() == 1);
    CHECK(misses[0].failure.empty());
  }
  SECTION("a refresh hook") {
    LoadPlan plan = f.plan();
    plan.refresh_hooks.push_back({"broken", [](const NamedTensors&, DerivedBuffers&, c10::Device) -> Status {
                                    throw std::logic_error("no table");
                                  }});
    auto loaded = load_model(store.get(), plan);
    REQUIRE_FALSE(loaded.is_ok());
    CHECK(loaded.status().message() == "refresh hook broken: no table");
  }
  SECTION("a tier") {
    LoadPlan plan = f.plan();
    plan.tiers = {std::make_shared<ThrowingTier>(), snapshot_tier(), ordinary_tier()};
    auto loaded = load_model(store.get(), plan);
    REQUIRE_FALSE(loaded.is_ok());
    CHECK(loaded.status().message() == "throwing tier: the donor socket went away");
  }
  SECTION("the in-place copy of a reload") {
    auto model = load_model(store.get(), f.plan());
    REQUIRE(model.is_ok());
    // A target whose elements share memory: copy_ into it is a libtorch error.
    at::Tensor& first = model->weights.front().second;
    first = at::zeros({1}, first.options()).expand(first.sizes());
    Result<LoadReport> reloaded = Status();
    REQUIRE_NOTHROW(reloaded = reload_model(store.get(), f.plan(), *model));
    REQUIRE_FALSE(reloaded.is_ok());
    CHECK(reloaded.status().code() == StatusCode::exception);
    CHECK(reloaded.status().message().find("reload: copying tensor '" + model->weights.front().first + "'") !=
          std::string::npos);
  }
}

TEST_CASE("a load whose tiers all pass says what each answered", "[executor]") {
  test::DemoFixture f;
  LoadPlan plan = f.plan();
  plan.tiers = {snapshot_tier()};
  auto loaded = load_model(nullptr, plan);
  REQUIRE_FALSE(loaded.is_ok());
  CHECK(loaded.status().code() == StatusCode::not_found);
  CHECK(loaded.status().message() == "no tier served the weights: snapshot skipped: no cache store is configured");
}

TEST_CASE("the plan's interrupt check stops a load at each stage boundary, before anything is kept", "[executor]") {
  test::DemoFixture f;
  // Asked on a cold load with a cache: before the snapshot tier (after the key), before the
  // ordinary tier, after it served (before post-load), before the upload, before the refresh hooks.
  const std::vector<std::string> boundaries = {"the snapshot tier", "the ordinary tier", "post-load", "the upload",
                                               "the refresh hooks"};
  for (std::size_t stop = 0; stop <= boundaries.size(); ++stop) {
    INFO("stopped at boundary " << stop);
    test::TempDir dir;
    auto store = *Store::open(test::test_config(dir / "cache"));
    LoadPlan plan = f.plan();
    auto loads = std::make_shared<int>(0);
    plan.ordinary_loader = [loads, inner = plan](const LoadPlan&) {
      ++*loads;
      return run_ordinary_loader(inner);
    };
    std::size_t asked = 0;
    plan.interrupt_check = [&]() -> Status {
      return ++asked == stop + 1 ? Status(StatusCode::exception, "KeyboardInterrupt") : Status::ok();
    };
    auto loaded = load_model(store.get(), plan);
    wait_for_publications();
    auto entries = list_entries(*store);
    REQUIRE(entries.is_ok());
    if (stop == boundaries.size()) {  // never interrupted: asked at every boundary
      REQUIRE(loaded.is_ok());
      CHECK(asked == boundaries.size());
      CHECK(entries->size() == 1);
      continue;
    }
    REQUIRE_FALSE(loaded.is_ok());
    CHECK(loaded.status().code() == StatusCode::exception);
    CHECK(loaded.status().message() == "interrupted before " + boundaries[stop] + ": KeyboardInterrupt");
    CHECK(asked == stop + 1);  // nothing asked after it stopped
    CHECK(*loads == (stop >= 2 ? 1 : 0));
    // Stopped before the snapshot tier kept the loader's result: nothing published, nothing left
    // half-written; stopped later, the publication already started completes.
    CHECK(entries->size() == (stop >= 3 ? 1u : 0u));
    CHECK(test::count_entries(dir / "cache/tmp") == 0);
  }
}

TEST_CASE("the default log sink prints a failed load's lines one by one, escaped", "[executor][log]") {
  test::DemoFixture f;
  auto store = f.store();
  LoadPlan plan = f.plan();
  // A reason that carries an escape sequence and a line that would pass for the library's own.
  const std::string reason = "bad \x1b]0;owned\x07 file\nsnapcache[info] load dit (tp 1/2, pp 0/1): hit in 0.01 s";
  plan.ordinary_loader = [reason](const LoadPlan&) -> Result<NamedTensors> {
    return Status(StatusCode::invalid_argument, reason);
  };
  test::CapturedStderr captured;
  const LogLevel before = log_level();
  set_log_level(LogLevel::info);
  auto loaded = load_model(store.get(), plan);
  set_log_level(before);
  const std::string text = captured.text();
  REQUIRE_FALSE(loaded.is_ok());
  INFO(printable(text));
  std::size_t lines = 0, forged = 0, stages = 0;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = text.find('\n', start);
    REQUIRE(end != std::string::npos);
    const std::string line = text.substr(start, end - start);
    ++lines;
    CHECK(line.starts_with("snapcache[warn] "));
    CHECK(line.find('\x1b') == std::string::npos);
    forged += line.starts_with("snapcache[info]") ? 1 : 0;
    stages += line.starts_with("snapcache[warn]   ordinary load") ? 1 : 0;
    start = end + 1;
  }
  CHECK(forged == 0);
  CHECK(stages == 1);  // the failed stage's own line, the reason inside it escaped
  CHECK(text.find("bad \\x1b]0;owned\\x07 file\\nsnapcache[info] load dit") != std::string::npos);
  CHECK(lines >= 4);  // the failure, the table's header, its stages and total
}

TEST_CASE("a hit's lookup claims no bytes it did not read, and a failed load's table says how long it ran",
          "[executor][report]") {
  test::DemoFixture f;
  auto store = f.store();
  REQUIRE(load_model(store.get(), f.plan()).is_ok());
  auto warm = load_model(store.get(), f.plan());
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  // Files unchanged by identity: the lookup maps them and reads nothing (no "807 GB/s" row).
  CHECK(stage_named(warm->report, "lookup").bytes == 0);

  LoadPlan failing = f.plan();
  failing.ordinary_loader = [](const LoadPlan&) -> Result<NamedTensors> {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    return Status(StatusCode::exception, "the loader gave up");
  };
  LogCapture log;
  auto failed = load_model(nullptr, failing);
  REQUIRE_FALSE(failed.is_ok());
  std::string text;
  {
    std::lock_guard lock(log.mutex);
    text = log.text;
  }
  INFO(text);
  const auto at = text.find("  total ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(text.substr(at + 8)) >= 120.0);  // it was "total 0.0" whatever the load took
}

TEST_CASE("a plan that declares no layout is refused before its loader runs, saying how to declare one",
          "[executor]") {
  test::DemoFixture f;
  auto store = f.store();
  LoadPlan plan = f.plan();
  plan.expected.clear();
  auto ran = std::make_shared<int>(0);
  plan.ordinary_loader = [inner = f.plan(), ran](const LoadPlan&) {
    ++*ran;
    return run_ordinary_loader(inner);
  };
  for (Store* s : {store.get(), static_cast<Store*>(nullptr)}) {
    auto loaded = load_model(s, plan);
    REQUIRE_FALSE(loaded.is_ok());
    const std::string message = loaded.status().message();
    INFO(message);
    CHECK(loaded.status().code() == StatusCode::invalid_argument);
    CHECK(message.find("declares no tensors (LoadPlan::expected is empty)") != std::string::npos);
    CHECK(message.find("expected_layout_of") != std::string::npos);
    CHECK(message.find("snapcache.module_layout(module)") != std::string::npos);
    CHECK(message.find("not expected") == std::string::npos);
    LoadedModel model;
    auto reloaded = reload_model(s, plan, model);
    REQUIRE_FALSE(reloaded.is_ok());
    CHECK(reloaded.status().message() == message);
  }
  CHECK(*ran == 0);
  wait_for_publications();
  auto entries = list_entries(*store);
  REQUIRE(entries.is_ok());
  CHECK(entries->empty());
}

TEST_CASE("every way a loader's output breaks the declared layout is named in one error, cold and warm",
          "[executor][report]") {
  test::DemoFixture f;
  LoadPlan plan = f.plan();
  auto broken = std::make_shared<std::vector<std::string>>();  // the first three tensors' names
  plan.ordinary_loader = [inner = plan, broken](const LoadPlan&) -> Result<NamedTensors> {
    auto tensors = run_ordinary_loader(inner);
    if (!tensors) return tensors;
    NamedTensors out;
    for (std::size_t i = 0; i < tensors->size(); ++i) {
      auto [name, t] = (*tensors)[i];
      if (i < 3) broken->push_back(name);
      if (i == 0) continue;                  // missing
      if (i == 1) t = t.to(at::kDouble);     // another dtype
      if (i == 2) t = t.unsqueeze(0);        // another shape
      out.emplace_back(std::move(name), std::move(t));
    }
    out.emplace_back("stray.weight", at::zeros({3}));  // not declared
    return out;
  };
  auto cold = load_model(nullptr, plan);
  REQUIRE_FALSE(cold.is_ok());
  REQUIRE(broken->size() == 3);
  const std::string message = cold.status().message();
  INFO(message);
  CHECK(cold.status().code() == StatusCode::mismatch);
  CHECK(message.find("4 problems with the layout of the ordinary loader's output") != std::string::npos);
  CHECK(message.find("tensor '" + (*broken)[0] + "' is missing") != std::string::npos);
  CHECK(message.find("tensor '" + (*broken)[1] + "': dtype float64") != std::string::npos);
  CHECK(message.find("tensor '" + (*broken)[2] + "': shape") != std::string::npos);
  CHECK(message.find("'stray.weight', which is not expected") != std::string::npos);

  // Warm, after the declared layout changed: the entry is not served, and the error names every
  // difference of the layout the loader gives from the one declared.
  auto store = f.store();
  REQUIRE(load_model(store.get(), f.plan()).is_ok());
  LoadPlan changed = f.plan();
  changed.expected[0].dtype = DType::float64;
  changed.expected[1].sizes = {1, 2, 3};
  auto warm = load_model(store.get(), changed);
  REQUIRE_FALSE(warm.is_ok());
  const std::string why = warm.status().message();
  INFO(why);
  CHECK(why.find("2 problems with the layout") != std::string::npos);
  CHECK(why.find("tensor '" + changed.expected[0].name + "': dtype") != std::string::npos);
  CHECK(why.find("tensor '" + changed.expected[1].name + "': shape") != std::string::npos);
}

namespace {

// An uploader onto host memory that keeps no host tensor (support/host_copies.h): as on a device,
// the load is then the host tensors' last owner.
class CopyingUploader final : public Uploader {
 public:
  std::string name() const override { return "copying"; }
  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& storages, c10::Device) override {
    return test::host_copies(tensors, storages);
  }
};

// Where a host tensor's bytes were freed, and a gate its freeing waits at, so the test sees whether
// the load returned before they went.
struct WatchedFree {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;   // the test lets the freeing go on
  bool freed = false;  // its bytes are gone
  std::thread::id by;  // the thread that freed them
};

// The first tensor of `tensors` whose storage no other tensor shares, moved into bytes of its own
// whose freeing `watch` sees (and waits at its gate for at most ten seconds).
void watch_a_tensor(NamedTensors& tensors, const std::shared_ptr<WatchedFree>& watch) {
  std::map<const void*, int> users;
  for (const auto& [_, t] : tensors) ++users[t.storage().unsafeGetStorageImpl()];
  for (auto& [name, t] : tensors) {
    if (users[t.storage().unsafeGetStorageImpl()] != 1 || !t.is_contiguous()) continue;
    void* bytes = std::malloc(t.nbytes());
    REQUIRE(bytes != nullptr);
    std::memcpy(bytes, t.data_ptr(), t.nbytes());
    t = at::from_blob(
        bytes, t.sizes(),
        [watch](void* p) {
          std::unique_lock lock(watch->mutex);
          watch->changed.wait_for(lock, std::chrono::seconds(10), [&] { return watch->open; });
          std::free(p);
          watch->freed = true;
          watch->by = std::this_thread::get_id();
          watch->changed.notify_all();
        },
        t.options());
    return;
  }
  FAIL("no tensor has a storage of its own");
}

}  // namespace

TEST_CASE("a load from the checkpoint returns before the loader's host tensors are freed, and the process "
          "can wait for them",
          "[executor]") {
  test::DemoFixture f;
  const bool streaming = GENERATE(false, true);
  INFO((streaming ? "streaming loader" : "whole loader"));
  auto watch = std::make_shared<WatchedFree>();
  LoadPlan plan = demo::with_whole_loader(f.plan());
  const auto whole = plan.ordinary_loader;
  auto watched = [whole, watch](const LoadPlan& p) -> Result<NamedTensors> {
    auto tensors = whole(p);
    if (tensors) watch_a_tensor(*tensors, watch);
    return tensors;
  };
  if (streaming) {
    // The parts a streaming loader put are held by the upload while loading as well: they go too.
    plan.ordinary_loader = nullptr;
    plan.streaming_loader = [watched](const LoadPlan& p, TensorSink& sink) -> Status {
      auto tensors = watched(p);
      if (!tensors) return tensors.status();
      return sink.put(std::move(*tensors));
    };
  } else {
    plan.ordinary_loader = watched;
  }
  // A device's load (the copies stand in for it); a CPU load hands the host tensors out.
  plan.device = c10::Device(c10::kCUDA, 0);
  plan.uploader = std::make_shared<CopyingUploader>();
  plan.refresh_hooks.clear();  // they would run on the device

  auto loaded = load_model(nullptr, plan);
  REQUIRE(loaded.is_ok());
  CHECK(loaded->report.path == LoadPath::ineligible);
  CHECK(has_stage(loaded->report, "upload (after the loader)") == streaming);
  {
    std::lock_guard lock(watch->mutex);
    CHECK_FALSE(watch->freed);  // freed inline, the load would have waited ten seconds at the gate
    watch->open = true;
  }
  watch->changed.notify_all();
  wait_for_publications();
  std::lock_guard lock(watch->mutex);
  CHECK(watch->freed);
  CHECK(watch->by != std::this_thread::get_id());
  CHECK(demo::identical(loaded->weights, f.reference().weights));
}
