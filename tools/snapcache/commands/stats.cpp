// snapcache stats: size against capacity, free disk against the reserve, entries by state, the
// lookup and publication counters every process using the cache keeps, the hit rate over the last
// hours and days (the counters' history), and the space each component takes (from the entries).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands/commands.h"
#include "render.h"
#include "snapcache/extend/file_system.h"

namespace snapcache::cli {
namespace {

struct Options {
  bool zero = false;
};

std::string percent(std::uint64_t part, std::uint64_t whole) {
  return whole ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "-";
}

json rate(std::uint64_t hits, std::uint64_t lookups) {
  return lookups ? json(static_cast<double>(hits) / static_cast<double>(lookups)) : json(nullptr);
}

using Hour = CacheCounters::Hour;

// Hours summed into periods that start at `period_of(hour)`: days, or the hours themselves.
template <class PeriodOf>
std::vector<Hour> sum_by(const std::vector<Hour>& hours, PeriodOf period_of) {
  std::vector<Hour> out;
  for (const Hour& h : hours) {
    const std::int64_t start = period_of(h.start_unix_ns);
    if (out.empty() || out.back().start_unix_ns != start) out.push_back(Hour{.start_unix_ns = start});
    out.back() += h;
  }
  return out;
}

// The local day an hour falls in, as the text shows days (midnight, local time).
std::int64_t local_day(std::int64_t unix_ns) {
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm local{};
  localtime_r(&t, &local);
  local.tm_hour = local.tm_min = local.tm_sec = 0;
  local.tm_isdst = -1;
  return static_cast<std::int64_t>(std::mktime(&local)) * 1'000'000'000;
}

// A few rows of periods, newest last, with the hit rate of each.
void print_periods(const std::string& title, const std::string& unit, const std::vector<Hour>& periods,
                   std::size_t rows, std::size_t when_width) {
  if (periods.empty()) return;
  say("\n{}\n", title);
  Table t({unit, "LOOKUPS", "HITS", "MISSES", "FALLBACKS", "HIT RATE", "PUBLISHED"}, "  ");
  for (std::size_t c = 1; c <= 6; ++c) t.right_align(c);
  for (std::size_t i = periods.size() > rows ? periods.size() - rows : 0; i < periods.size(); ++i) {
    const Hour& p = periods[i];
    t.add({when(p.start_unix_ns).substr(0, when_width), std::to_string(p.lookups()), std::to_string(p.hits),
           std::to_string(p.misses), std::to_string(p.fallbacks + p.damaged), percent(p.hits, p.lookups()),
           std::to_string(p.published)});
  }
  t.print();
}

struct ComponentSpace {
  std::size_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t shared = 0;  // of `bytes`, in files entries share (counted once below)
  std::vector<std::string> ids;
};

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
  // Space by component, from the entries as `ls` reads them; an entry without a readable key
  // (damaged, unfinished) counts under "(unknown)".
  std::map<std::string, ComponentSpace> components;
  for (const auto& e : entries_or_fail(store)) {
    ComponentSpace& space_of = components[e.manifest ? e.manifest->key.component : std::string("(unknown)")];
    ++space_of.entries;
    space_of.bytes += e.bytes;
    space_of.shared += e.shared_bytes;
    space_of.ids.push_back(e.id);
    ok += e.state == EntryState::ok;
    damaged += e.state == EntryState::damaged;
    unfinished += e.state == EntryState::unfinished;
    leased += e.leased;
  }
  // Entries of one model share the files whose bytes are equal: a component holding such files is
  // measured once more, each file counted once.
  for (auto& [_, space_of] : components)
    if (space_of.shared > 0)
      if (auto once = entries_bytes(store, space_of.ids)) space_of.bytes = *once;
  const std::uint64_t lookups = c.hits + c.misses + c.damaged + c.fallbacks;
  json hours = json::array();
  for (const Hour& h : c.history)
    hours.push_back({{"start_unix_ns", h.start_unix_ns}, {"hits", h.hits}, {"misses", h.misses},
                     {"damaged", h.damaged}, {"fallbacks", h.fallbacks}, {"published", h.published},
                     {"hit_rate", rate(h.hits, h.lookups())}});
  const json history = {{"bucket_seconds", 3600}, {"hours", hours}};
  json by_component = json::array();
  for (const auto& [name, space_of] : components)
    by_component.push_back({{"component", name}, {"entries", space_of.entries}, {"bytes", space_of.bytes}});

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
                {"hit_rate", rate(c.hits, lookups)},
                {"history", history},
                {"components", by_component}});
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

  // Over time: the last day's hours and the last week's days that saw lookups or publications.
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
  const std::int64_t day_ago = now - 24ll * 3600 * 1'000'000'000;
  std::vector<Hour> last_day;
  for (const Hour& h : c.history)
    if (h.start_unix_ns >= day_ago) last_day.push_back(h);
  print_periods("by hour (the last 24 hours with any)", "HOUR", last_day, 24, 16);
  print_periods("by day (the last 7 days with any)", "DAY", sum_by(c.history, local_day), 7, 10);

  if (!components.empty()) {
    say("\nspace by component\n");
    Table by({"COMPONENT", "ENTRIES", "SIZE", "SHARE"}, "  ");
    by.right_align(1);
    by.right_align(2);
    by.right_align(3);
    std::vector<std::pair<std::string, ComponentSpace>> sorted(components.begin(), components.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
    std::uint64_t all = 0;
    for (const auto& [_, space_of] : sorted) all += space_of.bytes;
    for (const auto& [name, space_of] : sorted)
      by.add({name.empty() ? "''" : name, std::to_string(space_of.entries), size(space_of.bytes), percent(space_of.bytes, all)});
    by.print();
  }
  return kOk;
}

}  // namespace

Command add_stats(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("stats", "Show size, free disk, entries by state, hit/miss/fallback counters, the hit rate by hour and day, and space by component");
  auto o = std::make_shared<Options>();
  cmd->add_flag("-z,--zero", o->zero, "Set the counters to zero first");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
