// The source tier: the plan's own loader reads the checkpoint; its output must be what the model
// declares, or the load is an error (nothing incomplete is ever published).
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/tier.h"
#include "snapcache/pipeline.h"
#include "snapcache/store.h"
#include "torch/exceptions.h"
#include "util/page_cache.h"

namespace snapcache {
namespace {

// Collects what a streaming loader puts, in order, and passes each part on.
class Collector final : public TensorSink {
 public:
  explicit Collector(TensorSink* also) : also_(also) {}
  Status put(NamedTensors tensors) override {
    all_.insert(all_.end(), tensors.begin(), tensors.end());
    return also_ != nullptr ? also_->put(std::move(tensors)) : Status::ok();
  }
  NamedTensors take() { return std::move(all_); }

 private:
  TensorSink* also_;
  NamedTensors all_;
};

// Asked before the loader reads them: how much of the checkpoint is not in the page cache, so
// will come from the disk (LoadReport::bytes_from_disk). A file that cannot be asked counts as
// neither; the loader meets whatever stopped the question itself.
void note_checkpoint_off_page_cache(LoadContext& load) {
  const std::shared_ptr<FileSystem> posix = load.store != nullptr ? nullptr : posix_file_system();
  FileSystem& fs = posix ? *posix : load.store->fs();
  for (const std::string& path : load.plan.checkpoint_files)
    if (auto residency = util::residency_of(fs, path)) {
      load.report.file_bytes += residency->size;
      load.report.bytes_from_disk += residency->off_page_cache;
    }
}

class OrdinaryTier final : public Tier {
 public:
  std::string name() const override { return "ordinary"; }

  Result<TierAnswer> serve(LoadContext& load) override {
    const LoadPlan& plan = load.plan;
    note_checkpoint_off_page_cache(load);
    StageTimer read(load.report, "ordinary load");
    auto tensors = run_ordinary_loader(plan, load.ahead);
    if (!tensors) return read.fail(tensors.status().with_context("ordinary loader"));
    auto host = describe_host_storages(*tensors);  // host tensors are CPU tensors
    if (!host) return read.fail(host.status().with_context("ordinary loader output"));
    read.done(host->total_bytes());

    StageTimer complete(load.report, "completeness");
    if (Status st = check_completeness(*tensors, plan.expected); !st)
      return complete.fail(st);
    complete.done();
    TierAnswer served = TierAnswer::served(std::move(*tensors), Residence::host, Provenance::source,
                                           "read from the checkpoint by the ordinary loader");
    served.storages = std::move(*host);
    served.layout_checked = true;
    return served;
  }
};

}  // namespace

Result<NamedTensors> run_ordinary_loader(const LoadPlan& plan, TensorSink* also) {
  return guarded([&]() -> Result<NamedTensors> {
    if (plan.ordinary_loader) return plan.ordinary_loader(plan);
    if (!plan.streaming_loader) return Status(StatusCode::invalid_argument, "the load plan has no ordinary loader");
    Collector collected(also);
    SNAPCACHE_RETURN_IF_ERROR(plan.streaming_loader(plan, collected));
    return collected.take();
  });
}

std::shared_ptr<Tier> ordinary_tier() { return std::make_shared<OrdinaryTier>(); }

}  // namespace snapcache
