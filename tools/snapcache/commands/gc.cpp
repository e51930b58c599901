// snapcache gc: remove unfinished publications whose writer is gone, removed entries nobody uses,
// files that belong to no entry and entries no load can reach, all older than a grace period.
#include <cerrno>

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

// What to do about an item the system refused to remove, beyond the error itself.
std::string remedy(const Status& error) {
  if (error.sys_errno() == EPERM)
    return "; an immutable or append-only file refuses even root (`lsattr` shows it, `chattr -i -a` clears it)";
  if (error.sys_errno() == EACCES) return "; this user may not write the directory that holds it";
  return "";
}

int run(Context& ctx, const Options& o) {
  const std::int64_t grace = parse_age_arg(o.grace);
  Store& store = ctx.store();
  GarbageOptions options;
  options.dry_run = o.dry_run ? DryRun::yes : DryRun::no;
  options.grace_seconds = grace;
  options.stale = true;
  // The sweep reports nothing until it is done: the line says it is running, and for how long.
  ProgressBar bar(0, ProgressBar::wanted(ctx.options.json));
  bar.set_label(o.dry_run ? "looking for garbage" : "collecting garbage");
  bar.tick_in_background();
  auto collected = collect_garbage(store, options);
  bar.finish();
  if (!collected) throw CliError(kFailure, "cannot collect garbage: " + collected.status().to_string());
  // Removed (or would be), left because a process uses it (a stale entry's lease), and refused.
  std::vector<GarbageItem> removed, in_use, failed;
  for (auto& i : *collected) {
    if (i.error.is_ok()) removed.push_back(std::move(i));
    else if (i.error.code() == StatusCode::busy) in_use.push_back(std::move(i));
    else failed.push_back(std::move(i));
  }
  std::uint64_t freed = 0;
  for (const auto& i : removed) freed += i.bytes;
  // Unfinished publications still there (on a dry run: that would be): in progress, or too young.
  std::vector<EntryInfo> kept;
  for (auto& e : entries_or_fail(store)) {
    if (e.state != EntryState::unfinished) continue;
    auto found = [&](const GarbageItem& i) { return i.path == e.path; };
    if (std::none_of(removed.begin(), removed.end(), found) && std::none_of(failed.begin(), failed.end(), found))
      kept.push_back(std::move(e));
  }
  if (ctx.options.json) {
    json removed_json = json::array();
    for (const auto& i : removed) removed_json.push_back({{"path", i.path}, {"reason", i.reason}, {"bytes", i.bytes}});
    json in_use_json = json::array();
    for (const auto& i : in_use)
      in_use_json.push_back({{"path", i.path}, {"reason", i.reason}, {"bytes", i.bytes}, {"why", i.error.message()}});
    json failed_json = json::array();
    for (const auto& i : failed)
      failed_json.push_back({{"path", i.path},
                             {"reason", i.reason},
                             {"bytes", i.bytes},
                             {"error", i.error.message() + remedy(i.error)}});
    json left = json::array();
    for (const auto& e : kept) left.push_back({{"path", e.path}, {"bytes", e.bytes}, {"mtime_unix_ns", e.last_use_unix_ns}});
    print_json({{"dry_run", o.dry_run},
                {"grace_seconds", grace},
                {"removed", removed_json},
                {"kept_in_use", in_use_json},
                {"kept_unfinished", left},
                {"failed", failed_json},
                {"bytes_freed", freed}});
  } else {
    Table table;
    table.right_align(2);
    for (const auto& i : removed) table.add({o.dry_run ? "would remove" : "removed", i.path, size(i.bytes), i.reason});
    for (const auto& i : in_use) table.add({"kept", i.path, size(i.bytes), i.reason + "; " + i.error.message()});
    for (const auto& e : kept)
      table.add({"kept", e.path, size(e.bytes),
                 fmt::format("unfinished publication in progress or younger than {} (changed {})",
                             format_age(grace), ago(e.last_use_unix_ns))});
    for (const auto& i : failed)
      table.add({"FAILED", i.path, size(i.bytes), i.reason + ": " + i.error.message() + remedy(i.error)});
    table.print();
    say("{} {} {}, {} {}\n", o.dry_run ? "would remove" : "removed", removed.size(),
        removed.size() == 1 ? "item" : "items", o.dry_run ? "would free" : "freed", size(freed));
    if (!failed.empty())
      say("{} {} not be removed: the cache could not be written; they stay and count toward its size\n",
          failed.size(), failed.size() == 1 ? "item could" : "items could");
  }
  // Something left that should have gone is a failure; what a process still uses is not.
  return failed.empty() ? kOk : kFailure;
}

}  // namespace

Command add_gc(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("gc", "Remove unfinished publications, stray files and stale entries older than a grace period");
  auto o = std::make_shared<Options>();
  cmd->add_option("--grace", o->grace, "Leave anything younger than AGE alone (default 1h)")->check(age_validator());
  cmd->add_flag("-n,--dry-run", o->dry_run, "Only say what would be removed");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
