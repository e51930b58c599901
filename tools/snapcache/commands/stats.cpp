// snapcache stats: size against capacity, free disk against the reserve, entries by state, and
// the lookup and publication counters every process using the cache keeps.
#include <fmt/format.h>

#include "commands/commands.h"
#include "render.h"

namespace snapcache::cli {
namespace {

struct Options {
  bool zero = false;
};

std::string percent(std::uint64_t part, std::uint64_t whole) {
  return whole ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "-";
}

int run(Context& ctx, const Options& o) {
  Store& store = ctx.store();
  const Config& config = store.config();
  if (o.zero) {
    Status st = zero_counters(store);
    if (!st) throw CliError(kFailure, "cannot zero the counters: " + st.message());
  }
  auto counters = read_counters(store);
  if (!counters) throw CliError(kFailure, "cannot read the counters: " + counters.status().message());
  const CacheCounters& c = *counters;
  auto space = store.fs().space(config.directory);
  if (!space) throw CliError(kFailure, space.status().message());
  auto measured = total_bytes(store);
  if (!measured) throw CliError(kFailure, measured.status().message());
  const std::uint64_t used = *measured;
  std::size_t ok = 0, damaged = 0, unfinished = 0, leased = 0;
  for (const auto& e : entries_or_fail(store)) {
    ok += e.state == EntryState::ok;
    damaged += e.state == EntryState::damaged;
    unfinished += e.state == EntryState::unfinished;
    leased += e.leased;
  }
  const std::uint64_t lookups = c.hits + c.misses + c.damaged + c.fallbacks;

  if (ctx.options.json) {
    print_json({{"directory", config.directory},
                {"bytes", used},
                {"capacity_bytes", config.capacity_bytes},
                {"disk", {{"total_bytes", space->total_bytes},
                          {"available_bytes", space->available_bytes},
                          {"reserve_bytes", config.reserve_free_bytes}}},
                {"entries", {{"ok", ok}, {"damaged", damaged}, {"unfinished", unfinished}, {"leased", leased}}},
                {"counters", {{"since_unix_ns", c.since_unix_ns},
                              {"hits", c.hits},
                              {"misses", c.misses},
                              {"damaged", c.damaged},
                              {"fallbacks", c.fallbacks},
                              {"published", c.published},
                              {"already_present", c.already_present},
                              {"publish_skipped", c.publish_skipped},
                              {"publish_failed", c.publish_failed},
                              {"evicted", c.evicted}}},
                {"hit_rate", lookups ? json(static_cast<double>(c.hits) / static_cast<double>(lookups)) : json(nullptr)}});
    return kOk;
  }
  Table t;
  t.add({"directory", config.directory});
  t.add({"size", fmt::format("{} of {} capacity ({})", size(used), size(config.capacity_bytes),
                             percent(used, config.capacity_bytes))});
  t.add({"free disk", fmt::format("{} of {}; publications leave {} free{}", size(space->available_bytes),
                                  size(space->total_bytes), size(config.reserve_free_bytes),
                                  space->available_bytes < config.reserve_free_bytes ? " (below the reserve)" : "")});
  t.add({"entries", fmt::format("{} ok, {} damaged, {} unfinished; {} leased", ok, damaged, unfinished, leased)});
  t.add({"lookups", fmt::format("{} hits, {} misses, {} damaged, {} fallbacks (hit rate {})", c.hits, c.misses,
                                c.damaged, c.fallbacks, percent(c.hits, lookups))});
  t.add({"publications", fmt::format("{} published, {} already present, {} skipped, {} failed", c.published,
                                     c.already_present, c.publish_skipped, c.publish_failed)});
  t.add({"evictions", std::to_string(c.evicted)});
  t.add({"counting since", c.since_unix_ns ? fmt::format("{} ({})", when(c.since_unix_ns), ago(c.since_unix_ns))
                                           : "no lookups yet"});
  t.print();
  return kOk;
}

}  // namespace

Command add_stats(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("stats", "Show size, free disk, entries by state and hit/miss/fallback counters");
  auto o = std::make_shared<Options>();
  cmd->add_flag("-z,--zero", o->zero, "Set the counters to zero first");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
