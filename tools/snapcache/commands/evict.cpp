// snapcache evict: remove chosen entries, all, those unused for a while, or least recently used
// ones down to a size. Never a leased entry: those are reported as skipped, with who holds them.
#include <map>

#include <fmt/format.h>

#include "commands/commands.h"
#include "render.h"

namespace snapcache::cli {
namespace {

struct Options {
  std::vector<std::string> ids;
  bool all = false;
  std::string older_than;
  std::string to_size;
  bool stale = false;
  bool dry_run = false;
};

int run(Context& ctx, const Options& o) {
  if (o.ids.empty() && !o.all && o.older_than.empty() && o.to_size.empty() && !o.stale)
    throw CliError(kUsage, "say what to evict: entry ids, --all, --stale, --older-than AGE or --to-size SIZE");
  Store& store = ctx.store();
  EvictRequest request;
  for (const auto& text : o.ids) request.ids.push_back(resolve_entry(store, text));
  request.all = o.all;
  request.stale = o.stale;
  if (!o.older_than.empty()) request.unused_for_seconds = parse_age_arg(o.older_than);
  if (!o.to_size.empty()) request.to_size = parse_size_arg(o.to_size);
  request.dry_run = o.dry_run ? DryRun::yes : DryRun::no;

  // What each entry is, for the report; read before any of them goes.
  std::map<std::string, EntryInfo> known;
  if (o.all || !o.older_than.empty() || !o.to_size.empty() || o.stale) {
    for (auto& e : published_entries(store)) known.emplace(e.id, std::move(e));
  } else {  // the chosen ones alone (see evict())
    for (const auto& id : request.ids)
      if (auto e = entry_info(store, id)) known.emplace(id, std::move(*e));
  }
  auto outcome = evict(store, request);
  if (!outcome) throw CliError(kFailure, outcome.status().message());
  const EvictOutcome& out = *outcome;

  if (ctx.options.json) {
    json evicted = json::array();
    for (std::size_t i = 0; i < out.evicted.size(); ++i) {
      auto it = known.find(out.evicted[i]);
      evicted.push_back({{"id", out.evicted[i]},
                         {"bytes", out.evicted_bytes[i]},
                         {"component", it != known.end() && it->second.manifest
                                           ? json(it->second.manifest->key.component)
                                           : json(nullptr)},
                         {"last_use_unix_ns", it != known.end() ? it->second.last_use_unix_ns : 0}});
    }
    json skipped = json::array();
    for (const auto& [id, why] : out.skipped) {
      auto it = known.find(id);
      skipped.push_back({{"id", id},
                         {"reason", why},
                         {"lease_holders", holders_json(it != known.end() ? it->second.lease_holders
                                                                          : std::vector<int>{})}});
    }
    json failed = json::array();
    for (const auto& [id, why] : out.failed) failed.push_back({{"id", id}, {"reason", why.message()}});
    print_json({{"dry_run", o.dry_run},
                {"evicted", evicted},
                {"skipped", skipped},
                {"failed", failed},
                {"bytes_freed", out.bytes_freed},
                {"bytes_before", out.bytes_before},
                {"bytes_after", out.bytes_after}});
  } else {
    Table table;
    table.right_align(3);
    for (std::size_t i = 0; i < out.evicted.size(); ++i) {
      auto it = known.find(out.evicted[i]);
      std::string component = it != known.end() && it->second.manifest ? it->second.manifest->key.component : "-";
      table.add({o.dry_run ? "would evict" : "evicted", out.evicted[i].substr(0, 12), component,
                 size(out.evicted_bytes[i]),
                 it != known.end() ? "last used " + ago(it->second.last_use_unix_ns) : ""});
    }
    table.print();
    for (const auto& [id, why] : out.skipped) say("skipped  {}  {}\n", id.substr(0, 12), why);
    for (const auto& [id, why] : out.failed) say("FAILED   {}  {}\n", id.substr(0, 12), why.message());
    say("{} {} ({}); the cache {} {} (was {})\n", o.dry_run ? "would free" : "freed", size(out.bytes_freed),
        fmt::format("{} {}", out.evicted.size(), out.evicted.size() == 1 ? "entry" : "entries"),
        o.dry_run ? "would hold" : "holds", size(out.bytes_after), size(out.bytes_before));
    if (!out.skipped.empty())
      say("{} {} skipped: entries in use are never evicted\n", out.skipped.size(),
          out.skipped.size() == 1 ? "entry was" : "entries were");
    if (!out.failed.empty())
      say("{} {} not be removed: the cache could not be written\n", out.failed.size(),
          out.failed.size() == 1 ? "entry could" : "entries could");
  }
  // A cache that could not be written is a failure, whatever else was in use.
  if (!out.failed.empty()) return kFailure;
  return out.skipped.empty() ? kOk : kBusy;
}

}  // namespace

Command add_evict(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("evict", "Remove entries (never leased ones) and report the space freed");
  auto o = std::make_shared<Options>();
  auto* ids = cmd->add_option("ids", o->ids, "Entry ids or unique prefixes");
  auto* all = cmd->add_flag("--all", o->all, "Every entry that is not in use")->excludes(ids);
  cmd->add_option("--older-than", o->older_than, "Entries last used at least AGE ago (7d, 12h, 30m)")
      ->check(age_validator())
      ->excludes(ids)
      ->excludes(all);
  cmd->add_option("--to-size", o->to_size, "Least recently used entries until the cache holds at most SIZE (50GiB)")
      ->check(size_validator())
      ->excludes(ids)
      ->excludes(all);
  cmd->add_flag("--stale", o->stale,
                "Entries no load can reach: a checkpoint file they name by path changed or vanished (ls: stale)")
      ->excludes(ids)
      ->excludes(all);
  cmd->add_flag("-n,--dry-run", o->dry_run, "Only say what would be evicted");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
