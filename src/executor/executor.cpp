// The load executor: eligibility and key, the plan's tiers in order until one serves, then (for
// host tensors) post-load methods, precision checks and the uploader, then the refresh hooks.
// It knows no tier by name: each answers for itself, and the report keeps every answer.
#include <algorithm>
#include <chrono>
#include <optional>

#include "agreement/group_agreement.h"
#include "host_path/background_release.h"
#include "host_path/host_to_device.h"
#include "host_path/upload_ahead.h"
#include "load_plan/eligibility.h"
#include "load_plan/interruption.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/tier.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/pipeline.h"
#include "snapcache/printable.h"
#include "tiers/background_publication.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The path and its reason follow from the answers: a cache tier that served makes a hit; one that
// had something it could not use, a fallback; one that missed, a miss; nothing but skips,
// ineligible. The reason is the answer that decided.
void decide_path(LoadReport& report, const std::vector<TierAnswer>& passed, const TierAnswer& served) {
  const TierAnswer* first_unusable = nullptr;
  const TierAnswer* last_missed = nullptr;  // the tier nearest the checkpoint knows most
  const TierAnswer* first_skipped = nullptr;
  for (const auto& a : passed) {
    if (a.outcome == TierOutcome::unusable && first_unusable == nullptr) first_unusable = &a;
    if (a.outcome == TierOutcome::missed) last_missed = &a;
    if (a.outcome == TierOutcome::skipped && first_skipped == nullptr) first_skipped = &a;
  }
  const TierAnswer* decisive = nullptr;
  if (served.provenance == Provenance::cache) {
    report.path = LoadPath::hit;
    decisive = &served;
  } else if (first_unusable != nullptr) {
    report.path = LoadPath::fallback;
    decisive = first_unusable;
  } else if (last_missed != nullptr) {
    report.path = LoadPath::miss;
    decisive = last_missed;
  } else {
    report.path = LoadPath::ineligible;
    decisive = first_skipped;
  }
  if (decisive != nullptr) {
    report.reason = decisive->reason;
    report.entry_id = decisive->entry_id;
  }
  for (const auto& a : passed)
    if (report.entry_id.empty()) report.entry_id = a.entry_id;
}

// A load under way: what its tiers see, and the publication a tier kept it with (Tier::keep).
struct Load {
  LoadContext context;
  Publication publication;
  bool publication_needs_served_unchanged = false;  // Kept::publication_needs_tensors_unchanged
  host_path::UploadAhead* ahead = nullptr;  // the upload while a streaming loader runs, if any
};

// Waits for the load's background publication and records its outcome as a blocking one would.
void await_publication(Load& load, const std::string& why) {
  LoadReport& report = load.context.report;
  if (!load.publication.started() || report.publish) return;
  StageTimer stage(report, "publish (wait: " + why + ")");
  const std::string note = tiers::record_publication(report.publish.emplace(load.publication.wait()), stage);
  if (!note.empty()) report.reason += (report.reason.empty() ? "" : "; ") + note;
  load.publication = Publication();
  load.publication_needs_served_unchanged = false;
}

// Waits for the load's background publication only where it reads the served host tensors, which
// are about to change or be handed out; one that writes a copy goes on.
void await_publication_of_served(Load& load, const std::string& why) {
  if (load.publication_needs_served_unchanged) await_publication(load, why);
}

// The uploader the plan names, else the one host_path::default_uploader() would pick for its
// declared size, told the load has started (Uploader::expect): the engine pins its buffers while
// the tiers work.
void expect_upload(const LoadPlan& plan) {
  const std::uint64_t bytes = host_path::declared_bytes(plan.expected);
  const std::shared_ptr<Uploader> uploader =
      plan.uploader ? plan.uploader : host_path::default_uploader(plan.device, bytes);
  try {
    uploader->expect(bytes, plan.device);
  } catch (...) {  // a hint: the upload meets whatever went wrong itself
  }
}

Status check_on_device(const NamedTensors& tensors, c10::Device device) {
  // "cuda" without an index is the current device, as torch reads it: any served index matches.
  for (const auto& [name, t] : tensors)
    if (t.device().type() != device.type() || (device.has_index() && t.device().index() != device.index()))
      return Status(StatusCode::mismatch, fmt::format("tensor '{}' was served on {}, the plan loads onto {}", name,
                                                      t.device().str(), device.str()));
  return Status::ok();
}

// The served answer as the rest of the load reads it: host storages described (where the tier did
// not), and what the load reads from files, as the tier found it, in the report.
Status take_answer(TierAnswer& served, LoadReport& report) {
  report.file_bytes = served.file_bytes;
  report.bytes_from_disk = served.bytes_from_disk;
  if (served.residence != Residence::host || !served.storages.storages.empty() || served.tensors.empty())
    return Status::ok();
  auto described = describe_host_storages(served.tensors);
  if (!described) return described.status().with_context("the served tensors");
  served.storages = std::move(*described);
  return Status::ok();
}

// The first tier that serves, and the answers of those before it (in `passed`, one per tier asked
// before it). In a group every tier is asked on every rank and the first that served on every rank
// is taken; a rank that served from an earlier tier drops that answer (it is kept as skipped, so
// nothing is offered to keep it).
Result<TierAnswer> choose_tier(LoadContext& load, const std::vector<std::shared_ptr<Tier>>& tiers,
                               std::vector<TierAnswer>& passed, agreement::GroupAgreement* agreement) {
  LoadReport& report = load.report;
  for (const auto& tier : tiers) {
    // A tier's errors are in its own words; what it throws gets its name in front. An interrupt
    // is this rank's answer, so a group hears of it in the same exchange.
    Result<TierAnswer> answer = Status(StatusCode::exception, "not asked");
    if (Status interrupted = load_plan::interruption(load.plan, "the " + tier->name() + " tier"); !interrupted) {
      answer = interrupted;
    } else {
      try {
        answer = tier->serve(load);
      } catch (...) {
        answer = status_of_current_exception().with_context(tier->name() + " tier");
      }
    }
    if (agreement == nullptr) {
      if (!answer) return answer.status();
      report.tiers.push_back({tier->name(), answer->outcome, answer->reason});
      if (answer->outcome == TierOutcome::served) return std::move(*answer);
      passed.push_back(std::move(*answer));
      continue;
    }
    auto everyone = agreement->agree_on_tier(tier->name(), answer);
    if (!everyone) return everyone.status();
    report.tiers.push_back({tier->name(), answer->outcome, answer->reason});
    if (*everyone) {
      // The group's decision never stands in for this rank's own answer: taking a tier that did
      // not serve here would hand out what it did not give (a hit with no weights).
      if (answer->outcome != TierOutcome::served)
        return agreement->leave(Status(
            StatusCode::invalid_argument,
            fmt::format("rank group: the group took the {} tier, which {} on this rank ({}); a rank only takes a "
                        "tier that served it",
                        tier->name(), to_string(answer->outcome), answer->reason)));
      return std::move(*answer);
    }
    if (answer->outcome == TierOutcome::served) {
      report.tiers.back().reason += " (not taken: not every rank of the group could serve it)";
      passed.push_back(TierAnswer::skipped("not taken by the group"));
    } else {
      passed.push_back(std::move(*answer));
    }
  }
  if (agreement != nullptr) return agreement->nothing_served();
  std::string why;
  for (const auto& t : report.tiers)
    why += fmt::format("{}{} {}: {}", why.empty() ? "" : "; ", t.tier, to_string(t.outcome), t.reason);
  return Status(StatusCode::not_found, "no tier served the weights: " + why);
}

// The uploaded tensors, handed out once the load may go on to the refresh hooks. Host tensors (a
// CPU load) that a publication still writes could be changed by the caller: it is waited for.
Result<NamedTensors> handed_out(Load& load, const TierAnswer& served, Uploaded device) {
  if (Status st = load_plan::interruption(load.context.plan, "the refresh hooks"); !st) {
    await_publication(load, "the load failed");
    return st;
  }
  if (load.publication.started() && load.publication_needs_served_unchanged) {
    const host_path::ServedStorages served_storages(served.storages);
    if (std::any_of(device.tensors.begin(), device.tensors.end(),
                    [&](const auto& nt) { return served_storages.contains(nt.second); }))
      await_publication(load, "the published host tensors are handed out");
  }
  return std::move(device.tensors);
}

// Offers what the checkpoint gave to each tier that missed or could not use what it had (the
// snapshot tier publishes it), before post-load, which never writes into these storages while they
// are kept. One publication goes out with the load; another tier's is waited for here.
void keep_in_missed_tiers(Load& load, const std::vector<std::shared_ptr<Tier>>& tiers,
                          const std::vector<TierAnswer>& passed, const NamedTensors& tensors) {
  LoadReport& report = load.context.report;
  for (std::size_t i = 0; i < passed.size(); ++i) {
    if (passed[i].outcome != TierOutcome::missed && passed[i].outcome != TierOutcome::unusable) continue;
    Kept kept;
    try {
      kept = tiers[i]->keep(load.context, tensors);
    } catch (...) {
      kept.note = fmt::format("{} tier could not keep the weights: {}", tiers[i]->name(),
                              status_of_current_exception().to_string());
    }
    if (!kept.note.empty()) report.reason += (report.reason.empty() ? "" : "; ") + kept.note;
    if (!kept.publication.started()) continue;
    await_publication(load, "the " + tiers[i]->name() + " tier keeps the weights too");
    load.publication = std::move(kept.publication);
    load.publication_needs_served_unchanged = kept.publication_needs_tensors_unchanged;
  }
}

// The parts a streaming loader's upload took while it ran, when they add up to what the ordinary
// tier served; else nothing (the report says why) and the device memory they took goes back.
std::optional<Uploaded> uploaded_while_loading(Load& load, const TierAnswer& served) {
  if (load.ahead == nullptr) return std::nullopt;
  std::optional<Uploaded> taken;
  if (load.ahead->received() && served.provenance == Provenance::source) {
    auto device = load.ahead->finish(served.tensors, load.context.report);
    if (device) taken = std::move(*device);
    else
      log(LogLevel::info, fmt::format("{} {}: the host path runs on the whole load instead", load.context.plan.component,
                                      device.status().to_string()));
  }
  if (!taken) load.ahead->release();  // device memory the whole path may need
  return taken;
}

// The steps of a load once a tier has served, each handed to the part that owns it.
Result<NamedTensors> use_served(Load& load, const std::vector<std::shared_ptr<Tier>>& tiers,
                                const std::vector<TierAnswer>& passed, TierAnswer& served,
                                std::optional<DerivedBuffers>& derived) {
  const LoadPlan& plan = load.context.plan;
  // 1. Whichever tier served and whatever a group decided, what goes on is what the model declares
  //    (a tier may have checked it itself: TierAnswer::layout_checked).
  if (served.residence == Residence::host && !served.layout_checked)
    if (Status st = check_completeness(served.tensors, plan.expected); !st)
      return st.with_context("the served tensors are not the plan's layout");
  // Stopped here, nothing was kept: no tier publishes what the load will not hand out.
  if (Status st = load_plan::interruption(plan, "post-load"); !st) return st;
  // 2. Prepared on the device by its tier (the donor), derived buffers included: done.
  if (served.residence == Residence::device_prepared) {
    if (Status st = check_on_device(served.tensors, plan.device); !st) return st;
    derived = std::move(served.derived);
    return std::move(served.tensors);
  }
  // 3. Read from the checkpoint: the tiers that could not serve keep it for the next load.
  if (served.provenance == Provenance::source) keep_in_missed_tiers(load, tiers, passed, served.tensors);
  // 4. Uploaded while a streaming loader ran.
  if (auto device = uploaded_while_loading(load, served)) return handed_out(load, served, std::move(*device));
  // 5. The host path: post-load, precision and the upload. A method that may write in place must
  //    not change bytes a publication is still writing.
  for (const auto& method : plan.post_load)
    if (method->properties().writes == PostLoadWrites::may_write_in_place)
      await_publication_of_served(load, "post-load method " + method->name() + " may write in place");
  auto device = host_path::to_device(plan, load.context.report, served);
  if (!device) {
    await_publication(load, "the load failed");
    return device.status();
  }
  return handed_out(load, served, std::move(*device));
}

// A load from the checkpoint holds the loader's host tensors until it returns, and freeing them
// was the caller's wait (the demo's fused QKV at 16 GiB: 227-383 ms on the GPU machine). Once the
// weights are on the device nothing of them is needed (a publication holds its own references), so
// they go on a thread of their own. A hit's host tensors lie in its snapshot, whose lease must go
// when the load returns: they are dropped as the load returns, as are a failed load's. A CPU load
// hands the host tensors themselves out, so dropping them frees nothing.
void let_go_of_loader_output(const LoadPlan& plan, const Result<NamedTensors>& device, Result<TierAnswer>& served,
                             std::unique_ptr<host_path::UploadAhead>& ahead) {
  if (!device || !served || served->provenance != Provenance::source || served->residence != Residence::host ||
      plan.device.is_cpu())
    return;
  // The parts uploaded while the loader ran hold the same storages: both go, or neither would.
  using Held = std::pair<TierAnswer, std::unique_ptr<host_path::UploadAhead>>;
  host_path::release_in_background(std::make_shared<Held>(std::move(*served), std::move(ahead)));
}

// A load that missed and then failed is a failure, not a miss: each tier that missed hears why
// (Tier::load_failed), so what it recorded of the miss says so. What a tier does with it never
// changes the load's error.
void tell_missed_tiers(LoadContext& load, const std::vector<std::shared_ptr<Tier>>& tiers,
                       const std::vector<TierAnswer>& passed, const Status& why) {
  for (std::size_t i = 0; i < passed.size() && i < tiers.size(); ++i) {
    if (passed[i].outcome != TierOutcome::missed) continue;
    try {
      tiers[i]->load_failed(load, why);
    } catch (...) {
    }
  }
}

// How a load ended, for the retry after damage found while staging (see load_weights).
struct LoadEnd {
  bool damaged_here = false;  // this rank's hit failed its checksums while staging
  bool load_again = false;    // load again: this rank's, or in a group any rank's, hit was damaged
  std::string damage_dealt;   // what the tier that served did with its damaged copy (Tier::damaged)
};

// The weights on the plan's device; `report` says how, also when it fails. A publication still
// running in the background is handed over in `publication`.
Result<NamedTensors> load_weights_once(Store* store, const LoadPlan& plan, LoadReport& report,
                                       Publication& publication, std::optional<DerivedBuffers>& derived,
                                       LoadEnd& end) {
  expect_upload(plan);
  load_plan::Eligibility eligible = load_plan::eligibility(store, plan);
  std::optional<Key> key;
  if (eligible) {
    StageTimer stage(report, "key");
    auto k = guarded([&] { return key_for_plan(*store, plan); });
    stage.done();
    if (k) key = std::move(*k);
    else eligible = load_plan::unidentified_checkpoint(k.status());
  }
  report.not_cached = eligible.not_cached;
  Load load{LoadContext{plan, store, key ? &*key : nullptr, eligible.reason, report}, {}};
  std::unique_ptr<host_path::UploadAhead> ahead = host_path::UploadAhead::for_plan(plan);
  load.ahead = ahead.get();
  load.context.ahead = ahead.get();

  std::optional<agreement::GroupAgreement> agreement;
  if (plan.group) agreement.emplace(*plan.group, report, agreement::group_identity(plan, *plan.group));
  const std::vector<std::shared_ptr<Tier>> tiers = plan.tiers.empty() ? default_tiers() : plan.tiers;
  std::vector<TierAnswer> passed;
  auto served = choose_tier(load.context, tiers, passed, agreement ? &*agreement : nullptr);
  // Without a tier every rank agreed on, every rank of a group has the same error: nothing more
  // to agree on.
  if (!served) {
    tell_missed_tiers(load.context, tiers, passed, served.status());
    return served.status();
  }
  Tier& server = *tiers.at(passed.size());  // every tier before it passed
  decide_path(report, passed, *served);
  const Status taken = take_answer(*served, report);
  if (agreement) agreement->decide_path(*served);

  // A group's ranks make the same exchanges whatever happens here: an error goes on to the outcome.
  Result<NamedTensors> device = taken ? use_served(load, tiers, passed, *served, derived) : Result<NamedTensors>(taken);
  if (!device) tell_missed_tiers(load.context, tiers, passed, device.status());
  end.damaged_here = !device && device.status().code() == StatusCode::damaged && report.path == LoadPath::hit;
  end.load_again = end.damaged_here;
  // Nothing was handed out: the tier that served deals with its own damaged copy.
  if (end.damaged_here) {
    try {
      end.damage_dealt = server.damaged(load.context, report.entry_id, device.status());
    } catch (...) {
      end.damage_dealt = "could not be dealt with: " + status_of_current_exception().to_string();
    }
  }
  if (!agreement) {
    publication = load.publication;
    let_go_of_loader_output(plan, device, served, ahead);
    return device;
  }
  // The group reports success once every rank has published what it loaded from the checkpoint.
  await_publication(load, "the group agrees on every rank's publication");
  const Status agreed = agreement->agree_on_outcome(device.status(), end.damaged_here, end.load_again);
  if (!agreed) return agreed;
  let_go_of_loader_output(plan, device, served, ahead);
  return device;
}

// A hit whose bytes fail their checksums while staging (bit rot under unchanged file identities)
// has handed nothing out: the tier that served it has dealt with its copy (the snapshot tier
// quarantines the entry) and the load runs again, which takes the next tier (the checkpoint) and
// rebuilds the entry. In a group every rank loads again, so the group agrees anew; only the rank
// whose entry failed deals with it.
Result<NamedTensors> load_weights(Store* store, const LoadPlan& plan, LoadReport& report, Publication& publication,
                                  std::optional<DerivedBuffers>& derived) {
  LoadEnd end;
  auto weights = load_weights_once(store, plan, report, publication, derived, end);
  // Every rank of a group takes the retry together, whatever its own store.
  if (weights || !end.load_again) return weights;
  const std::string damage = weights.status().message();
  std::string why;
  if (end.damaged_here) {
    why = fmt::format("entry {} failed its checksums while staging ({}){}", report.entry_id.substr(0, 12), damage,
                      end.damage_dealt.empty() ? "" : " and " + end.damage_dealt);
  } else {
    why = fmt::format("loaded again with the group ({})", damage);
  }
  LoadReport again;
  LoadEnd second;
  auto retry = load_weights_once(store, plan, again, publication, derived, second);
  if (retry) again.path = LoadPath::fallback;
  again.reason = fmt::format("{}; {}", why, again.reason);
  again.tiers.insert(again.tiers.begin(), report.tiers.begin(), report.tiers.end());
  again.stages.insert(again.stages.begin(), report.stages.begin(), report.stages.end());
  report = std::move(again);
  return retry;
}

Status run_refresh_hooks(const LoadPlan& plan, LoadedModel& model) {
  StageTimer stage(model.report, "refresh");
  for (const auto& hook : plan.refresh_hooks) {
    Status st = guarded([&] { return hook.refresh(model.weights, model.derived, plan.device); });
    if (!st) return stage.fail(st.with_context("refresh hook " + hook.name));
  }
  stage.done();
  return Status::ok();
}

// Copies a fresh load into the tensors a model already has, so no address changes.
Status copy_in_place(NamedTensors& existing, const NamedTensors& fresh, LoadReport& report) {
  StageTimer stage(report, "copy in place");
  for (auto& [name, target] : existing) {
    auto it = std::find_if(fresh.begin(), fresh.end(), [&](const auto& f) { return f.first == name; });
    if (it == fresh.end())
      return stage.fail(Status(StatusCode::mismatch, fmt::format("reload: tensor '{}' is no longer produced", name)));
    const at::Tensor& source = it->second;
    if (source.sizes() != target.sizes() || source.scalar_type() != target.scalar_type())
      return stage.fail(Status(StatusCode::mismatch, fmt::format("reload: tensor '{}' changed shape or dtype", name)));
    Status st = guarded([&]() -> Status {
      target.copy_(source);
      return Status::ok();
    });
    if (!st) return stage.fail(st.with_context(fmt::format("reload: copying tensor '{}'", name)));
  }
  stage.done();
  return Status::ok();
}

std::string what_is_loaded(const LoadPlan& plan) {
  return fmt::format("load {} (tp {}/{}, pp {}/{})", plan.component, plan.topology.tp_rank, plan.topology.tp_size,
                     plan.topology.pp_rank, plan.topology.pp_size);
}

// A line at a time: a sink prints each message as one line (log_to_stderr escapes a newline), so
// no name inside a reason can start a line of its own.
void log_table(LogLevel level, const LoadReport& report) {
  for (const auto& line : report.table_lines()) log(level, line);
}

void log_load(const LoadPlan& plan, const LoadReport& report) {
  log(report.path == LoadPath::fallback ? LogLevel::warn : LogLevel::info,
      fmt::format("{}: {}", what_is_loaded(plan), report.summary()));
  if (log_level() < LogLevel::debug) return;
  log(LogLevel::debug, "stages:");
  log_table(LogLevel::debug, report);
}

// A load that failed still says how far it got, and how long that took.
Status log_failure(const LoadPlan& plan, LoadReport& report, Clock::time_point started, Status status) {
  report.seconds = seconds_since(started);
  log(LogLevel::warn, fmt::format("{} failed: {}; stages:", what_is_loaded(plan), status.to_string()));
  log_table(LogLevel::warn, report);
  return status;
}

// The declared layout is what every tier's tensors are checked against: a plan without one could
// only run its loader to be refused for each tensor it returns ("not expected"). Refused before
// anything runs, saying how to declare it.
Status check_declares_tensors(const LoadPlan& plan) {
  if (!plan.expected.empty()) return Status::ok();
  return Status(StatusCode::invalid_argument,
                fmt::format("the plan for component '{}' declares no tensors (LoadPlan::expected is empty): declare the "
                            "layout its loader produces before loading it, from the tensors (expected_layout_of(tensors); "
                            "in Python snapcache.expected_layout_of(tensors)) or from the module they go into "
                            "(snapcache.module_layout(module), or snapcache.load_module, which does it)",
                            printable(plan.component)));
}

}  // namespace

Result<LoadedModel> load_model(Store* store, const LoadPlan& plan) {
  return guarded([&]() -> Result<LoadedModel> {
    SNAPCACHE_RETURN_IF_ERROR(check_declares_tensors(plan));
    const auto started = Clock::now();
    LoadedModel model;
    std::optional<DerivedBuffers> derived;
    auto weights = load_weights(store, plan, model.report, model.publication, derived);
    if (!weights) return log_failure(plan, model.report, started, weights.status());
    model.weights = std::move(*weights);
    if (derived) model.derived = std::move(*derived);  // built where the weights were prepared
    else if (Status st = run_refresh_hooks(plan, model); !st) return log_failure(plan, model.report, started, st);
    model.report.seconds = seconds_since(started);
    log_load(plan, model.report);
    return model;
  });
}

Result<LoadReport> reload_model(Store* store, const LoadPlan& plan, LoadedModel& model) {
  return guarded([&]() -> Result<LoadReport> {
    SNAPCACHE_RETURN_IF_ERROR(check_declares_tensors(plan));
    const auto started = Clock::now();
    LoadReport report;
    Publication publication;  // the registry keeps it; the process waits for it at exit
    std::optional<DerivedBuffers> served_derived;  // the model's own buffers are refreshed below
    auto weights = load_weights(store, plan, report, publication, served_derived);
    if (!weights) return log_failure(plan, report, started, weights.status());
    if (Status st = copy_in_place(model.weights, *weights, report); !st) return log_failure(plan, report, started, st);
    model.report = std::move(report);
    if (Status st = run_refresh_hooks(plan, model); !st) return log_failure(plan, model.report, started, st);
    model.report.seconds = seconds_since(started);
    log_load(plan, model.report);
    return model.report;
  });
}

}  // namespace snapcache
