// The load pipeline end to end on the demo model: ordinary, cold and warm loads agree bit for bit;
// every way the cache can fail ends in the ordinary path with the reason and the same result.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "support/demo_fixture.h"
#include "support/catch.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/maintenance.h"
#include "support/fault_injection.h"

using namespace snapcache;

namespace {

using Fixture = test::DemoFixture;

std::string only_entry_data(Store& store) {
  wait_for_publications();
  auto entries = list_entries(store).value();
  REQUIRE(entries.size() == 1);
  return entries[0].path + "/data-0000.bin";
}

}  // namespace

TEST_CASE("ordinary and cold and warm loads of the demo model give bit-identical weights and outputs", "[pipeline]") {
  Fixture f;
  auto store = f.store();
  LoadedModel ref = f.reference();
  CHECK(ref.report.path == LoadPath::ineligible);
  auto cold = load_model(store.get(), f.plan());
  REQUIRE(cold.is_ok());
  CHECK(cold->report.path == LoadPath::miss);
  CHECK(cold->publication.wait().outcome() == std::string_view("published"));
  auto warm = load_model(store.get(), f.plan());
  REQUIRE(warm.is_ok());
  CHECK(warm->report.path == LoadPath::hit);
  CHECK(demo::identical(ref, *cold));
  CHECK(demo::identical(*cold, *warm));
  at::Tensor out_ref = demo::forward(f.config, ref);
  CHECK(demo::identical(out_ref, demo::forward(f.config, *cold)));
  CHECK(demo::identical(out_ref, demo::forward(f.config, *warm)));
  // The post-load methods really ran on the warm path: flattened scales, column-major weights.
  CHECK(test::tensor_named(warm->weights, "blocks.0.mlp.up.weight_scale").dim() == 1);
  CHECK(test::tensor_named(warm->weights, "blocks.0.attn.proj.weight").stride(0) == 1);
  CHECK(test::tensor_named(warm->weights, "blocks.0.mlp.down.weight_scale").stride(0) == 1);
}

TEST_CASE("each post-load method alone gives bit-identical results cold and warm", "[pipeline]") {
  std::vector<std::shared_ptr<PostLoadMethod>> methods = {
      int8_row_scale_method(WeightLayout::row_major), int8_row_scale_method(WeightLayout::column_major),
      fp8_block_scale_method(), layout_method({"adaln.weight"}, WeightLayout::column_major),
      layout_method({"proj.weight", "up.weight"}, WeightLayout::column_major)};
  for (const auto& method : methods) {
    INFO(method->name());
    Fixture f;
    auto store = f.store();
    LoadPlan plan = f.plan();
    plan.post_load = {method};
    plan.precision.rules.clear();  // the flattened scales only come with the int8 method
    plan.options["method"] = method->name();
    auto ref = load_model(nullptr, plan);
    auto cold = load_model(store.get(), plan);
    auto warm = load_model(store.get(), plan);
    REQUIRE(ref.is_ok());
    REQUIRE(cold.is_ok());
    REQUIRE(warm.is_ok());
    CHECK(warm->report.path == LoadPath::hit);
    CHECK(demo::identical(*ref, *cold));
    CHECK(demo::identical(*cold, *warm));
  }
}

TEST_CASE("loading does not consume the global RNG on any path", "[pipeline]") {
  Fixture f;
  auto store = f.store();
  at::Tensor before = at::detail::getDefaultCPUGenerator().get_state();
  REQUIRE(load_model(store.get(), f.plan()).is_ok());  // cold
  REQUIRE(load_model(store.get(), f.plan())->report.path == LoadPath::hit);
  REQUIRE(load_model(nullptr, f.plan()).is_ok());
  CHECK(at::equal(before, at::detail::getDefaultCPUGenerator().get_state()));
}

TEST_CASE("a damaged snapshot ends in the ordinary path with the reason and the same result", "[pipeline]") {
  Fixture f;
  auto store = f.store();
  LoadedModel ref = f.reference();
  REQUIRE(load_model(store.get(), f.plan())->report.path == LoadPath::miss);
  test::flip_byte(only_entry_data(*store), 5000);
  auto loaded = load_model(store.get(), f.plan());
  REQUIRE(loaded.is_ok());
  CHECK(loaded->report.path == LoadPath::fallback);
  CHECK(loaded->report.reason.find("damaged") != std::string::npos);
  CHECK(loaded->report.reason.find("chunk 0") != std::string::npos);
  CHECK(demo::identical(ref, *loaded));
  CHECK(demo::identical(demo::forward(f.config, ref), demo::forward(f.config, *loaded)));
  // It was rebuilt: the next load is warm again.
  CHECK(load_model(store.get(), f.plan())->report.path == LoadPath::hit);
}

TEST_CASE("a malformed snapshot manifest ends in the ordinary path with the reason", "[pipeline]") {
  Fixture f;
  auto store = f.store();
  LoadedModel ref = f.reference();
  REQUIRE(load_model(store.get(), f.plan()).is_ok());
  wait_for_publications();
  auto entries = list_entries(*store).value();
  REQUIRE(entries.size() == 1);
  test::write_bytes(entries[0].path + "/manifest.snap", "SNAPCACHE-MANIF this is not a manifest at all.......");
  auto loaded = load_model(store.get(), f.plan());
  REQUIRE(loaded.is_ok());
  CHECK(loaded->report.path == LoadPath::fallback);
  CHECK(loaded->report.reason.find("manifest") != std::string::npos);
  CHECK(demo::identical(ref, *loaded));
}

TEST_CASE("injected storage failures end in the ordinary path with the reason and the same result", "[pipeline]") {
  Fixture f;
  LoadedModel ref = f.reference();
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = f.store(fs);
  SECTION("no space while publishing") {
    fs->inject({FsOp::pwrite, ENOSPC, 0, -1, false, ""});
    auto loaded = load_model(store.get(), f.plan());
    REQUIRE(loaded.is_ok());
    CHECK(loaded->report.path == LoadPath::miss);
    CHECK(loaded->publication.wait().status.code() == StatusCode::no_space);
    CHECK(demo::identical(ref, *loaded));
    fs->clear_faults();
    CHECK(load_model(store.get(), f.plan())->report.path == LoadPath::miss);  // nothing torn was kept
  }
  SECTION("an I/O error while mapping a warm entry") {
    REQUIRE(load_model(store.get(), f.plan()).is_ok());
    fs->inject({FsOp::map, EIO, 0, 1, false, ""});
    auto loaded = load_model(store.get(), f.plan());
    REQUIRE(loaded.is_ok());
    CHECK(loaded->report.path == LoadPath::fallback);
    CHECK(loaded->report.reason.find("io_error") != std::string::npos);
    CHECK(demo::identical(ref, *loaded));
    CHECK(demo::identical(demo::forward(f.config, ref), demo::forward(f.config, *loaded)));
  }
  SECTION("a read-only cache") {
    fs->inject({FsOp::make_directory, EROFS, 0, -1, false, ""});
    fs->inject({FsOp::open, EROFS, 0, -1, false, "/tmp/"});
    auto loaded = load_model(store.get(), f.plan());
    REQUIRE(loaded.is_ok());
    CHECK(loaded->publication.wait().status.to_string().find("read_only") != std::string::npos);
    CHECK(demo::identical(ref, *loaded));
  }
}

TEST_CASE("ineligible loads take the ordinary path and say why", "[pipeline]") {
  Fixture f;
  auto store = f.store();
  LoadedModel ref = f.reference();
  CHECK(ref.report.reason == "no cache store is configured");
  CHECK(ref.report.not_cached == NotCached::no_store);
  LoadPlan opt_out = f.plan();
  opt_out.no_cache_reason = "the caller opted out of caching";
  auto a = load_model(store.get(), opt_out);
  CHECK(a->report.path == LoadPath::ineligible);
  CHECK(a->report.reason == "the caller opted out of caching");
  CHECK(a->report.not_cached == NotCached::opted_out);
  LoadPlan adapter = f.plan();
  adapter.no_cache_reason = "fused LoRA adapter checkpoint";
  auto b = load_model(store.get(), adapter);
  CHECK(b->report.path == LoadPath::ineligible);
  CHECK(b->report.reason == "fused LoRA adapter checkpoint");
  Config off = test::test_config(f.dir / "off");
  off.mode = CacheMode::disabled;
  auto disabled = *Store::open(off);
  auto c = load_model(disabled.get(), f.plan());
  CHECK(c->report.path == LoadPath::ineligible);
  CHECK(c->report.reason.find("disabled") != std::string::npos);
  CHECK(c->report.not_cached == NotCached::disabled);
  wait_for_publications();
  CHECK(list_entries(*store).value().empty());
  for (auto* m : {&*a, &*b, &*c}) CHECK(demo::identical(ref, *m));
}

TEST_CASE("a plan whose key names no weights or no loader is not cached, so two loaders never share an entry",
          "[pipeline]") {
  // Two loaders of different weights under one key: without the rule the second load was served
  // the first one's weights, as a hit.
  Fixture f;
  auto store = f.store();
  auto constant_loader = [](float value) {
    return [value](const LoadPlan&) -> Result<NamedTensors> { return NamedTensors{{"w", at::full({4}, value)}}; };
  };
  LoadPlan plan;
  plan.component = "generated";
  plan.expected = {{"w", DType::float32, {4}, std::nullopt, ""}};
  plan.source_identity = "v1";
  plan.ordinary_loader = constant_loader(1.0F);
  auto first = load_model(store.get(), plan);
  REQUIRE(first.is_ok());
  CHECK(first->report.path == LoadPath::ineligible);
  CHECK(first->report.not_cached == NotCached::no_checkpoint_identity);
  CHECK(first->report.reason.find("weights_identity") != std::string::npos);
  plan.ordinary_loader = constant_loader(2.0F);
  auto second = load_model(store.get(), plan);
  REQUIRE(second.is_ok());
  CHECK(second->report.path == LoadPath::ineligible);
  CHECK(second->weights.front().second[0].item<float>() == 2.0F);
  wait_for_publications();
  CHECK(list_entries(*store).value().empty());

  // Saying what identifies the weights makes the load cacheable, under that identity.
  plan.weights_identity = "generated-2.0";
  auto named = load_model(store.get(), plan);
  REQUIRE(named.is_ok());
  CHECK(named->report.path == LoadPath::miss);
  CHECK_FALSE(named->report.not_cached.has_value());

  // A checkpoint but no loader identity: a changed loader would be served the old weights.
  LoadPlan anonymous = f.plan();
  anonymous.source_identity.clear();
  auto a = load_model(store.get(), anonymous);
  REQUIRE(a.is_ok());
  CHECK(a->report.path == LoadPath::ineligible);
  CHECK(a->report.not_cached == NotCached::no_loader_identity);
}

TEST_CASE("derived buffers keep their addresses and get the right values after cold and warm loads and reloads",
          "[pipeline]") {
  Fixture f;
  auto store = f.store();
  auto model = load_model(store.get(), f.plan());
  REQUIRE(model.is_ok());
  const void* fused = model->derived.at("fused_norms").data_ptr();
  const void* rope = model->derived.at("rope").data_ptr();
  const void* weight = model->weights.front().second.data_ptr();
  auto norms_of = [](const LoadedModel& m) {
    std::vector<at::Tensor> n;
    for (const auto& [name, t] : m.weights)
      if (name.find("norm1.weight") != std::string::npos) n.push_back(t);
    return at::stack(n);
  };
  CHECK(at::equal(model->derived.at("fused_norms"), norms_of(*model)));

  auto warm = reload_model(store.get(), f.plan(), *model);  // warm reload into the same tensors
  REQUIRE(warm.is_ok());
  CHECK(warm->path == LoadPath::hit);
  CHECK(model->derived.at("fused_norms").data_ptr() == fused);
  CHECK(model->derived.at("rope").data_ptr() == rope);
  CHECK(model->weights.front().second.data_ptr() == weight);
  CHECK(at::equal(model->derived.at("fused_norms"), norms_of(*model)));

  // New weights (a fine-tuned checkpoint): a cold reload changes values, never addresses.
  demo::DitConfig changed = f.config;
  changed.seed = 2;
  REQUIRE(demo::write_checkpoint(changed, f.checkpoint).is_ok());
  auto cold = reload_model(store.get(), f.plan(), *model);
  REQUIRE(cold.is_ok());
  CHECK(cold->path == LoadPath::miss);
  CHECK(model->derived.at("fused_norms").data_ptr() == fused);
  CHECK(model->weights.front().second.data_ptr() == weight);
  CHECK(at::equal(model->derived.at("fused_norms"), norms_of(*model)));
  auto fresh = load_model(nullptr, demo::make_plan(changed, f.checkpoint, c10::Device(c10::kCPU)));
  CHECK(demo::identical(*fresh, *model));
}

TEST_CASE("an ordinary loader that does not produce the declared tensors is an error that names them", "[pipeline]") {
  Fixture f;
  auto store = f.store();
  LoadPlan plan = f.plan();
  plan.ordinary_loader = [inner = plan](const LoadPlan&) -> Result<NamedTensors> {
    auto t = run_ordinary_loader(inner);
    if (t) t->pop_back();  // lose final_norm.weight
    return t;
  };
  auto loaded = load_model(store.get(), plan);
  REQUIRE_FALSE(loaded.is_ok());
  CHECK(loaded.status().message().find("'final_norm.weight' is missing") != std::string::npos);
  wait_for_publications();
  CHECK(list_entries(*store).value().empty());  // nothing incomplete was published
}

TEST_CASE("a cold load that breaks a declared alias group is refused before anything is published", "[pipeline]") {
  // The warm check refuses an entry whose tensors break a declared alias group; the cold check is
  // the same check, so such a loader output is an error at once, never an entry that every warm
  // lookup then refuses.
  Fixture f;
  auto store = f.store();
  LoadPlan plan = f.plan();
  REQUIRE(plan.expected.size() >= 2);
  plan.expected[0].alias_group = "tied";
  plan.expected[1].alias_group = "tied";  // declared to share one storage; the loader gives two
  auto loaded = load_model(store.get(), plan);
  REQUIRE_FALSE(loaded.is_ok());
  CHECK(loaded.status().code() == StatusCode::mismatch);
  CHECK(loaded.status().message().find("should share storage with the other tensors of group 'tied'") !=
        std::string::npos);
  wait_for_publications();
  CHECK(list_entries(*store).value().empty());
}

TEST_CASE("every tensor that does not fit the declared layout is named in one error", "[pipeline]") {
  Fixture f;
  auto store = f.store();
  LoadPlan plan = f.plan();
  REQUIRE(plan.expected.size() >= 3);
  const std::string dtype_changed = plan.expected[0].name;
  const std::string shape_changed = plan.expected[1].name;
  plan.expected[0].dtype = plan.expected[0].dtype == DType::float64 ? DType::float32 : DType::float64;
  plan.expected[1].sizes.push_back(1);
  ExpectedTensor absent;
  absent.name = "not.in.the.checkpoint";
  absent.sizes = {4};
  plan.expected.push_back(absent);
  auto loaded = load_model(store.get(), plan);
  REQUIRE_FALSE(loaded.is_ok());
  const std::string why = loaded.status().message();
  INFO(why);
  CHECK(why.find("3 problems") != std::string::npos);
  CHECK(why.find("tensor '" + dtype_changed + "': dtype") != std::string::npos);
  CHECK(why.find("tensor '" + shape_changed + "': shape") != std::string::npos);
  CHECK(why.find("tensor 'not.in.the.checkpoint' is missing") != std::string::npos);
  wait_for_publications();
  CHECK(list_entries(*store).value().empty());
}

TEST_CASE("a checkpoint path that changes during the ordinary load is never published under the old key",
          "[pipeline]") {
  // With content hashing too: the key then names the bytes, and the check after the loader still
  // compares the files' stat identity as this process saw it.
  const bool hash_contents = GENERATE(false, true);
  INFO("hash_checkpoint_contents " << hash_contents);
  test::DemoFixture f;
  // Two checkpoints of the same model with different weights; the plan loads through a link.
  demo::DitConfig other_config = f.config;
  other_config.seed = 2;
  const std::string other = f.dir / "other.safetensors";
  REQUIRE(demo::write_checkpoint(other_config, other).is_ok());
  const std::string link = f.dir / "current.safetensors";
  REQUIRE(::symlink(f.checkpoint.c_str(), link.c_str()) == 0);
  auto repoint = [&](const std::string& target) {
    const std::string tmp = link + ".new";
    REQUIRE(::symlink(target.c_str(), tmp.c_str()) == 0);
    REQUIRE(::rename(tmp.c_str(), link.c_str()) == 0);
  };
  LoadPlan plan = demo::make_plan(f.config, link, c10::Device(c10::kCPU));
  plan.hash_checkpoint_contents = hash_contents;
  const auto reference = load_model(nullptr, plan);  // the weights of f.checkpoint
  REQUIRE(reference.is_ok());

  // The key is taken while the link names f.checkpoint; the link flips before the loader reads.
  LoadPlan flipping = plan;
  flipping.ordinary_loader = [&, inner = plan](const LoadPlan&) {
    repoint(other);
    return run_ordinary_loader(inner);
  };
  auto store = f.store();
  auto poisoned = load_model(store.get(), flipping);
  REQUIRE(poisoned.is_ok());
  CHECK(poisoned->report.reason.find("not published") != std::string::npos);
  CHECK(poisoned->report.reason.find("changed while the ordinary loader read it") != std::string::npos);
  wait_for_publications();
  auto entries = list_entries(*store);
  REQUIRE(entries.is_ok());
  CHECK(entries->empty());

  // Back to the first checkpoint: the load must give its weights, not the other's.
  repoint(f.checkpoint);
  auto again = load_model(store.get(), plan);
  REQUIRE(again.is_ok());
  CHECK(again->report.path == LoadPath::miss);
  CHECK(demo::identical(*reference, *again));
}
