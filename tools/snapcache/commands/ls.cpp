// snapcache ls: one line per entry, most recently used first.
#include <fmt/format.h>

#include "commands/commands.h"
#include "render.h"
#include "snapcache/key.h"

namespace snapcache::cli {

Command add_ls(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("ls", "List entries, most recently used first");
  add_common_options(*cmd, options);
  return {cmd, [](Context& ctx) {
            Store& store = ctx.store();
            auto entries = entries_or_fail(store);
            std::uint64_t total = 0;
            for (const auto& e : entries) total += e.bytes;
            if (ctx.options.json) {
              json list = json::array();
              for (const auto& e : entries) list.push_back(entry_summary_json(e));
              print_json({{"directory", store.config().directory},
                          {"entries", list},
                          {"bytes", total},
                          {"capacity_bytes", store.config().capacity_bytes}});
              return kOk;
            }
            Table table({"ID", "COMPONENT", "CHECKPOINT", "TOPOLOGY", "DTYPE", "TORCH", "SIZE", "AGE", "LAST USE",
                         "ORIGIN", "STATE"});
            table.right_align(6);
            std::size_t leased = 0;
            for (const auto& e : entries) {
              leased += e.leased ? 1 : 0;
              if (!e.manifest) {
                std::int64_t created = e.state == EntryState::unfinished ? e.last_use_unix_ns : 0;
                table.add({e.id.substr(0, 12), "-", "-", "-", "-", "-", size(e.bytes), ago(created),
                           e.state == EntryState::unfinished ? "-" : ago(e.last_use_unix_ns), origin_text(e),
                           state_text(e)});
                continue;
              }
              const Key& k = e.manifest->key;
              table.add({e.id.substr(0, 12), k.component.empty() ? "-" : k.component, checkpoint_text(k),
                         topology_text(k.topology), k.dtype.empty() ? "-" : k.dtype,
                         k.torch.version.empty() ? "-" : k.torch.version, size(e.bytes),
                         ago(e.manifest->creation.created_unix_ns), ago(e.last_use_unix_ns), origin_text(e),
                         state_text(e)});
            }
            if (!table.empty()) table.print();
            say("{} {}{}, {} of {} capacity\n", entries.size(), entries.size() == 1 ? "entry" : "entries",
                leased ? fmt::format(" ({} leased)", leased) : "", size(total),
                size(store.config().capacity_bytes));
            return kOk;
          }};
}

}  // namespace snapcache::cli
