// A loader as the README shows one: it includes the loader's surface and nothing else, and must
// compile with it. public_surface (check_surface.cmake) fails when what these two headers pull in
// grows past the loader's seven public headers or reaches a format or extension type.
#include <snapcache/config.h>
#include <snapcache/pipeline.h>

#include <cstdio>

int main() {
  std::shared_ptr<snapcache::Store> store = snapcache::Store::open_for_loading(snapcache::Config::from_environment());

  snapcache::LoadPlan plan;
  plan.checkpoint_files = {"/models/dit/model.safetensors"};
  plan.component = "dit";
  plan.source_identity = "dit-loader 1";
  plan.dtype = "bfloat16";
  plan.topology.tp_rank = 0;
  plan.topology.tp_size = 1;
  plan.expected = {{"blocks.0.attn.qkv.weight", snapcache::DType::bfloat16, {384, 128}}};
  plan.precision.name = "bf16";
  plan.precision.rules = {{".weight", {snapcache::DType::bfloat16}}};
  plan.post_load.push_back(snapcache::int8_row_scale_method());
  plan.ordinary_loader = [](const snapcache::LoadPlan&) -> snapcache::Result<snapcache::NamedTensors> {
    return snapcache::NamedTensors{};
  };

  snapcache::Result<snapcache::LoadedModel> model = snapcache::load_model(store.get(), plan);
  if (!model.is_ok()) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  std::printf("%s\n", model->report.summary().c_str());
  // ok: the entry is in the cache; skipped (the cache disabled, say) is no failure: the load stands.
  snapcache::PublicationReport published = model->publication.wait();
  if (!published.status.is_ok()) std::printf("not published: %s\n", published.status.to_string().c_str());
  return published.failed() ? 1 : 0;
}
