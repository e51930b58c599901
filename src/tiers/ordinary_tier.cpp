// The source tier: the plan's own loader reads the checkpoint; its output must be what the model
// declares, or the load is an error (nothing incomplete is ever published).
#include "loaders/checkpoint_file.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/tier.h"
#include "snapcache/pipeline.h"
#include "snapcache/log.h"
#include "snapcache/store.h"
#include "snapcache/text.h"
#include "torch/exceptions.h"
#include "util/fmt.h"
#include "host_path/read_ahead.h"
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
// will come from the disk (TierAnswer::bytes_from_disk). A file that cannot be asked counts as
// neither; the loader meets whatever stopped the question itself.
struct CheckpointResidency {
  std::uint64_t file_bytes = 0;
  std::uint64_t bytes_from_disk = 0;
  std::vector<std::string> mostly_off;  // the files a quarter or more of which is not there
};
CheckpointResidency checkpoint_off_page_cache(const LoadPlan& plan, FileSystem& fs) {
  CheckpointResidency r;
  for (const std::string& path : plan.checkpoint_files)
    if (auto residency = util::residency_of(fs, path)) {
      r.file_bytes += residency->size;
      r.bytes_from_disk += residency->off_page_cache;
      if (residency->size > 0 && residency->off_page_cache * 4 >= residency->size) r.mostly_off.push_back(path);
    }
  return r;
}

// Those files, to read ahead of a load that reads the checkpoint whole: onto a device (whose upload
// reads every byte the loader did not; a CPU load hands out what the loader returned), and not a
// TP or PP rank's (which reads its slices).
std::vector<std::shared_ptr<const StoredFile>> to_read_ahead(const LoadPlan& plan, const std::shared_ptr<FileSystem>& fs,
                                                             const std::vector<std::string>& paths) {
  std::vector<std::shared_ptr<const StoredFile>> files;
  if (plan.device.is_cpu() || plan.topology.tp_size != 1 || plan.topology.pp_size != 1) return files;
  for (const std::string& path : paths)
    if (auto file = loaders::CheckpointFile::open(fs, path)) files.push_back(std::move(*file));
  return files;
}

class OrdinaryTier final : public Tier {
 public:
  explicit OrdinaryTier(const OrdinaryTierOptions& options) : options_(options) {}
  std::string name() const override { return "ordinary"; }

  Result<TierAnswer> serve(LoadContext& load) override {
    const LoadPlan& plan = load.plan;
    // The store's file system where there is one (tests fail its calls), not owned: the store
    // outlives the load.
    const std::shared_ptr<FileSystem> fs =
        load.store != nullptr ? std::shared_ptr<FileSystem>(std::shared_ptr<FileSystem>(), &load.store->fs())
                              : posix_file_system();
    const CheckpointResidency residency = checkpoint_off_page_cache(plan, *fs);
    // It runs alongside the loader, whose time it shares: a stage the load does not wait for.
    std::optional<StageTimer> with_loader;
    std::optional<host_path::FileReadAhead> ahead;
    if (auto files = options_.read_ahead ? to_read_ahead(plan, fs, residency.mostly_off)
                                         : std::vector<std::shared_ptr<const StoredFile>>();
        !files.empty()) {
      with_loader.emplace(load.report, "checkpoint read-ahead (with the loader)");
      ahead.emplace(std::move(files));
    }
    StageTimer read(load.report, "ordinary load");
    auto tensors = run_ordinary_loader(plan, load.ahead);
    if (ahead) with_loader->done(ahead->stop());
    if (!tensors) return read.fail(tensors.status().with_context("ordinary loader"));
    auto host = describe_host_storages(*tensors);  // host tensors are CPU tensors
    if (!host) return read.fail(host.status().with_context("ordinary loader output"));
    read.done(host->total_bytes());
    // What the loader handed on untouched from a checkpoint's mapping is marked as the file's: the
    // read-ahead for post-load reads it there.
    if (const std::uint64_t in_files = loaders::mark_checkpoint_storages(*host); in_files > 0)
      log(LogLevel::debug, fmt::format("{}: {} of the loader's {} lie untouched in the checkpoint's mapping, "
                                       "marked as the file's",
                                       plan.component, format_size(in_files), format_size(host->total_bytes())));

    StageTimer complete(load.report, "completeness");
    if (Status st = check_completeness(*tensors, plan.expected); !st)
      return complete.fail(st);
    complete.done();
    TierAnswer served = TierAnswer::served(std::move(*tensors), Residence::host, Provenance::source,
                                           "read from the checkpoint by the ordinary loader");
    served.storages = std::move(*host);
    served.layout_checked = true;
    served.file_bytes = residency.file_bytes;
    served.bytes_from_disk = residency.bytes_from_disk;
    return served;
  }

 private:
  OrdinaryTierOptions options_;
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

std::shared_ptr<Tier> ordinary_tier(const OrdinaryTierOptions& options) { return std::make_shared<OrdinaryTier>(options); }

}  // namespace snapcache
