// Publishes two tensors through the installed library and loads them back.
#include <ATen/Functions.h>
#include <snapcache/snapshot.h>
#include <snapcache/version.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  snapcache::Config config;
  config.directory = argv[1];
  config.reserve_free_bytes = 0;
  auto store = snapcache::Store::open(config);
  if (!store) return 3;
  snapcache::Key key;
  key.component = "consumer";
  key.torch = snapcache::current_torch_identity();
  at::Tensor w = at::arange(12, at::kFloat).reshape({3, 4});
  snapcache::NamedTensors tensors = {{"w", w}, {"w.t", w.t()}};
  auto pub = snapcache::publish_tensors(**store, key, tensors);
  auto loaded = snapcache::load_tensors(**store, key);
  bool ok = pub.result == snapcache::PublishResult::published &&
            loaded.lookup.result == snapcache::LookupResult::hit && loaded.tensors.size() == 2 &&
            at::equal(loaded.tensors[0].second, w) && at::equal(loaded.tensors[1].second, w.t());
  std::printf("consumer of snapcache %s: %s\n", snapcache::kVersion, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
