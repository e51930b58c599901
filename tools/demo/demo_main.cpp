// snapcache-demo: README's main job. Generates a small DiT-like safetensors checkpoint, loads one
// TP rank cold (ordinary loader, publish), then warm (from the snapshot), runs a forward pass on
// each, and proves both loads (and a load without any cache) give bit-identical weights and
// outputs. Prints each load's stages and times.
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/Context.h>

#include <cstring>

#include "dit_model.h"
#include "snapcache/config.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "util/fmt.h"
#include "snapcache/text.h"

using namespace snapcache;

int main(int argc, char** argv) {
  CLI::App app{"snapcache demo: cold load, warm load, bit-identical results"};
  std::string cache_dir, work_dir = "/tmp/snapcache-demo", device_name;
  std::uint64_t size_mib = 320;
  int tp_rank = 0, tp_size = 1;
  bool disable_cache = false;
  double capacity_gib = -1;
  app.add_option("--dir", cache_dir, "cache directory (default: SNAPCACHE_DIR or ~/.cache/snapcache)");
  app.add_option("--work-dir", work_dir, "where the generated checkpoint is written")->capture_default_str();
  app.add_option("--size-mib", size_mib, "approximate checkpoint size in MiB")->capture_default_str()->check(CLI::Range(16, 65536));
  app.add_option("--tp-rank", tp_rank, "tensor-parallel rank to load")->capture_default_str();
  app.add_option("--tp-size", tp_size, "tensor-parallel size (1, 2, 4 or 8)")->capture_default_str()->check(CLI::IsMember({1, 2, 4, 8}));
  app.add_option("--device", device_name, "cpu or cuda[:N] (default: cuda if available, else cpu)");
  app.add_flag("--disable-cache", disable_cache, "load without the cache (both loads take the ordinary path)");
  app.add_option("--capacity-gib", capacity_gib, "cache capacity in GiB");
  CLI11_PARSE(app, argc, argv);
  if (tp_rank < 0 || tp_rank >= tp_size) {
    fmt::print(stderr, "snapcache-demo: --tp-rank {} is not in [0, {})\n", tp_rank, tp_size);
    return 2;
  }

  auto config = Config::from_environment();
  if (!config) {
    fmt::print(stderr, "snapcache-demo: {}\n", config.status().message());
    return 2;
  }
  if (!cache_dir.empty()) config->directory = cache_dir;
  if (disable_cache) config->mode = CacheMode::disabled;
  if (capacity_gib >= 0) config->capacity_bytes = static_cast<std::uint64_t>(capacity_gib * static_cast<double>(kGiB));

  c10::Device device(c10::kCPU);
  try {
    device = device_name.empty() ? c10::Device(at::hasCUDA() ? c10::kCUDA : c10::kCPU) : c10::Device(device_name);
  } catch (const c10::Error&) {
    fmt::print(stderr, "snapcache-demo: unknown device '{}'\n", device_name);
    return 2;
  }
  if (device.is_cuda() && !at::hasCUDA()) {
    fmt::print(stderr, "snapcache-demo: no CUDA device here; use --device cpu\n");
    return 2;
  }

  demo::DitConfig dit;
  dit.tp_rank = tp_rank;
  dit.tp_size = tp_size;
  const std::uint64_t per_layer = demo::checkpoint_bytes({dit.hidden, 1, dit.heads, dit.tokens, 0, 1, 1});
  dit.layers = std::max<std::int64_t>(1, static_cast<std::int64_t>(size_mib * (1ull << 20) / per_layer));

  ::mkdir(work_dir.c_str(), 0755);
  const std::string checkpoint = fmt::format("{}/dit-h{}-l{}.safetensors", work_dir, dit.hidden, dit.layers);
  struct stat st {};
  if (::stat(checkpoint.c_str(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) < demo::checkpoint_bytes(dit)) {
    fmt::print("generating {} ({} layers, {})\n", checkpoint, dit.layers, format_size(demo::checkpoint_bytes(dit)));
    if (Status s = demo::write_checkpoint(dit, checkpoint); !s) {
      fmt::print(stderr, "snapcache-demo: {}\n", s.to_string());
      return 1;
    }
  }

  auto store = Store::open(*config);
  if (!store) {
    fmt::print(stderr, "snapcache-demo: {}\n", store.status().to_string());
    return 1;
  }
  LoadPlan plan = demo::make_plan(dit, checkpoint, device);
  // Start from a cold cache for this key, so the first load shows the cold path.
  if (config->enabled())
    if (auto key = key_for_plan(**store, plan)) (void)remove_entry(**store, key_id(*key));

  fmt::print("checkpoint {} | tp {}/{} | device {} | cache {}\n\n", checkpoint, tp_rank, tp_size, device.str(),
             config->enabled() ? config->directory : "disabled");
  std::fflush(stdout);  // keep the library's log lines (stderr) in order with ours
  auto reference = load_model(nullptr, plan);  // the ordinary path, no cache involved
  auto cold = load_model(store->get(), plan);
  auto warm = load_model(store->get(), plan);
  for (auto* r : {&reference, &cold, &warm})
    if (!*r) {
      fmt::print(stderr, "snapcache-demo: load failed: {}\n", r->status().to_string());
      return 1;
    }
  at::Tensor out_ref = demo::forward(dit, *reference), out_cold = demo::forward(dit, *cold),
             out_warm = demo::forward(dit, *warm);

  for (auto [title, model] : {std::pair{"first load", &*cold}, std::pair{"second load", &*warm}}) {
    fmt::print("{}: {} — {}\n{}\n", title, to_string(model->report.path), model->report.reason, model->report.table());
  }
  const bool weights_ok = demo::identical(*reference, *cold) && demo::identical(*cold, *warm);
  const bool outputs_ok = demo::identical(out_ref, out_cold) && demo::identical(out_cold, out_warm);
  fmt::print("weights  (no cache / first / second): {}\n", weights_ok ? "bit-identical" : "DIFFERENT");
  fmt::print("outputs  (no cache / first / second): {}  (checksum {:.6f})\n", outputs_ok ? "bit-identical" : "DIFFERENT",
             out_warm.to(at::kDouble).sum().item<double>());
  if (warm->report.path == LoadPath::hit && cold->report.seconds > 0)
    fmt::print("second load took {:.1f}% of the first ({:.3f} s vs {:.3f} s)\n",
               100.0 * warm->report.seconds / cold->report.seconds, warm->report.seconds, cold->report.seconds);
  return weights_ok && outputs_ok ? 0 : 3;
}
