// Loading: load_model and reload_model (the GIL is released for the whole load, so other Python
// threads run while the library reads, checks and uploads; callbacks take it back), the loaded
// model, its report and its background publication.
#include "snapcache/extend/store_access.h"
#include "snapcache/pipeline.h"
#include "snapcache/text.h"
#include "tensors.h"

namespace snapcache::python {
namespace {

// The plan as the library gets it from Python: with the check that stops it between stages when
// an interrupt is pending or a signal handler raises one (GIL held).
LoadPlan interruptible(const LoadPlan& plan) {
  LoadPlan out = plan;
  out.interrupt_check = [main = on_main_thread()] { return check_interrupt(main); };
  return out;
}

std::string report_repr(const LoadReport& r) {
  return std::string("LoadReport(") + to_string(r.path) + ", " + py::repr(py::str(r.reason)).cast<std::string>() +
         ", " + format_duration(r.seconds) + ")";
}

void bind_report(py::module_& m) {
  py::native_enum<LoadPath>(m, "LoadPath", "enum.Enum", "Which path a load took.")
      .value("hit", LoadPath::hit, "warm: a cache tier (the disk snapshot, a GPU donor) served the weights")
      .value("miss", LoadPath::miss, "cold: no cache tier had them; the ordinary loader ran, the result was kept")
      .value("fallback", LoadPath::fallback, "cold: a cache tier had them but could not use them")
      .value("ineligible", LoadPath::ineligible, "cold: this load must not be cached")
      .finalize();
  py::native_enum<NotCached>(m, "NotCached", "enum.Enum", "Why a load was not cached (LoadReport.not_cached).")
      .value("no_store", NotCached::no_store, "no cache store is configured")
      .value("disabled", NotCached::disabled, "the cache is switched off by configuration")
      .value("opted_out", NotCached::opted_out, "the plan says not to (LoadPlan.no_cache_reason)")
      .value("no_checkpoint_identity", NotCached::no_checkpoint_identity,
             "no checkpoint files and no weights identity: the key names no weights")
      .value("no_loader_identity", NotCached::no_loader_identity, "no source identity: the key names no loader")
      .value("unidentified_checkpoint", NotCached::unidentified_checkpoint,
             "the checkpoint's files could not be described")
      .finalize();
  py::native_enum<TierOutcome>(m, "TierOutcome", "enum.Enum", "What one tier answered.")
      .value("served", TierOutcome::served)
      .value("missed", TierOutcome::missed)
      .value("unusable", TierOutcome::unusable)
      .value("skipped", TierOutcome::skipped)
      .finalize();

  py::class_<TierAttempt>(m, "TierAttempt", "One tier tried, and its answer in its own words.")
      .def_readonly("tier", &TierAttempt::tier)
      .def_readonly("outcome", &TierAttempt::outcome)
      .def_readonly("reason", &TierAttempt::reason)
      .def("__repr__", [](const TierAttempt& t) {
        return "TierAttempt(" + t.tier + ": " + to_string(t.outcome) + ", " +
               py::repr(py::str(t.reason)).cast<std::string>() + ")";
      });
  py::class_<StageTime>(m, "StageTime", "One stage of a load: time, bytes, and its error if it failed.")
      .def_readonly("stage", &StageTime::stage)
      .def_readonly("seconds", &StageTime::seconds)
      .def_readonly("bytes", &StageTime::bytes)
      .def_readonly("error", &StageTime::error, "'' when the stage finished.")
      .def("__repr__", [](const StageTime& s) {
        return "StageTime(" + s.stage + ", " + format_duration(s.seconds) + (s.error.empty() ? "" : ", " + s.error) + ")";
      });
  py::class_<PublicationReport>(m, "PublicationReport",
                                "What a load's publication did: the entry in the cache (published now or already "
                                "present), skipped or failed, and why.")
      .def_property_readonly(
          "result",
          [](const PublicationReport& p) {
            if (p.status) return p.written ? PublishResult::published : PublishResult::already_present;
            return p.skipped ? PublishResult::skipped : PublishResult::failed;
          },
          "published, already_present, skipped or failed (a PublishResult).")
      .def_property_readonly(
          "ok", [](const PublicationReport& p) { return p.status.is_ok(); }, "Published now or already present.")
      .def_property_readonly(
          "code", [](const PublicationReport& p) { return std::string(to_string(p.status.code())); },
          "The Status code behind a skip or failure ('no_space', ...); 'ok' when in the cache.")
      .def_property_readonly(
          "reason", [](const PublicationReport& p) { return p.status.message(); }, "Why not published; ''.")
      .def_readonly("written", &PublicationReport::written, "This publication wrote the entry.")
      .def_readonly("skipped", &PublicationReport::skipped, "Not published, and not a failure.")
      .def_readonly("entry_id", &PublicationReport::entry_id)
      .def_readonly("bytes", &PublicationReport::bytes)
      .def_readonly("seconds", &PublicationReport::seconds)
      .def_readonly("evicted", &PublicationReport::evicted, "Ids of the entries removed to make room.")
      .def_readonly("evictions", &PublicationReport::evictions, "What made room, in words; '' when nothing did.")
      .def("__repr__", [](const PublicationReport& p) {
        return std::string("PublicationReport(") + p.outcome() +
               (p.status ? "" : ", " + py::repr(py::str(p.status.to_string())).cast<std::string>()) + ")";
      });
  py::class_<LoadReport>(m, "LoadReport",
                         "What a load did: path and reason, every tier tried, every stage, the publication.")
      .def_readonly("path", &LoadReport::path)
      .def_readonly("reason", &LoadReport::reason, "Why this path: the answer of the tier that decided it.")
      .def_readonly("not_cached", &LoadReport::not_cached,
                    "Why the load could not be cached (a NotCached), or None when it could.")
      .def_readonly("notes", &LoadReport::notes,
                    "What the load assumed on the caller's behalf (a default source_identity, ...).")
      .def_readonly("entry_id", &LoadReport::entry_id)
      .def_readonly("tiers", &LoadReport::tiers)
      .def_readonly("stages", &LoadReport::stages)
      .def_readonly("publish", &LoadReport::publish,
                    "The publication's outcome when the load waited for it (a CPU load); else None: see "
                    "LoadedModel.publication.")
      .def_readonly("group", &LoadReport::group, "What the group agreed (a GroupReport), for a plan with a group.")
      .def_readonly("bytes_checked", &LoadReport::bytes_checked)
      .def_readonly("bytes_trusted", &LoadReport::bytes_trusted)
      .def_readonly("file_bytes", &LoadReport::file_bytes,
                    "The bytes of the files the load read its weights from: on a hit the entry's data files, "
                    "from the checkpoint its checkpoint_files.")
      .def_readonly("bytes_from_disk", &LoadReport::bytes_from_disk,
                    "Of file_bytes, those not in the page cache when the load began to read them (sampled; on a "
                    "hit when the tier served them, from the checkpoint when the loader started): read from the "
                    "disk.")
      .def_readonly("seconds", &LoadReport::seconds)
      .def("integrity", &LoadReport::integrity, "bytes_checked and bytes_trusted in words.")
      .def("page_cache", &LoadReport::page_cache,
           "bytes_from_disk in words, with the time of the stages that read it (and, on a hit, the rate); '' "
           "when none.")
      .def("summary", &LoadReport::summary, "The load's log line.")
      .def("table", &LoadReport::table, "Stages, times and bytes, one per line.")
      .def("__str__", &LoadReport::summary)
      .def("__repr__", &report_repr);

  py::class_<Publication>(m, "Publication", "A cold load's publication, perhaps still running in the background.")
      .def_property_readonly("started", &Publication::started)
      .def_property_readonly("pending", &Publication::pending, "Started and not finished.")
      .def("wait", &Publication::wait, py::call_guard<py::gil_scoped_release>(),
           "Blocks (without the GIL) until it finished; its outcome (`skipped` when none was started).");
  m.def("wait_for_publications", &wait_for_publications, py::call_guard<py::gil_scoped_release>(),
        "Blocks until every background publication of this process has finished, and the host tensors of "
        "loads from the checkpoint, freed in the background, are freed (the package does this at exit).");
}

void bind_loading(py::module_& m) {
  py::class_<LoadedModel>(m, "LoadedModel", "The weights on the plan's device, derived buffers, report, publication.")
      .def_property_readonly("weights", [](const LoadedModel& l) { return to_dict(l.weights); },
                             "{name: tensor} on plan.device, after post-load (the same tensors, no copy).")
      .def_property_readonly("derived", [](const LoadedModel& l) { return to_dict(l.derived); },
                             "{name: tensor}: the buffers the refresh hooks built.")
      .def_readonly("report", &LoadedModel::report)
      .def_readonly("publication", &LoadedModel::publication)
      .def("__repr__", [](const LoadedModel& l) {
        return "LoadedModel(" + std::to_string(l.weights.size()) + " tensors, " + report_repr(l.report) + ")";
      });

  m.def(
      "load_model",
      [](Store* store, const LoadPlan& given) {
        CallbackScope scope;
        std::string note;
        const LoadPlan with_check = interruptible(with_default_source_identity(given, note));
        Result<LoadedModel> model = Status();
        {
          py::gil_scoped_release release;
          model = load_model(store, with_check);
        }
        raise_if_interrupted();  // also after a load that succeeded: the log sink's Ctrl-C
        if (model && !note.empty()) model->report.notes.push_back(note);
        return unwrap(std::move(model));
      },
      py::arg("store"), py::arg("plan"),
      "The C++ load_model: `store` None makes the load ineligible. snapcache.load_model(plan) opens the "
      "environment's store for you.");
  m.def(
      "reload_model",
      [](Store* store, const LoadPlan& given, LoadedModel& model) {
        CallbackScope scope;
        std::string note;
        const LoadPlan with_check = interruptible(with_default_source_identity(given, note));
        Result<LoadReport> report = Status();
        {
          py::gil_scoped_release release;
          report = reload_model(store, with_check, model);
        }
        raise_if_interrupted();
        if (report && !note.empty()) report->notes.push_back(note);
        return unwrap(std::move(report));
      },
      py::arg("store"), py::arg("plan"), py::arg("model"),
      "Loads again and copies into model's existing tensors in place, then runs the refresh hooks.");
}

}  // namespace

void bind_load(py::module_& m) {
  bind_report(m);
  bind_loading(m);
}

}  // namespace snapcache::python
