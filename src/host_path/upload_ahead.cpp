#include "host_path/upload_ahead.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "methods/deferred_layout.h"
#include "host_path/host_to_device.h"
#include "loaders/checkpoint_file.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache::host_path {

struct UploadAhead::Part {
  NamedTensors put;  // as the loader put it
  // Per post-load method: what it was given, and what it targeted in it.
  std::vector<NamedTensors> given;
  std::vector<std::vector<std::string>> targets;
  Uploaded device;
};

std::unique_ptr<UploadAhead> UploadAhead::for_plan(const LoadPlan& plan) {
  if (plan.ordinary_loader || !plan.streaming_loader) return nullptr;  // run_ordinary_loader's choice
  for (const auto& method : plan.post_load) {
    const MethodProperties p = method->properties();
    if (p.writes != PostLoadWrites::new_storages_only || !p.applies_per_part) return nullptr;
  }
  return std::make_unique<UploadAhead>(plan);
}

UploadAhead::UploadAhead(const LoadPlan& plan)
    : plan_(plan),
      uploader_(plan.uploader ? plan.uploader : default_uploader(plan.device, declared_bytes(plan.expected))),
      converts_layouts_(uploader_->traits(plan.device).converts_layouts) {}

UploadAhead::~UploadAhead() { stop(/*drain=*/false); }

void UploadAhead::release() {
  stop(/*drain=*/false);
  parts_.clear();
  uploaded_storages_.clear();
}

void UploadAhead::stop(bool drain) {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    if (!drain) queued_.clear();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Status UploadAhead::put(NamedTensors tensors) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return Status::ok();  // the load no longer takes parts; the tier's answer still counts
    queued_.push_back(std::move(tensors));
    if (!started_) {
      started_ = true;
      worker_ = std::thread([this] { work(); });
    }
  }
  wake_.notify_one();
  return Status::ok();
}

void UploadAhead::work() {
  // The loader comes first. A loader's torch operations run on every core (OpenMP), and a team
  // waits for its slowest thread: on the GPU machine, uploading beside the demo's loader at normal
  // priority made the loader 7-9x slower (docs/performance.md). So this thread, and the engine's
  // workers it starts (threads inherit the policy), take only cores the loader leaves idle; once
  // the loader returns, every core is idle.
  sched_param none{};
  (void)sched_setscheduler(0, SCHED_IDLE, &none);
  at::ThreadLocalStateGuard state(thread_state_);
  for (;;) {
    NamedTensors tensors;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return closed_ || !queued_.empty(); });
      if (queued_.empty()) return;
      // Everything put since the last look, as one part: a slow upload takes bigger parts.
      for (NamedTensors& part : queued_) tensors.insert(tensors.end(), part.begin(), part.end());
      queued_.clear();
    }
    if (!failed_.is_ok()) continue;  // taken and dropped: the load runs the whole path
    if (Status st = guarded([&] { return prepare_and_upload(std::move(tensors)); }); !st) {
      failed_ = st;
      parts_.clear();  // the device memory goes back now
      uploaded_storages_.clear();
    }
  }
}

Status UploadAhead::prepare_and_upload(NamedTensors tensors) {
  Part part;
  part.put = tensors;
  part.given.resize(plan_.post_load.size());
  part.targets.resize(plan_.post_load.size());
  auto raw = describe_host_storages(tensors);
  if (!raw) return raw.status();
  loaders::mark_checkpoint_storages(*raw);  // as the ordinary tier marks the whole: the uploader is told
  ServedStorages served(*raw);
  methods::DeferredLayouts deferred;  // outlives the upload: it keeps the conversions' sources
  LoadReport report;
  auto host = prepare_on_host(plan_, report, tensors, served, converts_layouts_ ? &deferred : nullptr,
                              [&](std::size_t m, const NamedTensors& given, const std::vector<std::string>& targets) {
                                part.given[m] = given;
                                part.targets[m] = targets;
                              });
  if (!host) return host.status();
  // A storage in two parts would be uploaded twice: tied weights would come apart.
  for (const HostStorage& s : host->storages)
    if (!uploaded_storages_.emplace(s.owner.unsafeGetStorageImpl(), s.owner).second)
      return Status(StatusCode::invalid_argument,
                    fmt::format("tensor '{}' shares its storage with a tensor of an earlier part",
                                tensors[s.tensors.front()].first));
  auto device = upload(plan_, uploader_, tensors, *host, converts_layouts_ ? &deferred : nullptr, report);
  if (!device) return device.status();
  part.device = std::move(*device);
  for (const StageTime& s : report.stages) {
    auto same = std::find_if(stages_.begin(), stages_.end(), [&](const StageTime& t) { return t.stage == s.stage; });
    if (same == stages_.end()) same = stages_.insert(stages_.end(), {s.stage, 0, 0, ""});
    same->seconds += s.seconds;
    same->bytes += s.bytes;
    if (same->error.empty()) same->error = s.error;  // an engine failure the plain copy made good
  }
  if (!report.reason.empty() && std::find(notes_.begin(), notes_.end(), report.reason) == notes_.end())
    notes_.push_back(report.reason);
  parts_.push_back(std::move(part));
  return Status::ok();
}

// The parts are the whole: the tier served what was put, in order, and each method targeted in
// the parts what it targets in the whole (then, applying per part, it gave what it gives the whole).
Status UploadAhead::adds_up(const NamedTensors& served) const {
  std::size_t i = 0;
  for (const Part& part : parts_)
    for (const auto& [name, t] : part.put) {
      if (i >= served.size() || served[i].first != name ||
          served[i].second.unsafeGetTensorImpl() != t.unsafeGetTensorImpl())
        return Status(StatusCode::mismatch, "the served tensors are not those the loader put");
      ++i;
    }
  if (i != served.size()) return Status(StatusCode::mismatch, "the served tensors are not those the loader put");
  for (std::size_t m = 0; m < plan_.post_load.size(); ++m) {
    NamedTensors whole;
    std::vector<std::string> in_parts;
    for (const Part& part : parts_) {
      whole.insert(whole.end(), part.given[m].begin(), part.given[m].end());
      in_parts.insert(in_parts.end(), part.targets[m].begin(), part.targets[m].end());
    }
    std::vector<std::string> in_whole = plan_.post_load[m]->targets(whole);
    std::sort(in_parts.begin(), in_parts.end());
    std::sort(in_whole.begin(), in_whole.end());
    if (in_parts != in_whole)
      return Status(StatusCode::mismatch,
                    fmt::format("post-load method {} targets other tensors in the parts than in the whole (a weight "
                                "and its scale in two parts?)",
                                plan_.post_load[m]->name()));
  }
  return Status::ok();
}

Result<Uploaded> UploadAhead::finish(const NamedTensors& served, LoadReport& report) {
  const auto waited = std::chrono::steady_clock::now();
  stop(/*drain=*/true);
  const double tail = std::chrono::duration<double>(std::chrono::steady_clock::now() - waited).count();
  Status st = failed_;
  if (st) st = guarded([&] { return adds_up(served); });
  uploaded_storages_.clear();
  if (!st) {
    parts_.clear();
    report.stages.push_back({"upload while loading", 0, 0, st.to_string()});
    return st.with_context("uploading while loading");
  }
  Uploaded all;
  all.tensors.reserve(served.size());
  for (Part& part : parts_) {
    all.tensors.insert(all.tensors.end(), std::make_move_iterator(part.device.tensors.begin()),
                       std::make_move_iterator(part.device.tensors.end()));
    all.bytes_checked += part.device.bytes_checked;
  }
  parts_.clear();
  // The parts' stages, under the names the whole path gives them, ran while the loader ran; the
  // wait for the last part is what the load added after the loader.
  report.stages.insert(report.stages.end(), stages_.begin(), stages_.end());
  report.stages.push_back({"upload (after the loader)", tail, 0, ""});
  for (const std::string& note : notes_) report.reason += (report.reason.empty() ? "" : "; ") + note;
  return all;
}

}  // namespace snapcache::host_path
