// snapcache donors: the GPU donors reachable in the socket directory, what each serves (component,
// key, bytes, consumers, fingerprint). A socket that does not answer is listed with the reason.
#include <fmt/format.h>

#include "commands/commands.h"
#include "output.h"
#include "snapcache/donor.h"
#include "snapcache/key.h"

namespace snapcache::cli {
namespace {

struct Options {
  std::string socket_dir;
};

json key_json(const DonorKey& key) {
  return {{"component", key.disk.component},
          {"dtype", key.disk.dtype},
          {"tp_rank", key.disk.topology.tp_rank},
          {"tp_size", key.disk.topology.tp_size},
          {"torch", key.disk.torch.version},
          {"weight_processing", key.weight_processing},
          {"gpu_uuid", key.gpu_uuid}};
}

int run(Context& ctx, const Options& o) {
  auto donors = list_donors(o.socket_dir);
  if (!donors) throw CliError(kFailure, "cannot list donors: " + donors.status().message());
  if (ctx.options.json) {
    json list = json::array();
    for (const auto& d : *donors) {
      json components = json::array();
      for (const auto& c : d.components)
        components.push_back({{"component", c.component},
                              {"key_id", c.key_id},
                              {"key", key_json(c.key)},
                              {"bytes", c.bytes},
                              {"tensors", c.tensors},
                              {"consumers", c.consumers},
                              {"fingerprint", c.fingerprint}});
      list.push_back({{"socket", d.socket},
                      {"pid", d.pid},
                      {"gpu_uuid", d.gpu_uuid},
                      {"bytes", d.bytes},
                      {"components", components},
                      {"error", d.error.empty() ? json(nullptr) : json(d.error)}});
    }
    print_json(list);
    return kOk;
  }
  if (donors->empty()) {
    say("no donors{}\n", o.socket_dir.empty() ? "" : " in " + o.socket_dir);
    return kOk;
  }
  Table t({"GPU", "PID", "COMPONENT", "TP", "SIZE", "CONSUMERS", "FINGERPRINT", "KEY"});
  t.right_align(4);
  t.right_align(5);
  for (const auto& d : *donors) {
    if (!d.error.empty()) {
      t.add({d.socket, "-", "not answering: " + d.error, "", "", "", "", ""});
      continue;
    }
    for (const auto& c : d.components)
      t.add({d.gpu_uuid, std::to_string(d.pid), c.component,
             fmt::format("{}/{}", c.key.disk.topology.tp_rank, c.key.disk.topology.tp_size), size(c.bytes),
             std::to_string(c.consumers), c.fingerprint, c.key_id.substr(0, 12)});
    if (d.components.empty()) t.add({d.gpu_uuid, std::to_string(d.pid), "(nothing served yet)", "", "", "", "", ""});
  }
  t.print();
  return kOk;
}

}  // namespace

Command add_donors(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("donors", "List the GPU donors that keep prepared weights for restarts, with their keys");
  auto o = std::make_shared<Options>();
  cmd->add_option("--socket-dir", o->socket_dir,
                  "Donor socket directory (default: SNAPCACHE_DONOR_DIR, $XDG_RUNTIME_DIR/snapcache, /tmp/snapcache-UID)");
  cmd->add_flag("--json", options.json, "Print JSON");
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
