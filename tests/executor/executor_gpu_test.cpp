// The load pipeline on a real GPU: ordinary, cold and warm loads upload bit-identical weights,
// give bit-identical forward outputs, keep aliases aliased and derived buffers in place.
#include <ATen/Functions.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "dit_model.h"
#include "snapcache/extend/gpu_upload.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/extend/tier.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "support/catch.h"
#include "support/fault_injection.h"
#include "support/fixtures.h"
#include "support/page_cache.h"
#include "support/temp_dir.h"

using namespace snapcache;

namespace {
// A two-layer demo model on a checkpoint in a temporary directory, loaded onto the GPU.
struct SmallModel {
  test::TempDir dir;
  demo::DitConfig config = [] {
    demo::DitConfig c;
    c.hidden = 512;
    c.layers = 2;
    return c;
  }();
  std::string checkpoint = dir / "model.safetensors";
  LoadPlan plan;
  SmallModel() {
    REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok());
    plan = demo::make_plan(config, checkpoint, c10::Device(c10::kCUDA, 0));
  }
};

bool has_stage(const LoadReport& report, std::string_view stage) {
  return std::any_of(report.stages.begin(), report.stages.end(), [&](const StageTime& s) { return s.stage == stage; });
}

// A four-layer demo model whose layout conversions (1 MiB and more) are left to the engine, and
// the reference load: the loader run whole, conversions written on the host (an engine that does
// not convert), then copied as they are.
struct ConvertingModel {
  test::TempDir dir;
  demo::DitConfig config = [] {
    demo::DitConfig c;
    c.hidden = 1024;
    c.layers = 4;
    return c;
  }();
  std::string checkpoint = dir / "model.safetensors";
  LoadPlan plan;
  std::optional<LoadedModel> reference;
  ConvertingModel() {
    REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok());
    plan = demo::make_plan(config, checkpoint, c10::Device(c10::kCUDA, 0));
    StagedUploadOptions on_host;
    on_host.convert_layouts = false;
    plan.uploader = staged_uploader(on_host);
    auto loaded = load_model(nullptr, demo::with_whole_loader(plan));
    REQUIRE(loaded.is_ok());
    REQUIRE_FALSE(has_stage(loaded->report, "upload (after the loader)"));
    reference.emplace(std::move(*loaded));
  }
  // A store over `fs` in the model's directory, holding the entry the engine's cold load published.
  std::shared_ptr<Store> published_store(std::shared_ptr<FaultInjectingFileSystem> fs) {
    auto store = *Store::open(test::test_config(dir / "cache"), std::move(fs));
    LoadPlan cold_plan = plan;
    cold_plan.uploader = staged_uploader();
    auto cold = load_model(store.get(), cold_plan);
    REQUIRE(cold.is_ok());
    REQUIRE(cold->publication.wait().outcome() == std::string_view("published"));
    return store;
  }
};

// Whether the engine failed and the per-storage copy uploaded instead.
bool fell_back(const LoadedModel& loaded) {
  for (const auto& s : loaded.report.stages)
    if (s.stage == "upload (fallback)") return true;
  return false;
}
}  // namespace

TEST_CASE("on the GPU ordinary and cold and warm loads give bit-identical weights and outputs", "[gpu]") {
  test::TempDir dir;
  demo::DitConfig config;
  config.hidden = 1024;
  config.layers = 4;
  config.tp_rank = 1;
  config.tp_size = 2;
  const std::string checkpoint = dir / "model.safetensors";
  REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok());
  LoadPlan plan = demo::make_plan(config, checkpoint, c10::Device(c10::kCUDA, 0));
  auto store = *Store::open(test::test_config(dir / "cache"));
  auto ref = load_model(nullptr, demo::with_whole_loader(plan));
  auto cold = load_model(store.get(), plan);
  auto warm = load_model(store.get(), plan);
  REQUIRE(ref.is_ok());
  REQUIRE(cold.is_ok());
  REQUIRE(warm.is_ok());
  CHECK(cold->report.path == LoadPath::miss);
  CHECK(has_stage(cold->report, "upload (after the loader)"));  // uploaded part by part
  CHECK_FALSE(has_stage(cold->report, "upload while loading"));  // and the parts added up
  CHECK(warm->report.path == LoadPath::hit);
  for (const auto& [name, t] : warm->weights) CHECK(t.is_cuda());
  CHECK(demo::identical(*ref, *cold));
  CHECK(demo::identical(*cold, *warm));
  at::Tensor out = demo::forward(config, *ref);
  CHECK(out.is_cuda());
  CHECK(demo::identical(out, demo::forward(config, *cold)));
  CHECK(demo::identical(out, demo::forward(config, *warm)));

  // Reload in place on the device: addresses stay (captured CUDA graphs keep working).
  const void* fused = warm->derived.at("fused_norms").data_ptr();
  const void* first = warm->weights.front().second.data_ptr();
  auto again = reload_model(store.get(), plan, *warm);
  REQUIRE(again.is_ok());
  CHECK(again->path == LoadPath::hit);
  CHECK(warm->derived.at("fused_norms").data_ptr() == fused);
  CHECK(warm->weights.front().second.data_ptr() == first);
  CHECK(demo::identical(out, demo::forward(config, *warm)));
}

TEST_CASE("upload keeps tied weights tied and views as views on the GPU", "[gpu]") {
  NamedTensors cpu = test::model_tensors(3, 1);
  auto gpu = upload_tensors(cpu, c10::Device(c10::kCUDA, 0));
  REQUIRE(gpu.is_ok());
  REQUIRE(gpu->size() == cpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    INFO(cpu[i].first);
    CHECK(demo::identical(cpu[i].second, (*gpu)[i].second));
    CHECK((*gpu)[i].second.storage_offset() == cpu[i].second.storage_offset());
  }
  // embed.weight and lm_head.weight are tied; attn.k_view is a view of attn.qkv.weight.
  CHECK((*gpu)[0].second.data_ptr() == (*gpu)[1].second.data_ptr());
  CHECK((*gpu)[3].second.storage().data() == (*gpu)[2].second.storage().data());
}

namespace {
// Serves prepared tensors already on the GPU, as the donor tier will.
class DeviceTier final : public Tier {
 public:
  explicit DeviceTier(NamedTensors tensors) : tensors_(std::move(tensors)) {}
  std::string name() const override { return "device"; }
  Result<TierAnswer> serve(LoadContext&) override {
    return TierAnswer::served(tensors_, Residence::device_prepared, Provenance::cache, "on the device already");
  }

 private:
  NamedTensors tensors_;
};
}  // namespace

TEST_CASE("a tier that serves prepared CUDA tensors skips post-load and upload", "[gpu]") {
  SmallModel m;
  test::TempDir& dir = m.dir;
  const demo::DitConfig& config = m.config;
  LoadPlan plan = m.plan;
  auto ref = load_model(nullptr, plan);
  REQUIRE(ref.is_ok());
  plan.tiers = {std::make_shared<DeviceTier>(ref->weights), snapshot_tier(), ordinary_tier()};
  auto store = *Store::open(test::test_config(dir / "cache"));
  auto attached = load_model(store.get(), plan);
  REQUIRE(attached.is_ok());
  CHECK(attached->report.path == LoadPath::hit);
  for (const auto& s : attached->report.stages) CHECK((s.stage != "upload" && s.stage != "post-load"));
  CHECK(attached->weights.front().second.data_ptr() == ref->weights.front().second.data_ptr());
  CHECK(demo::identical(*ref, *attached));
  CHECK(demo::identical(demo::forward(config, *ref), demo::forward(config, *attached)));

  // Served on the wrong device: refused, not silently used.
  plan.device = c10::Device(c10::kCPU);
  auto wrong = load_model(store.get(), plan);
  REQUIRE_FALSE(wrong.is_ok());
  CHECK(wrong.status().code() == StatusCode::mismatch);
}

namespace {
// Every dtype size, aliases (two names, one storage), views at offsets, transposed views, odd
// sizes that straddle chunk boundaries, and an empty tensor.
NamedTensors upload_cases() {
  NamedTensors t;
  auto bytes = [](std::int64_t n, at::ScalarType type, int seed) {
    at::Tensor x = at::empty({n}, at::TensorOptions().dtype(type));
    auto* p = static_cast<std::uint8_t*>(x.data_ptr());
    for (std::int64_t i = 0; i < n * static_cast<std::int64_t>(x.element_size()); ++i)
      p[i] = static_cast<std::uint8_t>(i * 131 + seed * 17 + (i >> 9));
    return x;
  };
  const at::ScalarType types[] = {at::kChar, at::kFloat8_e4m3fn, at::kHalf, at::kBFloat16, at::kFloat,
                                  at::kDouble, at::kComplexDouble, at::kLong};
  int seed = 0;
  for (at::ScalarType type : types) {
    at::Tensor big = bytes(1'000'003, type, ++seed);  // several 1 MiB chunks, ending mid-chunk
    t.emplace_back(fmt::format("{}.flat", c10::toString(type)), big);
    t.emplace_back(fmt::format("{}.view", c10::toString(type)), big.narrow(0, 7, 1000).view({10, 100}).t());
  }
  at::Tensor tied = bytes(4096, at::kBFloat16, 99).view({64, 64});
  t.emplace_back("embed.weight", tied);
  t.emplace_back("lm_head.weight", tied);
  t.emplace_back("empty", at::empty({0, 5}, at::kFloat));
  return t;
}

// upload_cases(), their host storages, and what the per-storage copy makes of them on cuda:0.
struct UploadCases {
  NamedTensors host = upload_cases();
  HostStorages storages;
  NamedTensors plain;
  UploadCases() {
    auto described = describe_host_storages(host);
    REQUIRE(described.is_ok());
    storages = std::move(*described);
    auto copied = per_storage_uploader()->upload(host, storages, c10::Device(c10::kCUDA, 0));
    REQUIRE(copied.is_ok());
    plain = std::move(copied->tensors);
  }
};
}  // namespace

TEST_CASE("the staged upload engine gives what the per-storage copy gives, aliases included", "[gpu]") {
  const UploadCases cases;
  const NamedTensors& host = cases.host;
  const HostStorages* storages = &cases.storages;
  const c10::Device cuda(c10::kCUDA, 0);
  StagedUploadOptions small;
  small.chunk_bytes = 1 << 20;  // many chunks, split among the workers
  small.pinned_bytes = 8 << 20;
  for (const auto& options : {StagedUploadOptions{}, small}) {
    INFO("chunk " << options.chunk_bytes);
    auto staged = staged_uploader(options)->upload(host, *storages, cuda);
    REQUIRE(staged.is_ok());
    REQUIRE(staged->tensors.size() == host.size());
    for (std::size_t i = 0; i < host.size(); ++i) {
      INFO(host[i].first);
      CHECK(staged->tensors[i].second.is_cuda());
      CHECK(demo::identical(staged->tensors[i].second, cases.plain[i].second));
      CHECK(staged->tensors[i].second.storage_offset() == host[i].second.storage_offset());
      // Views of one host storage view one device storage.
      for (std::size_t j = 0; j < host.size(); ++j)
        if (host[j].second.storage().is_alias_of(host[i].second.storage()))
          CHECK(staged->tensors[j].second.storage().data() == staged->tensors[i].second.storage().data());
    }
    const std::size_t last = host.size() - 1;  // lm_head.weight and embed.weight are tied
    CHECK(staged->tensors[last - 1].second.data_ptr() == staged->tensors[last - 2].second.data_ptr());
  }
}

namespace {
// The engine's debug line (one per upload, "upload engine: ..."), collected while it lives.
class EngineProfiles {
 public:
  EngineProfiles() {
    set_log_level(LogLevel::debug);
    set_log_sink([this](LogLevel, std::string_view line) {
      std::lock_guard lock(mutex_);
      if (line.find("upload engine:") != std::string_view::npos) lines_.emplace_back(line);
    });
  }
  ~EngineProfiles() {
    set_log_sink({});
    set_log_level(level_);
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  // The number after `said` in `line`.
  static unsigned long number_after(const std::string& line, const std::string& said) {
    const auto at = line.find(said);
    REQUIRE(at != std::string::npos);
    return std::stoul(line.substr(at + said.size()));
  }
  static unsigned long pinned_before(const std::string& line) { return number_after(line, "pinned before the upload: "); }
  static unsigned long pinned_during(const std::string& line) { return number_after(line, ", during it: "); }

 private:
  const LogLevel level_ = log_level();
  std::mutex mutex_;
  std::vector<std::string> lines_;
};
}  // namespace

TEST_CASE("an engine pins its staging buffers once: its next upload in the process pins none", "[gpu]") {
  const NamedTensors host = upload_cases();
  auto storages = describe_host_storages(host);
  REQUIRE(storages.is_ok());
  const c10::Device cuda(c10::kCUDA, 0);
  std::vector<std::string> profiles;
  Result<Uploaded> first = Status(StatusCode::exception, "not run"), second = first;
  {
    EngineProfiles capture;
    StagedUploadOptions options;
    options.chunk_bytes = 6ull << 20;  // a pool of its own: other tests' engines keep theirs
    auto engine = staged_uploader(options);
    first = engine->upload(host, *storages, cuda);
    second = engine->upload(host, *storages, cuda);
    profiles = capture.lines();
  }
  REQUIRE(first.is_ok());
  REQUIRE(second.is_ok());
  REQUIRE(profiles.size() == 2);
  INFO(profiles[0] << "\n" << profiles[1]);
  CHECK(EngineProfiles::pinned_during(profiles[0]) > 0);
  CHECK(EngineProfiles::pinned_during(profiles[1]) == 0);
  CHECK(EngineProfiles::pinned_before(profiles[1]) == EngineProfiles::pinned_during(profiles[0]));
  for (std::size_t i = 0; i < host.size(); ++i) CHECK(demo::identical(first->tensors[i].second, second->tensors[i].second));
}

TEST_CASE("an engine told that a load is coming pins its buffers before the upload, and only those it takes", "[gpu]") {
  const UploadCases cases;
  const NamedTensors& host = cases.host;
  const HostStorages* storages = &cases.storages;
  const c10::Device cuda(c10::kCUDA, 0);
  for (const bool ahead : {true, false}) {
    INFO("pin_ahead " << ahead);
    StagedUploadOptions options;
    options.pin_ahead = ahead;
    options.chunk_bytes = ahead ? 8ull << 20 : 12ull << 20;  // pools of their own
    auto engine = staged_uploader(options);
    std::string profile;
    Result<Uploaded> staged = Status(StatusCode::exception, "not run");
    {
      EngineProfiles capture;
      engine->expect(storages->total_bytes(), cuda);
      // The pinning threads take milliseconds; the tiers of a real load take about as long.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      staged = engine->upload(host, *storages, cuda);
      const auto lines = capture.lines();
      REQUIRE(lines.size() == 1);
      profile = lines[0];
    }
    INFO(profile);
    REQUIRE(staged.is_ok());
    for (std::size_t i = 0; i < host.size(); ++i) CHECK(demo::identical(staged->tensors[i].second, cases.plain[i].second));
    const unsigned long workers = EngineProfiles::number_after(profile, " by ");
    REQUIRE(workers >= 2);
    if (ahead) {
      CHECK(EngineProfiles::pinned_before(profile) == 2 * workers);  // two buffers per worker, no more
      CHECK(EngineProfiles::pinned_during(profile) == 0);
    } else {
      CHECK(EngineProfiles::pinned_before(profile) == 0);
      CHECK(EngineProfiles::pinned_during(profile) > 0);
    }
  }
}

TEST_CASE("load_model uploads with the engine, and falls back with the reason when it cannot", "[gpu]") {
  SmallModel m;
  test::TempDir& dir = m.dir;
  const demo::DitConfig& config = m.config;
  LoadPlan plan = m.plan;
  plan.device = c10::Device(c10::kCUDA);  // no index, as a server often says it
  plan.uploader = staged_uploader();     // the default only from 64 MiB on
  auto store = *Store::open(test::test_config(dir / "cache"));
  auto reference = load_model(nullptr, plan);
  REQUIRE(reference.is_ok());
  for (const auto& s : reference->report.stages) CHECK((s.stage != "upload" || s.error.empty()));
  for (const auto& s : reference->report.stages) CHECK(s.stage != "upload (fallback)");
  CHECK(reference->report.reason.find("per-storage copy instead") == std::string::npos);

  StagedUploadOptions impossible;
  impossible.pinned_bytes = 1 << 20;  // smaller than two 16 MiB buffers: the engine refuses
  plan.uploader = staged_uploader(impossible);
  auto fallback = load_model(store.get(), plan);
  REQUIRE(fallback.is_ok());
  CHECK(fallback->report.reason.find("uploaded by the per-storage copy instead") != std::string::npos);
  bool fell_back_cleanly = false;
  for (const auto& s : fallback->report.stages) fell_back_cleanly |= s.stage == "upload (fallback)" && s.error.empty();
  CHECK(fell_back_cleanly);
  CHECK(demo::identical(*reference, *fallback));
  CHECK(demo::identical(demo::forward(config, *reference), demo::forward(config, *fallback)));
}

TEST_CASE("the engine reads untouched warm storages from the file, never one a method changed", "[gpu]") {
  SmallModel m;
  test::TempDir& dir = m.dir;
  const demo::DitConfig& config = m.config;
  LoadPlan plan = m.plan;
  plan.uploader = staged_uploader();  // the default only from 64 MiB on
  plan.post_load.push_back(test::double_in_place("final_norm.weight"));
  auto store = *Store::open(test::test_config(dir / "cache"));
  auto reference = load_model(nullptr, plan);
  auto cold = load_model(store.get(), plan);
  auto warm = load_model(store.get(), plan);  // untouched storages come from the data file
  REQUIRE(reference.is_ok());
  REQUIRE(cold.is_ok());
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(demo::identical(*reference, *cold));
  CHECK(demo::identical(*reference, *warm));  // the doubled weight came from memory, not the file
  CHECK(demo::identical(demo::forward(config, *reference), demo::forward(config, *warm)));
}

TEST_CASE("a cold load through the engine uploads the loader's tensors exactly, reading the checkpoint only through "
          "the loader",
          "[gpu]") {
  for (int tp : {1, 2}) {
    for (bool streamed : {false, true}) {
      INFO("tp " << tp << (streamed ? ", streamed" : ", loader run whole"));
      test::TempDir dir;
      demo::DitConfig config;
      config.hidden = 1024;  // conversions of 1 MiB and more: transposed on the device
      config.layers = 4;
      config.tp_rank = tp - 1;
      config.tp_size = tp;
      const std::string checkpoint = dir / "model.safetensors";
      REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok());
      // The reference: the loader's tensors and the methods' on the host, no engine.
      auto reference = load_model(nullptr, demo::with_whole_loader(demo::make_plan(config, checkpoint, c10::kCPU)));
      REQUIRE(reference.is_ok());

      auto fs = std::make_shared<FaultInjectingFileSystem>();
      config.checkpoint_fs = fs;
      LoadPlan plan = demo::make_plan(config, checkpoint, c10::Device(c10::kCUDA, 0));
      if (!streamed) plan = demo::with_whole_loader(plan);
      plan.uploader = staged_uploader();
      auto store = *Store::open(test::test_config(dir / "cache"));
      auto cold = load_model(store.get(), plan);
      REQUIRE(cold.is_ok());
      CHECK(cold->report.path == LoadPath::miss);
      CHECK_FALSE(fell_back(*cold));
      CHECK_FALSE(has_stage(cold->report, "upload while loading"));
      // The engine reads the loader's memory: of the file, only the loader's two reads of the header.
      CHECK(fs->calls(FsOp::pread) == 2);
      CHECK(demo::identical(reference->weights, cold->weights));  // bit for bit, strides included
      REQUIRE(cold->publication.wait().outcome() == std::string_view("published"));
    }
  }
}

TEST_CASE("the engine writes layout conversions while staging and checks every byte, cold and warm", "[gpu]") {
  ConvertingModel m;
  const demo::DitConfig& config = m.config;
  LoadPlan plan = m.plan;
  const auto& reference = m.reference;
  const at::Tensor out = demo::forward(config, *reference);

  StagedUploadOptions small;  // several units per data file: rows and storages cross them
  small.chunk_bytes = 16 << 20;
  small.pinned_bytes = 64 << 20;
  for (const auto& options : {StagedUploadOptions{}, small}) {
    INFO("staging buffers of " << options.chunk_bytes);
    test::TempDir cache_dir;
    auto store = *Store::open(test::test_config(cache_dir / "cache"));
    plan.uploader = staged_uploader(options);
    auto cold = load_model(store.get(), plan);
    auto warm = load_model(store.get(), plan);
    REQUIRE(cold.is_ok());
    REQUIRE(warm.is_ok());
    REQUIRE(warm->report.path == LoadPath::hit);
    // The cold load's engine converted each part while the loader made the next.
    CHECK(has_stage(cold->report, "upload (after the loader)"));
    CHECK_FALSE(has_stage(cold->report, "upload while loading"));
    for (const auto& s : cold->report.stages) CHECK(s.stage != "upload (fallback)");
    for (const auto& s : warm->report.stages) CHECK(s.stage != "upload (fallback)");
    CHECK(warm->report.bytes_checked > 0);
    CHECK(warm->report.bytes_trusted == 0);
    CHECK(demo::identical(*reference, *cold));
    CHECK(demo::identical(*reference, *warm));
    CHECK(demo::identical(out, demo::forward(config, *cold)));
    CHECK(demo::identical(out, demo::forward(config, *warm)));
    // The conversions kept torch's layout: column-major int8 and fp16 weights.
    for (const auto& [name, t] : warm->weights)
      if (name.ends_with("adaln.weight") || name.ends_with("mlp.up.weight")) CHECK(t.t().is_contiguous());
  }
}

// Forwards to the per-storage copy, counting the pending conversions it is handed.
class CountingPerStorage final : public Uploader {
 public:
  std::string name() const override { return "counting per-storage copy"; }
  UploaderTraits traits(c10::Device device) const override { return per_storage_uploader()->traits(device); }
  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& host, c10::Device device) override {
    for (const HostStorage& s : host.storages) pending += s.pending.has_value();
    return per_storage_uploader()->upload(tensors, host, device);
  }
  int pending = 0;
};

TEST_CASE("the per-storage copy writes layout conversions on the device, as the host writes them, cold and warm",
          "[gpu]") {
  ConvertingModel m;  // conversions of 1 MiB and more are left pending
  const at::Tensor out = demo::forward(m.config, *m.reference);
  test::TempDir cache_dir;
  auto store = *Store::open(test::test_config(cache_dir / "cache"));
  for (const LoadPath want : {LoadPath::miss, LoadPath::hit}) {
    auto counting = std::make_shared<CountingPerStorage>();
    LoadPlan plan = m.plan;
    plan.uploader = counting;
    auto loaded = load_model(store.get(), plan);
    REQUIRE(loaded.is_ok());
    CHECK(loaded->report.path == want);
    CHECK(counting->pending >= 8);  // mlp.up (int8) and adaln (fp16) of four layers
    for (const auto& s : loaded->report.stages) CHECK(s.stage != "upload (fallback)");
    CHECK(demo::identical(*m.reference, *loaded));
    CHECK(demo::identical(out, demo::forward(m.config, *loaded)));
    if (want == LoadPath::miss && !loaded->report.publish) REQUIRE(loaded->publication.wait().status.is_ok());
  }
}

TEST_CASE("the engine and the per-storage copy transpose odd shapes of every element size as torch does, from "
          "memory and from a file",
          "[gpu]") {
  const NamedTensors matrices = test::odd_matrices();
  NamedTensors outputs;  // what a load hands the uploader: [cols, rows] tensors over pending storages
  for (const auto& [name, t] : matrices) outputs.emplace_back(name, at::empty({t.size(1), t.size(0)}, t.options()));
  const c10::Device cuda(c10::kCUDA, 0);
  StagedUploadOptions small;  // many units: rows and chunks cross them
  small.chunk_bytes = 16 << 20;
  small.pinned_bytes = 64 << 20;
  auto check = [&](const HostStorages& host) {
    const std::vector<std::pair<std::string, std::shared_ptr<Uploader>>> uploaders = {
        {"the engine", staged_uploader()}, {"the engine, small buffers", staged_uploader(small)},
        {"the per-storage copy", per_storage_uploader()}};
    for (const auto& [which, uploader] : uploaders) {
      REQUIRE(uploader->traits(cuda).converts_layouts);
      auto uploaded = uploader->upload(outputs, host, cuda);
      REQUIRE(uploaded.is_ok());
      for (std::size_t i = 0; i < matrices.size(); ++i) {
        INFO(matrices[i].first << ", " << which);
        const at::Tensor got = uploaded->tensors[i].second;
        CHECK(got.is_cuda());
        CHECK(at::equal(got.cpu().view(at::kByte), matrices[i].second.t().contiguous().view(at::kByte)));
      }
    }
  };
  check(test::pending_transposes(matrices));

  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir / "cache"));
  const Key key = test::test_key(9);
  REQUIRE(publish_tensors(*store, key, matrices).result == PublishResult::published);
  LookupOutcome hit = store->lookup(key);
  REQUIRE(hit.result == LookupResult::hit);
  const NamedTensors mapped = tensors_of(hit.snapshot);
  auto served = snapshot_storages(hit.snapshot, mapped);
  REQUIRE(served.is_ok());
  check(test::pending_transposes(mapped, &*served));
}

TEST_CASE("a failing read of the engine's staged upload falls back, and every later read is staged again",
          "[gpu][faults]") {
  ConvertingModel m;  // conversions pending: the staged units transpose on the device
  test::TempDir& dir = m.dir;
  const demo::DitConfig& config = m.config;
  LoadPlan plan = m.plan;
  const auto& reference = m.reference;
  StagedUploadOptions small;  // several units per worker: both staging buffers are used
  small.chunk_bytes = 16 << 20;
  small.pinned_bytes = 64 << 20;
  plan.uploader = staged_uploader(small);
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir / "cache"), fs);
  auto cold = load_model(store.get(), plan);
  REQUIRE(cold.is_ok());
  REQUIRE(cold->publication.wait().outcome() == std::string_view("published"));

  fs->reset_counters();
  auto clean = load_model(store.get(), plan);
  REQUIRE(clean.is_ok());
  REQUIRE(clean->report.path == LoadPath::hit);
  const std::uint64_t reads = fs->calls(FsOp::pread);
  REQUIRE(reads >= 4);  // the staged read of the data files, through the store's file system
  CHECK(demo::identical(*reference, *clean));
  // The lookup reads the manifest first; the last reads are the engine's.
  for (std::uint64_t k : {std::uint64_t{0}, reads / 2, reads - 1}) {
    INFO("read " << k << " of " << reads << " fails");
    fs->reset_counters();
    fs->inject({FsOp::pread, EIO, static_cast<int>(k), 1, false, ""});
    auto loaded = load_model(store.get(), plan);
    CHECK(fs->faults_fired() == 1);
    fs->clear_faults();
    REQUIRE(loaded.is_ok());
    if (k == reads - 1) {
      CHECK(loaded->report.path == LoadPath::hit);
      CHECK(fell_back(*loaded));
    }
    CHECK(demo::identical(*reference, *loaded));
    CHECK(demo::identical(demo::forward(config, *reference), demo::forward(config, *loaded)));
  }
  auto again = load_model(store.get(), plan);  // the entry was kept: an I/O error is not damage
  REQUIRE(again.is_ok());
  CHECK(again->report.path == LoadPath::hit);
  for (const auto& s : again->report.stages) CHECK(s.stage != "upload (fallback)");
  CHECK(demo::identical(*reference, *again));
}

TEST_CASE("staging buffers too small for a checksum chunk and a row's tail grow to fit: no fallback, the same bytes",
          "[gpu]") {
  ConvertingModel m;  // conversions pending: units read the rows of a transpose past their chunks
  LoadPlan plan = m.plan;
  auto store = *Store::open(test::test_config(m.dir / "cache"));
  plan.uploader = staged_uploader();
  auto cold = load_model(store.get(), plan);
  REQUIRE(cold.is_ok());
  REQUIRE(cold->publication.wait().outcome() == std::string_view("published"));
  for (std::uint64_t asked : {std::uint64_t{4096}, std::uint64_t{8} << 20}) {
    INFO("staging buffers of " << asked << " bytes asked for");
    StagedUploadOptions options;
    options.chunk_bytes = asked;  // 8 MiB: one published chunk, no room for the rows past it
    plan.uploader = staged_uploader(options);
    auto warm = load_model(store.get(), plan);
    REQUIRE(warm.is_ok());
    REQUIRE(warm->report.path == LoadPath::hit);
    for (const auto& s : warm->report.stages) CHECK(s.stage != "upload (fallback)");
    CHECK(warm->report.bytes_checked > 0);
    CHECK(demo::identical(*m.reference, *warm));
    CHECK(demo::identical(demo::forward(m.config, *m.reference), demo::forward(m.config, *warm)));
  }
}

