// snapcache why: for a load that missed, the key fields that differ from the nearest entry. The
// key comes from a key file (write_key_file), or from the misses the library records.
#include <fmt/format.h>

#include "commands/commands.h"
#include "render.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"

namespace snapcache::cli {
namespace {

struct Options {
  std::string target;
};

struct Wanted {
  Key key;
  std::string source;  // "file", "recorded_miss", "entry"
  std::string path;
  std::int64_t missed_unix_ns = 0;
  std::string reason_at_miss;  // the lookup's words when it missed (recorded misses only)
  std::string failure;         // the load's error, when the load that missed then failed
};

Wanted find_key(Store& store, const std::string& target) {
  FileSystem& fs = store.fs();
  // A path first: a key file may well be named by hex digits.
  if (auto st = fs.stat(target); st && !st->is_directory) {
    auto key = read_key_file(fs, target);
    if (!key) throw CliError(kUsage, key.status().message());
    return {std::move(*key), "file", target, 0, "", ""};
  }
  if (!is_hex(target))
    throw CliError(kNotFound, fmt::format("'{}' is neither a key file nor the id of a recorded miss or entry", target));
  std::vector<RecordedMiss> misses;
  for (auto& m : recorded_misses(store))
    if (m.id.starts_with(target)) misses.push_back(std::move(m));
  if (misses.size() > 1) {
    std::vector<std::string> list;
    for (const auto& m : misses) list.push_back(fmt::format("{}  missed {}", m.id, ago(m.unix_ns)));
    throw CliError(kNotFound, fmt::format("'{}' is ambiguous; it matches {} recorded misses:", target, misses.size()),
                   std::move(list));
  }
  if (misses.size() == 1) {
    auto key = read_key_file(fs, misses[0].path);
    if (!key) throw CliError(kFailure, key.status().message());
    return {std::move(*key), "recorded_miss", misses[0].path, misses[0].unix_ns, misses[0].reason, misses[0].failure};
  }
  std::string id;
  try {
    id = resolve_entry(store, target);
  } catch (const CliError& e) {
    if (e.code() != kNotFound || std::string(e.what()).find("ambiguous") != std::string::npos) throw;
    throw CliError(kNotFound, fmt::format("no recorded miss or entry matches '{}' (`snapcache why` lists recorded "
                                          "misses)", target));
  }
  auto info = entry_info(store, id);
  if (!info || !info->manifest) throw CliError(kFailure, fmt::format("entry {} has no readable key", id));
  return {info->manifest->key, "entry", info->path, 0, "", ""};
}

// A recorded load either missed (and went on: loaded from the checkpoint, maybe published) or
// failed after the miss; a failure is never shown as a miss.
std::string outcome_of(const std::string& failure) { return failure.empty() ? "miss" : "failed"; }
json optional_text(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

int explain(Context& ctx, const std::string& target) {
  Store& store = ctx.store();
  Wanted w = find_key(store, target);
  const std::string id = key_id(w.key);
  const bool exists = store.fs().stat(store.entry_path(id)).is_ok();
  auto best = exists ? std::nullopt : nearest_entry(store, w.key);
  if (ctx.options.json) {
    print_json({{"key_id", id},
                {"source", w.source},
                {"path", w.path},
                {"missed_unix_ns", w.missed_unix_ns ? json(w.missed_unix_ns) : json(nullptr)},
                {"outcome", w.source == "recorded_miss" ? json(outcome_of(w.failure)) : json(nullptr)},
                {"failed", optional_text(w.failure)},
                {"reason_at_miss", optional_text(w.reason_at_miss)},
                {"key", key_json(w.key)},
                {"entry_exists", exists},
                {"nearest", nearest_json(best)},
                {"first_load", !exists && !best}});
    return kOk;
  }
  say("key {}: {}, {}, {}\n", id.substr(0, 12), w.key.component.empty() ? "''" : w.key.component,
      checkpoint_text(w.key), topology_text(w.key.topology));
  if (w.missed_unix_ns) say("missed {} ({})\n", when(w.missed_unix_ns), ago(w.missed_unix_ns));
  // A load that failed after its miss: the failure is what happened, the miss only its start.
  if (!w.failure.empty()) say("failed: {}\n", w.failure);
  // What caused it, as the lookup said then: still the cause after the entry has been published.
  if (!w.reason_at_miss.empty()) say("why, at the miss: {}\n", w.reason_at_miss);
  if (exists) {
    say("entry {} has this key now, so a load with it hits{}\n", id.substr(0, 12),
        w.source == "recorded_miss" ? " (it was published after the miss)" : "");
    return kOk;
  }
  if (!best) {
    say("{}\n", first_load_reason(w.key));
    return kOk;
  }
  say("no entry has this key; the nearest, {} ({}), differs in {} {}:\n", best->id.substr(0, 12), kNearestEntryWords,
      best->differences.size(), best->differences.size() == 1 ? "field" : "fields");
  for (const auto& d : best->differences)
    say("  {}\n", !d.words.empty() ? d.words : fmt::format("{} {} != {}", d.field, d.wanted, d.found));
  say("(`--json` gives each field's values)\n");
  return kOk;
}

int list_misses(Context& ctx) {
  Store& store = ctx.store();
  auto misses = recorded_misses(store);
  json out = json::array();
  Table t({"KEY", "WHEN", "OUTCOME", "COMPONENT", "CHECKPOINT", "WHY"});
  for (const auto& m : misses) {
    auto key = read_key_file(store.fs(), m.path);
    if (!key) continue;
    const bool exists = store.fs().stat(store.entry_path(m.id)).is_ok();
    auto best = exists ? std::nullopt : nearest_entry(store, *key);
    // A failure's own error; a miss's cause as recorded at the miss; for an old record without
    // it, the nearest entry now.
    std::string why = !m.failure.empty() ? "failed: " + m.failure
                      : !m.reason.empty() ? m.reason
                      : exists            ? "(published since)"
                      : best              ? describe_differences(best->differences, 2)
                                          : first_load_reason(*key);
    if (exists && (!m.reason.empty() || !m.failure.empty())) why += " (published since)";
    t.add({m.id.substr(0, 12), ago(m.unix_ns), outcome_of(m.failure), key->component.empty() ? "''" : key->component,
           checkpoint_text(*key), why});
    out.push_back({{"key_id", m.id},
                   {"missed_unix_ns", m.unix_ns},
                   {"outcome", outcome_of(m.failure)},
                   {"failed", optional_text(m.failure)},
                   {"component", key->component},
                   {"entry_exists", exists},
                   {"reason_at_miss", optional_text(m.reason)},
                   {"nearest", nearest_json(best)},
                   {"first_load", !exists && !best}});
  }
  if (ctx.options.json) {
    print_json({{"misses", out}});
    return kOk;
  }
  if (misses.empty()) {
    say("no misses recorded in {}\n", store.config().directory);
    return kOk;
  }
  t.print();
  say("`snapcache why KEY` shows what changed, field by field\n");
  return kOk;
}

}  // namespace

Command add_why(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("why", "Explain a miss: what changed since the nearest entry; tell failed loads from misses");
  auto o = std::make_shared<Options>();
  cmd->add_option("key", o->target,
                  "A recorded miss's key id (or prefix), a key file, or an entry id; without it, list recorded misses");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return o->target.empty() ? list_misses(ctx) : explain(ctx, o->target); }};
}

}  // namespace snapcache::cli
