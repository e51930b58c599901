// snapcache keygen: a key pair for signing archives (`snapcache export --sign KEYFILE`); the public
// key goes into the trusted_archive_keys of the nodes that import them.
#include <fmt/format.h>

#include "commands/commands.h"
#include "render.h"
#include "snapcache/archive.h"

namespace snapcache::cli {

Command add_keygen(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand(
      "keygen", "Make a key pair for signing archives: KEYFILE (private, mode 0600) and KEYFILE.pub");
  auto key_file = std::make_shared<std::string>();
  cmd->add_option("keyfile", *key_file, "The private key file to create (never overwritten)")->required();
  add_common_options(*cmd, options);
  return {cmd, [key_file](Context& ctx) {
            auto public_key = make_archive_signing_key(*key_file);
            if (!public_key)
              throw CliError(public_key.status().code() == StatusCode::invalid_argument ? kUsage : kFailure,
                             public_key.status().message());
            if (ctx.options.json) {
              print_json({{"key_file", *key_file}, {"public_key_file", *key_file + ".pub"}, {"public_key", *public_key}});
              return kOk;
            }
            say("private key: {} (mode 0600; keep it secret: every node that trusts its public key imports what "
                "it signs)\n",
                *key_file);
            say("public key:  {} (also in {}.pub)\n", *public_key, *key_file);
            say("sign:        snapcache export --sign {} ...\n", *key_file);
            say("trust it on the nodes that import, in their settings file:\n  trusted_archive_keys = {}\n",
                *public_key);
            return kOk;
          }};
}

}  // namespace snapcache::cli
