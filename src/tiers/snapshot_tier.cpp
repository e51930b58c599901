// The disk tier: a verified, leased snapshot entry mapped privately; a cold load is published.
#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "host_path/host_copy.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/extend/tier.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/pipeline.h"
#include "tiers/background_publication.h"
#include "util/fmt.h"
#include "util/page_cache.h"
#include "util/parallel.h"

namespace snapcache {
namespace {

// The chunk checksums of the entry `tensors` make, taken before the load hands them out (in the
// report's stage); nothing when they cannot be taken, and the load then waits for the publication.
std::optional<std::vector<std::uint64_t>> fingerprint_to_publish(LoadContext& load, const NamedTensors& tensors) {
  StageTimer stage(load.report, "fingerprint for the publication");
  auto captured = capture_tensors(tensors);
  auto fingerprint = captured ? fingerprint_sources(captured->storages) : Result<std::vector<std::uint64_t>>(captured.status());
  if (!fingerprint) {
    stage.fail(fingerprint.status().to_string() + "; the load waits for the publication instead");
    return std::nullopt;
  }
  std::uint64_t bytes = 0;
  for (const StorageSource& s : captured->storages) bytes += s.nbytes;
  stage.done(bytes);
  return std::move(*fingerprint);
}

bool writes_in_place(const LoadPlan& plan) {
  return std::any_of(plan.post_load.begin(), plan.post_load.end(), [](const auto& method) {
    return method->properties().writes == PostLoadWrites::may_write_in_place;
  });
}

// A copy of `tensors` for the publication to write; nothing when no copy can be made, and the load
// then waits for the publication.
std::optional<NamedTensors> copy_to_publish(LoadContext& load, const NamedTensors& tensors) {
  StageTimer stage(load.report, "copy for the publication");
  auto copied = host_path::copy_host_tensors(tensors, util::worker_count());
  if (!copied) {
    stage.fail(copied.status().to_string() + "; the load waits for the publication instead");
    return std::nullopt;
  }
  stage.done(copied->bytes);
  return std::move(copied->tensors);
}

// The key was taken from the checkpoint files' identities before the ordinary loader opened them.
// If a path now names other bytes (a symlink flipped, a file replaced), the weights may be another
// checkpoint's, and publishing them under this key would serve them to every later load of it.
Status checkpoint_unchanged(Store& store, const LoadPlan& plan, const Key& key) {
  auto now = describe_checkpoint(store.fs(), plan.checkpoint_files);
  if (!now) return now.status().with_context("checking the checkpoint again after the ordinary loader");
  for (std::size_t i = 0; i < now->size() && i < key.checkpoint.size(); ++i) {
    CheckpointFile before = key.checkpoint[i];
    before.content_digest.clear();  // identity only: the digest is not read again
    if ((*now)[i] != before)
      return Status(StatusCode::mismatch,
                    fmt::format("checkpoint file {} changed while the ordinary loader read it (inode {} -> {}, size "
                                "{} -> {}); the weights may not be the ones the key names",
                                before.path, before.inode, (*now)[i].inode, before.size, (*now)[i].size));
  }
  if (now->size() != key.checkpoint.size())
    return Status(StatusCode::mismatch, "the checkpoint's file list changed while the ordinary loader read it");
  return Status::ok();
}

// The entry's data files (each once) and, of their bytes, those not in the page cache now (sampled):
// asked before post-load or the upload read them.
void note_files_off_page_cache(TierAnswer& served) {
  std::set<const StoredFile*> seen;
  for (const HostStorage& s : served.storages.storages) {
    if (!s.file || !seen.insert(s.file->file.get()).second) continue;
    const StoredFile& f = *s.file->file;
    served.file_bytes += f.size();
    if (const std::optional<double> share = f.resident_share())
      served.bytes_from_disk += util::bytes_off_page_cache(f.size(), *share);
  }
}

class SnapshotTier final : public Tier {
 public:
  std::string name() const override { return "snapshot"; }

  Result<TierAnswer> serve(LoadContext& load) override {
    if (load.store == nullptr || load.key == nullptr) return TierAnswer::skipped(load.ineligible);
    StageTimer stage(load.report, "lookup");
    tiers::wait_for_publication_of(*load.key);  // this process may be publishing it right now
    LookupOutcome lk = load.store->lookup(*load.key, VerifyPolicy::trust_identity, &load.plan.expected);
    switch (lk.result) {
      case LookupResult::hit: {
        NamedTensors tensors = tensors_of(lk.snapshot);
        auto storages = snapshot_storages(lk.snapshot, tensors);
        if (!storages) return stage.fail(storages.status().with_context("entry " + lk.entry_id));
        // The bytes the lookup read (a rehash), not those it mapped: a mapping reads nothing yet.
        stage.done(lk.bytes_hashed);
        TierAnswer served = TierAnswer::served(std::move(tensors), Residence::host, Provenance::cache,
                                               std::move(lk.reason), std::move(lk.entry_id));
        served.storages = std::move(*storages);
        served.layout_checked = true;  // the lookup checked the entry's records, and the tensors are theirs
        note_files_off_page_cache(served);
        return served;
      }
      case LookupResult::miss:
        stage.done();
        return TierAnswer::missed(std::move(lk.reason), std::move(lk.entry_id));
      case LookupResult::damaged:
      case LookupResult::fallback:
        stage.fail(lk.reason);
        return TierAnswer::unusable(std::move(lk.reason), std::move(lk.entry_id));
      case LookupResult::disabled:
        stage.done();
        return TierAnswer::skipped(std::move(lk.reason));
    }
    return Status(StatusCode::invalid_argument, "unknown lookup result");
  }

  void load_failed(LoadContext& load, const Status& why) override {
    if (load.store == nullptr || load.key == nullptr || !load.store->unavailable_reason().empty()) return;
    record_failed_load(*load.store, *load.key, why.to_string());
  }

  Kept keep(LoadContext& load, const NamedTensors& tensors) override {
    if (load.store == nullptr || load.key == nullptr) return {};
    // An unavailable store would only skip, and the lookup already gave its reason.
    if (!load.store->unavailable_reason().empty()) return {};
    if (Status same = checkpoint_unchanged(*load.store, load.plan, *load.key); !same)
      return {.note = "not published: " + same.to_string(), .publication = {}};
    if (load.plan.publish_in_background) {
      Kept kept;
      NamedTensors published = tensors;
      PublishOptions options;
      // A CPU load hands these very tensors out, and its caller may write into them at once. A group
      // waits for every rank's publication anyway: it publishes them as they are.
      if (load.plan.device.is_cpu() && load.plan.group == nullptr) {
        if (writes_in_place(load.plan) || sources_changed_while_published(*load.store, *load.key)) {
          // A method of the plan will write into them, or this key's caller did while they were
          // published before: the publication writes a copy of its own.
          if (auto copy = copy_to_publish(load, tensors)) {
            published = std::move(*copy);
            kept.publication_needs_tensors_unchanged = false;
          }
        } else {
          // Tensors of the publication's own over the same storages: a caller that points its
          // tensors at other storages (`param.data = ...`) changes neither what the publication
          // reads nor how long those storages live.
          NamedTensors own;
          own.reserve(tensors.size());
          for (const auto& [name, t] : tensors) own.emplace_back(name, t.alias());
          if (auto fingerprint = fingerprint_to_publish(load, own)) {
            // The publication writes only these bytes: a write by the caller fails it, keeping nothing.
            options.expected_chunk_hashes = std::move(*fingerprint);
            published = std::move(own);
            kept.publication_needs_tensors_unchanged = false;
          }
        }
      }
      StageTimer stage(load.report, "publish (started)");
      kept.publication = tiers::publish_in_background(load.store->shared_from_this(), *load.key, std::move(published),
                                                      std::move(options));
      stage.done();
      return kept;
    }
    StageTimer stage(load.report, "publish");
    return {.note = tiers::record_publication(
                load.report.publish.emplace(publication_report(publish_tensors(*load.store, *load.key, tensors))), stage),
            .publication = {}};
  }

  // Bit rot under unchanged file identities: the entry goes to quarantine, so no load maps it
  // again, and the next load rebuilds it from the checkpoint.
  std::string damaged(LoadContext& load, const std::string& entry_id, const Status& why) override {
    if (load.store == nullptr || entry_id.empty()) return {};
    const Status quarantined = quarantine(*load.store, entry_id, "checksum mismatch while staging: " + why.message());
    return quarantined ? "was quarantined" : "could not be quarantined: " + quarantined.to_string();
  }
};

}  // namespace

std::shared_ptr<Tier> snapshot_tier() { return std::make_shared<SnapshotTier>(); }

}  // namespace snapcache
