// snapcache ls: one line per entry, most recently used first, printed as they are read.
#include <fmt/format.h>

#include "commands/commands.h"
#include "render.h"
#include "snapcache/key.h"

namespace snapcache::cli {
namespace {

// The entries' sizes added up, where no two share a file; else the cache measured, which counts a
// shared file once (the walk it takes is skipped where nothing is shared).
std::uint64_t counted_once(Store& store, std::uint64_t total, std::uint64_t shared) {
  if (shared == 0) return total;
  auto measured = total_bytes(store);
  return measured ? *measured : total;
}

}  // namespace

Command add_ls(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("ls", "List entries, most recently used first");
  add_common_options(*cmd, options);
  return {cmd, [](Context& ctx) {
            Store& store = ctx.store();
            if (ctx.options.json) {
              auto entries = entries_or_fail(store);
              std::uint64_t total = 0, shared = 0;
              json list = json::array();
              for (const auto& e : entries) {
                total += e.bytes;
                shared += e.shared_bytes;
                list.push_back(entry_summary_json(e));
              }
              print_json({{"directory", store.config().directory},
                          {"entries", list},
                          {"bytes", counted_once(store, total, shared)},
                          {"capacity_bytes", store.config().capacity_bytes}});
              return kOk;
            }
            // Printed as read (visit_entries): the first rows set the columns' widths, so that a
            // cache of a million entries shows its most recently used at once.
            Table table({"ID", "COMPONENT", "CHECKPOINT", "TOPOLOGY", "DTYPE", "TORCH", "SIZE", "AGE", "LAST USE",
                         "ORIGIN", "STATE"});
            table.right_align(6);
            constexpr std::size_t kRowsThatSetWidths = 50;
            std::vector<std::vector<std::string>> first;
            std::size_t count = 0, leased = 0;
            std::uint64_t total = 0, shared = 0;
            auto flush_first = [&] {
              for (const auto& row : first) table.reserve(row);
              table.print_header();
              for (auto& row : first) table.print_row(std::move(row));
              first.clear();
            };
            Status listed = visit_entries(store, [&](EntryInfo e) {
              ++count;
              total += e.bytes;
              shared += e.shared_bytes;
              leased += e.leased ? 1 : 0;
              std::vector<std::string> row;
              if (!e.manifest) {
                std::int64_t created = e.state == EntryState::unfinished ? e.last_use_unix_ns : 0;
                row = {e.id.substr(0, 12), "-", "-", "-", "-", "-", size(e.bytes), ago(created),
                       e.state == EntryState::unfinished ? "-" : ago(e.last_use_unix_ns), origin_text(e),
                       state_text(e)};
              } else {
                const Key& k = e.manifest->key;
                row = {e.id.substr(0, 12), k.component.empty() ? "-" : k.component, checkpoint_text(k),
                       topology_text(k.topology), k.dtype.empty() ? "-" : k.dtype,
                       k.torch.version.empty() ? "-" : k.torch.version, size(e.bytes),
                       ago(e.manifest->creation.created_unix_ns), ago(e.last_use_unix_ns), origin_text(e),
                       state_text(e)};
              }
              if (count <= kRowsThatSetWidths) {
                first.push_back(std::move(row));
                if (count == kRowsThatSetWidths) flush_first();
              } else {
                table.print_row(std::move(row));
              }
            });
            if (!first.empty()) flush_first();
            if (!listed) throw CliError(kFailure, listed.message());
            say("{} {}{}, {} of {} capacity{}\n", count, count == 1 ? "entry" : "entries",
                leased ? fmt::format(" ({} leased)", leased) : "", size(counted_once(store, total, shared)),
                size(store.config().capacity_bytes),
                shared ? fmt::format(" ({} of the sizes above in files entries share)", size(shared)) : "");
            return kOk;
          }};
}

}  // namespace snapcache::cli
