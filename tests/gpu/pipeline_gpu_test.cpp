// The load pipeline on a real GPU: ordinary, cold and warm loads upload bit-identical weights,
// give bit-identical forward outputs, keep aliases aliased and derived buffers in place.
#include <ATen/Functions.h>

#include <cstring>

#include "dit_model.h"
#include "support/catch.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"

using namespace snapcache;

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
  auto ref = load_model(nullptr, plan);
  auto cold = load_model(store.get(), plan);
  auto warm = load_model(store.get(), plan);
  REQUIRE(ref.is_ok());
  REQUIRE(cold.is_ok());
  REQUIRE(warm.is_ok());
  CHECK(cold->report.path == LoadPath::miss);
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
  test::TempDir dir;
  demo::DitConfig config;
  config.hidden = 512;
  config.layers = 2;
  const std::string checkpoint = dir / "model.safetensors";
  REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok());
  LoadPlan plan = demo::make_plan(config, checkpoint, c10::Device(c10::kCUDA, 0));
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
