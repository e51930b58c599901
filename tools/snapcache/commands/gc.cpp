// snapcache gc: remove unfinished publications whose writer is gone, removed entries nobody uses,
// and files that belong to no entry, all older than a grace period.
#include <algorithm>

#include <fmt/format.h>
#include "snapcache/text.h"

#include "commands/commands.h"
#include "progress.h"
#include "render.h"

namespace snapcache::cli {
namespace {

struct Options {
  std::string grace = "1h";
  bool dry_run = false;
};

int run(Context& ctx, const Options& o) {
  const std::int64_t grace = parse_age_arg(o.grace);
  Store& store = ctx.store();
  GarbageOptions options;
  options.dry_run = o.dry_run ? DryRun::yes : DryRun::no;
  options.grace_seconds = grace;
  // The sweep reports nothing until it is done: the line says it is running, and for how long.
  ProgressBar bar(0, ProgressBar::wanted(ctx.options.json));
  bar.set_label(o.dry_run ? "looking for garbage" : "collecting garbage");
  bar.tick_in_background();
  auto collected = collect_garbage(store, options);
  bar.finish();
  if (!collected) throw CliError(kFailure, "cannot collect garbage: " + collected.status().to_string());
  const std::vector<GarbageItem>& items = *collected;
  std::uint64_t freed = 0;
  for (const auto& i : items) freed += i.bytes;
  // Unfinished publications still there (on a dry run: that would be): in progress, or too young.
  std::vector<EntryInfo> kept;
  for (auto& e : entries_or_fail(store)) {
    if (e.state != EntryState::unfinished) continue;
    bool taken = std::any_of(items.begin(), items.end(), [&](const GarbageItem& i) { return i.path == e.path; });
    if (!taken) kept.push_back(std::move(e));
  }
  if (ctx.options.json) {
    json removed = json::array();
    for (const auto& i : items) removed.push_back({{"path", i.path}, {"reason", i.reason}, {"bytes", i.bytes}});
    json left = json::array();
    for (const auto& e : kept) left.push_back({{"path", e.path}, {"bytes", e.bytes}, {"mtime_unix_ns", e.last_use_unix_ns}});
    print_json({{"dry_run", o.dry_run},
                {"grace_seconds", grace},
                {"removed", removed},
                {"kept_unfinished", left},
                {"bytes_freed", freed}});
    return kOk;
  }
  Table table;
  table.right_align(2);
  for (const auto& i : items) table.add({o.dry_run ? "would remove" : "removed", i.path, size(i.bytes), i.reason});
  for (const auto& e : kept)
    table.add({"kept", e.path, size(e.bytes),
               fmt::format("unfinished publication in progress or younger than {} (changed {})",
                           format_age(grace), ago(e.last_use_unix_ns))});
  table.print();
  say("{} {} {}, {} {}\n", o.dry_run ? "would remove" : "removed", items.size(),
      items.size() == 1 ? "item" : "items", o.dry_run ? "would free" : "freed", size(freed));
  return kOk;
}

}  // namespace

Command add_gc(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("gc", "Remove unfinished publications and stray files older than a grace period");
  auto o = std::make_shared<Options>();
  cmd->add_option("--grace", o->grace, "Leave anything younger than AGE alone (default 1h)")->check(age_validator());
  cmd->add_flag("-n,--dry-run", o->dry_run, "Only say what would be removed");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
