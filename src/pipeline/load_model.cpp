// The pipeline: key and eligibility, warm or cold tensors, post-load, precision, upload, refresh.
#include <chrono>
#include <set>
#include <unordered_set>

#include "pipeline/named.h"
#include "snapcache/log.h"
#include "snapcache/pipeline.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

using Clock = std::chrono::steady_clock;

// Times one stage into the report.
class StageTimer {
 public:
  StageTimer(LoadReport& report, std::string stage) : report_(report), stage_(std::move(stage)), t0_(Clock::now()) {}
  void done(std::uint64_t bytes = 0) {
    report_.stages.push_back({stage_, std::chrono::duration<double>(Clock::now() - t0_).count(), bytes});
  }

 private:
  LoadReport& report_;
  std::string stage_;
  Clock::time_point t0_;
};

std::uint64_t storage_bytes(const NamedTensors& tensors) {
  std::unordered_set<const c10::StorageImpl*> seen;
  std::uint64_t total = 0;
  for (const auto& [_, t] : tensors)
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) total += t.storage().nbytes();
  return total;
}

struct Weights {
  NamedTensors tensors;  // on the device
  LoadReport report;
};

Result<Weights> load_weights(Store* store, const LoadPlan& plan) {
  const auto started = Clock::now();
  Weights w;
  LoadReport& report = w.report;
  if (!plan.ordinary_loader) return Status(StatusCode::invalid_argument, "the load plan has no ordinary loader");

  // 1. Eligibility and key.
  std::string ineligible;
  if (store == nullptr) ineligible = "no cache store is configured";
  else if (!store->config().enabled()) ineligible = "the cache is disabled by configuration";
  else if (plan.cache == CachePolicy::opt_out) ineligible = "the caller opted out of caching";
  else if (!plan.ineligible_reason.empty()) ineligible = plan.ineligible_reason;
  std::optional<Key> key;
  if (ineligible.empty()) {
    StageTimer t(report, "key");
    auto k = key_for_plan(*store, plan);
    t.done();
    if (k) key = std::move(*k);
    else ineligible = "the checkpoint cannot be identified: " + k.status().message();
  }

  // 2. Warm, or cold with completeness check and publication.
  NamedTensors cpu;
  bool warm = false;
  if (!ineligible.empty()) {
    report.path = LoadPath::ineligible;
    report.reason = ineligible;
  } else {
    StageTimer t(report, "lookup");
    auto loaded = load_tensors(*store, *key, &plan.expected, VerifyPolicy::trust_identity, LoadLog::quiet);
    report.entry_id = loaded.lookup.entry_id;
    report.reason = loaded.lookup.reason;
    switch (loaded.lookup.result) {
      case LookupResult::hit:
        report.path = LoadPath::hit;
        cpu = std::move(loaded.tensors);
        warm = true;
        break;
      case LookupResult::miss: report.path = LoadPath::miss; break;
      case LookupResult::damaged:
      case LookupResult::fallback: report.path = LoadPath::fallback; break;
      case LookupResult::disabled: report.path = LoadPath::ineligible; break;
    }
    t.done(warm ? storage_bytes(cpu) : 0);
  }
  if (!warm) {
    StageTimer t(report, "ordinary load");
    auto tensors = plan.ordinary_loader(plan);
    if (!tensors) return tensors.status().with_context("ordinary loader");
    cpu = std::move(*tensors);
    t.done(storage_bytes(cpu));
    StageTimer c(report, "completeness");
    if (Status st = check_completeness(cpu, plan.expected); !st) return st.with_context("ordinary loader output");
    c.done();
    if (report.path != LoadPath::ineligible) {
      StageTimer p(report, "publish");
      report.publish = publish_tensors(*store, *key, cpu);
      p.done(report.publish->result == PublishResult::published ? report.publish->bytes : 0);
      if (report.publish->result == PublishResult::failed || report.publish->result == PublishResult::skipped)
        report.reason += "; not published: " + report.publish->status.to_string();
    }
  }

  // 3. Post-load methods and precision checks, the same on both paths.
  {
    StageTimer t(report, "post-load");
    for (const auto& method : plan.post_load)
      if (Status st = method->apply(cpu); !st) return st.with_context("post-load method " + method->name());
    t.done();
  }
  if (!plan.precision.rules.empty()) {
    StageTimer t(report, "precision");
    if (Status st = validate_precision(cpu, plan.precision); !st) return st;
    t.done();
  }

  // 4. Upload.
  {
    StageTimer t(report, "upload");
    auto device = upload_tensors(cpu, plan.device);
    if (!device) return device.status();
    w.tensors = std::move(*device);
    t.done(plan.device.is_cpu() ? 0 : storage_bytes(cpu));
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return w;
}

Status run_refresh_hooks(const LoadPlan& plan, LoadedModel& model) {
  StageTimer t(model.report, "refresh");
  for (const auto& hook : plan.refresh_hooks)
    if (Status st = hook.refresh(model.weights, model.derived, plan.device); !st)
      return st.with_context("refresh hook " + hook.name);
  t.done();
  return Status::ok();
}

void log_load(const LoadPlan& plan, const LoadReport& report) {
  log(report.path == LoadPath::fallback ? LogLevel::warn : LogLevel::info,
      fmt::format("load {} (tp {}/{}, pp {}/{}): {}", plan.component, plan.topology.tp_rank, plan.topology.tp_size,
                  plan.topology.pp_rank, plan.topology.pp_size, report.summary()));
  log(LogLevel::debug, "stages:\n" + report.table());
}

}  // namespace

Result<Key> key_for_plan(Store& store, const LoadPlan& plan) {
  auto files = describe_checkpoint(store.fs(), plan.checkpoint_files);
  if (!files) return files.status();
  if (plan.hash_checkpoint_contents) {
    DigestMemo memo = store.digest_memo();
    SNAPCACHE_RETURN_IF_ERROR(memo.fill_digests(*files));
  }
  Key key;
  key.checkpoint = std::move(*files);
  key.source_identity = plan.source_identity;
  key.torch = current_torch_identity();
  key.dtype = plan.dtype;
  key.precision_policy = plan.precision.name;
  key.topology = plan.topology;
  key.component = plan.component;
  key.options = plan.options;
  return key;
}

Status check_completeness(const NamedTensors& tensors, const ExpectedLayout& expected) {
  std::set<std::string_view> declared;
  for (const auto& e : expected) declared.insert(e.name);
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    if (!seen.insert(name).second) return Status(StatusCode::mismatch, fmt::format("tensor '{}' appears twice", name));
    if (!declared.count(name))
      return Status(StatusCode::mismatch, fmt::format("tensor '{}' is not declared by the model", name));
  }
  for (const auto& e : expected) {
    const at::Tensor* t = nullptr;
    for (const auto& [name, tensor] : tensors)
      if (name == e.name) t = &tensor;
    if (t == nullptr) return Status(StatusCode::mismatch, fmt::format("tensor '{}' is missing", e.name));
    auto dtype = to_dtype(t->scalar_type());
    if (!dtype || *dtype != e.dtype)
      return Status(StatusCode::mismatch, fmt::format("tensor '{}': dtype {} but the model declares {}", e.name,
                                                      c10::toString(t->scalar_type()), dtype_name(e.dtype)));
    if (t->sizes().vec() != e.sizes)
      return Status(StatusCode::mismatch, fmt::format("tensor '{}': shape {} but the model declares {}", e.name,
                                                      pipeline::shape_string(t->sizes()), pipeline::shape_string(e.sizes)));
    if (e.strides && t->strides().vec() != *e.strides)
      return Status(StatusCode::mismatch, fmt::format("tensor '{}': strides {} but the model declares {}", e.name,
                                                      pipeline::shape_string(t->strides()),
                                                      pipeline::shape_string(*e.strides)));
  }
  return Status::ok();
}

Result<LoadedModel> load_model(Store* store, const LoadPlan& plan) {
  auto w = load_weights(store, plan);
  if (!w) return w.status();
  LoadedModel model;
  model.weights = std::move(w->tensors);
  model.report = std::move(w->report);
  const auto t0 = Clock::now();
  SNAPCACHE_RETURN_IF_ERROR(run_refresh_hooks(plan, model));
  model.report.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  log_load(plan, model.report);
  return model;
}

Result<LoadReport> reload_model(Store* store, const LoadPlan& plan, LoadedModel& model) {
  auto w = load_weights(store, plan);
  if (!w) return w.status();
  const auto t0 = Clock::now();
  {
    StageTimer t(w->report, "copy in place");
    for (auto& [name, existing] : model.weights) {
      at::Tensor* fresh = pipeline::find(w->tensors, name);
      if (fresh == nullptr)
        return Status(StatusCode::mismatch, fmt::format("reload: tensor '{}' is no longer produced", name));
      if (fresh->sizes() != existing.sizes() || fresh->scalar_type() != existing.scalar_type())
        return Status(StatusCode::mismatch, fmt::format("reload: tensor '{}' changed shape or dtype", name));
      existing.copy_(*fresh);
    }
    t.done();
  }
  model.report = std::move(w->report);
  SNAPCACHE_RETURN_IF_ERROR(run_refresh_hooks(plan, model));
  model.report.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  log_load(plan, model.report);
  return model.report;
}

}  // namespace snapcache
