// The host path of a load: post-load, precision, the marked host storages, the upload.
#include "host_path/host_to_device.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "host_path/read_ahead.h"
#include "load_plan/interruption.h"
#include "methods/named.h"
#include "snapcache/extend/gpu_upload.h"
#include "snapcache/extend/post_load.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache::host_path {

ServedStorages::ServedStorages(const HostStorages& served) : served_(served) {
  for (const HostStorage& s : served_.storages) index_.emplace(s.owner.unsafeGetStorageImpl(), &s);
}

const HostStorage* ServedStorages::find(const c10::StorageImpl* storage) const {
  auto it = index_.find(storage);
  return it == index_.end() ? nullptr : it->second;
}

const StoredBytes* ServedStorages::stored(const c10::StorageImpl* storage) const {
  const HostStorage* s = find(storage);
  return s != nullptr && s->file && !written_.count(storage) ? &*s->file : nullptr;
}

Result<HostStorages> prepare_on_host(const LoadPlan& plan, LoadReport& report, NamedTensors& tensors,
                                     ServedStorages& served, methods::DeferredLayouts* deferred, const MethodObserver& observe) {
  std::set<std::string> written_in_place;  // targets of methods that may write their storages
  const std::vector<std::string> no_names;
  StageTimer post(report, "post-load");
  std::optional<methods::DeferredLayouts::Scope> scope;
  if (deferred != nullptr) scope.emplace(*deferred);
  for (std::size_t m = 0; m < plan.post_load.size(); ++m) {
    const auto& method = plan.post_load[m];
    const std::string context = "post-load method " + method->name();
    Status st = guarded([&]() -> Status {
      std::vector<std::string> targets = method->targets(tensors);
      if (observe) observe(m, tensors, targets);
      const MethodProperties properties = method->properties();
      // What the method reads must be in host memory: its targets, or every tensor (an empty list).
      if (deferred != nullptr)
        if (Status read = deferred->materialize(tensors, properties.reads_only_targets ? targets : no_names); !read)
          return read;
      if (properties.writes == PostLoadWrites::may_write_in_place)
        for (const auto wanted = methods::name_set(targets); auto& [name, t] : tensors)
          if (wanted.count(name) != 0) {
            if (t.has_storage()) served.written_in_place(t.storage().unsafeGetStorageImpl());
            written_in_place.insert(name);
          }
      return method->apply(tensors);
    });
    if (!st) return post.fail(st.with_context(context));
  }
  post.done();
  scope.reset();
  if (!plan.precision.rules.empty()) {
    StageTimer precision(report, "precision");
    if (Status st = guarded([&] { return validate_precision(tensors, plan.precision); }); !st)
      return precision.fail(st);
    precision.done();
  }

  auto host = describe_host_storages(tensors);
  if (!host) return host.status().with_context("after post-load");
  const auto stored_of = [&](const c10::StorageImpl* storage) { return served.stored(storage); };
  for (HostStorage& s : host->storages) {
    const c10::StorageImpl* storage = s.owner.unsafeGetStorageImpl();
    s.written_by_post_load = served.find(storage) == nullptr || served.written(storage);
    for (std::size_t i : s.tensors) s.written_by_post_load |= written_in_place.count(tensors[i].first) > 0;
    if (const StoredBytes* stored = stored_of(storage); stored != nullptr && !s.written_by_post_load) s.file = *stored;
    if (deferred != nullptr) s.pending = deferred->pending(storage, stored_of);
  }
  return host;
}

namespace {

// Writes the pending layout conversions into host memory, for an uploader that does not.
Status materialize_pending(methods::DeferredLayouts* deferred, const NamedTensors& tensors, HostStorages& host) {
  if (deferred == nullptr || deferred->empty()) return Status::ok();
  Status written = deferred->materialize(tensors);
  if (written)
    for (HostStorage& s : host.storages) s.pending.reset();
  return written;
}

// Below this the plain copy is as fast: the engine's first load in a process pins its staging
// buffers (two per worker, a worker per 64 MiB), which costs about what a plain copy of 64 MiB
// does (docs/performance.md).
constexpr std::uint64_t kStagedUploadMinBytes = 64ull << 20;

// `write_first`: conversions still pending, written into host memory before the uploader runs.
Result<Uploaded> upload_with(Uploader& uploader, const LoadPlan& plan, const NamedTensors& tensors, HostStorages& host,
                             methods::DeferredLayouts* write_first) {
  if (Status st = materialize_pending(write_first, tensors, host); !st) return st;
  auto device = guarded([&] { return uploader.upload(tensors, host, plan.device); });
  if (!device) return device.status().with_context(fmt::format("upload to {} ({})", plan.device.str(), uploader.name()));
  if (device->tensors.size() != tensors.size())
    return Status(StatusCode::mismatch, fmt::format("uploader {} returned {} tensors for {}", uploader.name(),
                                                    device->tensors.size(), tensors.size()));
  return device;
}

}  // namespace

std::shared_ptr<Uploader> default_uploader(c10::Device device, std::uint64_t bytes) {
  static const std::shared_ptr<Uploader> staged = staged_uploader();
  return device.is_cuda() && bytes >= kStagedUploadMinBytes ? staged : per_storage_uploader();
}

std::uint64_t declared_bytes(const ExpectedLayout& expected) {
  std::uint64_t total = 0;
  std::map<std::string, std::uint64_t> groups;
  for (const ExpectedTensor& t : expected) {
    std::uint64_t bytes = element_size(t.dtype);
    for (std::int64_t d : t.sizes) bytes *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    if (t.alias_group.empty()) total += bytes;
    else groups[t.alias_group] = std::max(groups[t.alias_group], bytes);
  }
  for (const auto& [group, bytes] : groups) total += bytes;
  return total;
}

Result<Uploaded> upload(const LoadPlan& plan, const std::shared_ptr<Uploader>& uploader, const NamedTensors& tensors,
                        HostStorages& host, methods::DeferredLayouts* deferred, LoadReport& report) {
  // On the CPU the uploader hands the host tensors out as they are (the plain copy moves nothing):
  // no upload happened, so the report lists none, unless it failed.
  const bool moves = !plan.device.is_cpu();
  // The per-storage copy is every other uploader's fallback, on host bytes with every conversion
  // written; a damaged entry is not retried.
  const std::shared_ptr<Uploader> fallback = per_storage_uploader();
  for (bool is_fallback = false;; is_fallback = true) {
    Uploader& by = is_fallback ? *fallback : *uploader;
    StageTimer stage(report, is_fallback ? "upload (fallback)" : "upload");
    auto device = upload_with(by, plan, tensors, host, is_fallback ? deferred : nullptr);
    if (device) {
      moves ? stage.done(host.total_bytes()) : stage.skip();
      return device;
    }
    if (&by == fallback.get() || device.status().code() == StatusCode::damaged) return stage.fail(device.status());
    stage.fail(device.status().to_string());
    report.reason += (report.reason.empty() ? "" : "; ") + device.status().to_string() + "; uploaded by the per-storage copy instead";
  }
}

Result<Uploaded> to_device(const LoadPlan& plan, LoadReport& report, TierAnswer& served) {
  NamedTensors& tensors = served.tensors;
  // The uploader is chosen before post-load, so conversions can be left to one that writes them.
  const std::shared_ptr<Uploader> uploader =
      plan.uploader ? plan.uploader : default_uploader(plan.device, served.storages.total_bytes());
  methods::DeferredLayouts deferred;  // outlives the upload: it keeps the conversions' sources
  methods::DeferredLayouts* defer = uploader->traits(plan.device).converts_layouts ? &deferred : nullptr;
  // What the methods read, read in parallel instead of a page fault at a time, when the tier found
  // part of its files off the page cache: from a hit's files, or from the checkpoint's (the
  // storages the ordinary tier found untouched in its mapping).
  if (served.bytes_from_disk > 0 && !plan.post_load.empty()) {
    StageTimer ahead(report, "read-ahead");
    ahead.done(read_ahead_for_post_load(plan.post_load, tensors, served.storages));
  }
  ServedStorages served_storages(served.storages);
  auto host = prepare_on_host(plan, report, tensors, served_storages, defer);
  if (!host) return host.status();
  SNAPCACHE_RETURN_IF_ERROR(load_plan::interruption(plan, "the upload"));
  auto device = upload(plan, uploader, tensors, *host, defer, report);
  if (device && report.path == LoadPath::hit) {
    report.bytes_checked = device->bytes_checked;
    report.bytes_trusted = served.file_bytes > device->bytes_checked ? served.file_bytes - device->bytes_checked : 0;
  }
  return device;
}

}  // namespace snapcache::host_path
