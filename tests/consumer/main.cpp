// A user of the installed package: loads a model through the pipeline with a tier and an uploader
// of its own (subclassing the library's seams across the shared-library boundary), then does what
// the `snapcache` command does (list, inspect, verify, counters, evict, gc) with the public API
// alone. The library exports nothing else (hidden visibility), so this proves the API suffices.
#include <ATen/Functions.h>
#include <snapcache/extend/host_storage.h>
#include <snapcache/extend/tier.h>
#include <snapcache/extend/uploader.h>
#include <snapcache/maintenance.h>
#include <snapcache/manifest.h>
#include <snapcache/pipeline.h>
#include <snapcache/text.h>
#include <snapcache/version.h>

#include <cstdio>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%-60s %s\n", what.c_str(), ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

// A source of the weights in front of the others that never has them: a user's own tier.
class EmptyTier final : public snapcache::Tier {
 public:
  std::string name() const override { return "user"; }
  snapcache::Result<snapcache::TierAnswer> serve(snapcache::LoadContext&) override {
    ++asked;
    return snapcache::TierAnswer::missed("the user tier holds nothing");
  }
  int asked = 0;
};

class CountingUploader final : public snapcache::Uploader {
 public:
  std::string name() const override { return "counting"; }
  snapcache::Result<snapcache::Uploaded> upload(const snapcache::NamedTensors& tensors,
                                                const snapcache::HostStorages& storages, c10::Device device) override {
    ++calls;
    storages_seen = storages.storages.size();
    return snapcache::per_storage_uploader()->upload(tensors, storages, device);
  }
  int calls = 0;
  std::size_t storages_seen = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  snapcache::Config config;
  config.directory = argv[1];
  config.reserve_free_bytes = 0;
  auto store = snapcache::Store::open(config);
  if (!store) {
    std::printf("open: %s\n", store.status().to_string().c_str());
    return 3;
  }

  const at::Tensor w = at::arange(12, at::kFloat).reshape({3, 4});
  auto user_tier = std::make_shared<EmptyTier>();
  auto uploader = std::make_shared<CountingUploader>();
  snapcache::LoadPlan plan;
  plan.component = "consumer";
  plan.source_identity = "consumer-v1";
  // No checkpoint file: the key names the weights instead (a load that names neither is not cached).
  plan.weights_identity = "arange(12) as 3x4 float32";
  plan.dtype = "float32";
  plan.expected = {{"w", snapcache::DType::float32, {3, 4}, std::nullopt, "a"},
                   {"w.t", snapcache::DType::float32, {4, 3}, std::nullopt, "a"}};
  plan.ordinary_loader = [&](const snapcache::LoadPlan&) -> snapcache::Result<snapcache::NamedTensors> {
    at::Tensor own = w.clone();
    return snapcache::NamedTensors{{"w", own}, {"w.t", own.t()}};
  };
  plan.tiers = {user_tier, snapcache::snapshot_tier(), snapcache::ordinary_tier()};
  plan.uploader = uploader;

  auto cold = snapcache::load_model(store->get(), plan);
  auto warm = snapcache::load_model(store->get(), plan);
  check(cold.is_ok() && cold->report.path == snapcache::LoadPath::miss, "cold load through the pipeline");
  check(warm.is_ok() && warm->report.path == snapcache::LoadPath::hit, "warm load from the snapshot");
  check(warm.is_ok() && at::equal(warm->weights[0].second, w) && at::equal(warm->weights[1].second, w.t()) &&
            warm->weights[0].second.data_ptr() == warm->weights[1].second.data_ptr(),
        "warm weights equal, aliases kept");
  check(user_tier->asked == 2 && warm.is_ok() && warm->report.tiers.size() == 2 &&
            warm->report.tiers[0].tier == "user",
        "a user's Tier is asked first and reported");
  check(uploader->calls == 2 && uploader->storages_seen == 1, "a user's Uploader gets the host storages");

  // What `snapcache ls`, `inspect`, `verify` and `stats` show.
  auto entries = snapcache::list_entries(**store);
  check(entries.is_ok() && entries->size() == 1 && entries->front().state == snapcache::EntryState::ok,
        "list_entries: one sound entry");
  const std::string id = entries.is_ok() && !entries->empty() ? entries->front().id : "";
  auto info = snapcache::entry_info(**store, id);
  check(info.is_ok() && info->manifest && info->manifest->tensors.size() == 2 && info->identity_trusted,
        "entry_info: manifest and trusted identity");
  check(info.is_ok() && snapcache::format_size(info->bytes) != "" &&
            snapcache::format_dims(info->manifest->tensors[1].strides) == "[1, 4]",
        "format_size and format_dims");
  auto verified = snapcache::verify_entry(**store, id);
  check(verified.status.is_ok() && verified.bytes_hashed > 0, "verify_entry rehashes the entry");
  auto counters = snapcache::read_counters(**store);
  check(counters.is_ok() && counters->hits >= 1 && counters->published == 1, "read_counters: hits and publications");

  // What `snapcache evict` and `gc` do. The warm model still holds its lease: evicting is refused.
  snapcache::EvictRequest all;
  all.all = true;
  auto busy = snapcache::evict(**store, all);
  check(busy.is_ok() && busy->evicted.empty() && busy->skipped.size() == 1, "evict leaves a leased entry");
  warm = snapcache::Status(snapcache::StatusCode::not_found, "released");
  cold = snapcache::Status(snapcache::StatusCode::not_found, "released");
  auto evicted = snapcache::evict(**store, all);
  check(evicted.is_ok() && evicted->evicted.size() == 1, "evict removes it once released");
  snapcache::GarbageOptions gc;
  gc.grace_seconds = 0;
  auto garbage = snapcache::collect_garbage(**store, gc);
  if (garbage.is_ok())
    for (const auto& item : *garbage) std::printf("left over: %s (%s)\n", item.path.c_str(), item.reason.c_str());
  check(garbage.is_ok() && garbage->empty(), "collect_garbage: nothing left over");
  auto after = snapcache::list_entries(**store);
  check(after.is_ok() && after->empty(), "the cache is empty");

  std::printf("consumer of snapcache %s (format %u): %s\n", snapcache::kVersion, snapcache::kFormatVersion,
              failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
