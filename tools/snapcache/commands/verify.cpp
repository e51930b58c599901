// snapcache verify: rehash entries, name every damaged chunk and the tensors in it; --repair
// removes damaged entries.
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands/commands.h"
#include "progress.h"
#include "render.h"

namespace snapcache::cli {
namespace {

struct Options {
  std::vector<std::string> ids;
  bool all = false;
  bool repair = false;
  bool no_progress = false;
};

std::string chunk_text(const DamagedChunk& d) {
  return fmt::format("{} chunk {} (bytes {}..{}): {}", d.file, d.chunk, d.offset, d.offset + d.size,
                     d.tensors.empty() ? "padding only" : "tensors " + fmt::format("{}", fmt::join(d.tensors, ", ")));
}

int run(Context& ctx, const Options& o) {
  Store& store = ctx.store();
  std::vector<EntryInfo> targets;
  if (o.ids.empty()) {
    targets = published_entries(store);
  } else {
    for (const auto& text : o.ids) {
      auto info = entry_info(store, resolve_entry(store, text));
      if (!info) throw CliError(kFailure, info.status().message());
      targets.push_back(std::move(*info));
    }
  }
  std::uint64_t total = 0;
  for (const auto& e : targets) total += e.manifest ? e.manifest->data_bytes() : 0;

  const bool text = !ctx.options.json;
  // Lines come as entries are checked, between progress bars, aligned as one table: every
  // component's width is known before the first.
  Table lines;
  for (const auto& e : targets) lines.reserve({"DAMAGED", e.id.substr(0, 12), e.manifest ? e.manifest->key.component : "-"});
  ProgressBar bar(total, !o.no_progress && ProgressBar::wanted(!text));
  const auto started = std::chrono::steady_clock::now();
  json results = json::array();
  std::size_t damaged = 0, errors = 0, repaired = 0;
  std::uint64_t hashed = 0;
  VerifiedFiles verified;  // a file entries share is hashed once
  for (const auto& e : targets) {
    bar.set_label(e.id.substr(0, 12));
    VerifyReport report = verify_entry(store, e.id, [&bar](std::uint64_t bytes) { bar.add(bytes); }, verified);
    hashed += report.bytes_hashed;
    const bool bad = !report.status && is_entry_damage(report.status.code());
    // Gone or busy: evicted, replaced or being published while verify looked. That is not
    // damage (and --repair must leave it alone), nor a failure to read the cache.
    const bool gone = !report.status && report.status.code() == StatusCode::not_found;
    const bool skipped = !report.status && report.status.code() == StatusCode::busy;
    std::string outcome = report.status ? "ok" : bad ? "damaged" : gone ? "gone" : skipped ? "skipped" : "error";
    bool removed = false;
    std::string repair_error;
    if (bad) {
      ++damaged;
      if (o.repair) {
        Status st = quarantine(store, e.id, report.status.message());
        removed = st.is_ok();
        if (removed) ++repaired;
        else repair_error = st.message();
      }
    } else if (!report.status && !gone && !skipped) {
      ++errors;
    }
    bar.clear();
    if (!text) {
      json chunks = json::array();
      for (const auto& d : report.damaged_chunks)
        chunks.push_back({{"file", d.file}, {"chunk", d.chunk}, {"offset", d.offset}, {"size", d.size},
                          {"tensors", d.tensors}});
      results.push_back({{"id", e.id},
                         {"component", e.manifest ? json(e.manifest->key.component) : json(nullptr)},
                         {"status", outcome},
                         {"reason", report.status ? "" : report.status.message()},
                         {"bytes_hashed", report.bytes_hashed},
                         {"bytes_proven_before", report.bytes_proven_before},
                         {"damaged_chunks", chunks},
                         {"removed", removed}});
      continue;
    }
    std::string what = e.manifest ? e.manifest->key.component : "-";
    if (report.status) {
      lines.print_row({"ok", e.id.substr(0, 12), what,
                       report.bytes_proven_before
                           ? fmt::format("{} (and {} shared with an entry above)", size(report.bytes_hashed),
                                         size(report.bytes_proven_before))
                           : size(report.bytes_hashed)});
      continue;
    }
    lines.print_row({bad ? "DAMAGED" : gone ? "gone" : skipped ? "skipped" : "ERROR", e.id.substr(0, 12), what,
                     report.damaged_chunks.empty() ? report.status.message() : ""});
    for (const auto& d : report.damaged_chunks) say("         {}\n", chunk_text(d));
    if (removed) say("         removed (--repair)\n");
    if (!repair_error.empty()) say("         could not remove it: {}\n", repair_error);
  }
  bar.clear();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!text) {
    print_json({{"entries", results},
                {"checked", targets.size()},
                {"damaged", damaged},
                {"errors", errors},
                {"removed", repaired},
                {"bytes_hashed", hashed},
                {"seconds", seconds}});
  } else {
    const auto rate = seconds > 0 ? static_cast<std::uint64_t>(static_cast<double>(hashed) / seconds) : 0;
    say("{} {} verified: {} damaged{}{}; {} hashed in {:.2f} s ({}/s)\n", targets.size(),
        targets.size() == 1 ? "entry" : "entries", damaged,
        o.repair ? fmt::format(" ({} removed)", repaired) : "",
        errors ? fmt::format(", {} could not be read", errors) : "", size(hashed), seconds, size(rate));
    if (damaged && !o.repair) say("run `snapcache verify --repair` to remove damaged entries\n");
  }
  if (damaged) return kDamaged;
  return errors ? kFailure : kOk;
}

}  // namespace

Command add_verify(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("verify", "Rehash entries' data and name every damaged chunk and its tensors");
  auto o = std::make_shared<Options>();
  auto* ids = cmd->add_option("ids", o->ids, "Entry ids or unique prefixes (default: every entry)");
  cmd->add_flag("--all", o->all, "Verify every entry (the default when no id is given)")->excludes(ids);
  cmd->add_flag("--repair", o->repair, "Remove damaged entries (leased ones leave at once; their space when unused)");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar, even on a terminal");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
