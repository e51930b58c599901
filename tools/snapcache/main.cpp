// The `snapcache` command. Built on the library's public API; see docs/cli.md.
#include <CLI/CLI.hpp>
#include "util/fmt.h"

#include <cstdio>
#include <cstdlib>

#include "snapcache/config.h"
#include "snapcache/snapshot.h"
#include "snapcache/version.h"

int main(int argc, char** argv) {
  CLI::App app{"snapcache: verified on-disk snapshots of loaded PyTorch weights"};
  app.set_version_flag("--version", [] {
    auto torch = snapcache::current_torch_identity();
    return fmt::format("snapcache {} (format {}, torch {}, cuda {}, abi {})", snapcache::kVersion,
                       snapcache::kFormatVersion, torch.version,
                       torch.cuda_version.empty() ? "none" : torch.cuda_version, torch.cxx_abi);
  });
  app.require_subcommand(0, 1);

  auto* config_cmd = app.add_subcommand("config", "Show the effective configuration and where each value came from");
  config_cmd->callback([] {
    auto config = snapcache::Config::from_environment();
    if (!config) {
      fmt::print(stderr, "snapcache: {}\n", config.status().message());
      std::exit(2);
    }
    fmt::print("directory  {}  ({})\n", config->directory, to_string(config->sources["directory"]));
    fmt::print("enabled    {}  ({})\n", config->enabled() ? "yes" : "no", to_string(config->sources["mode"]));
    fmt::print("capacity   {} GiB  ({})\n", static_cast<double>(config->capacity_bytes) / snapcache::kGiB,
               to_string(config->sources["capacity"]));
    fmt::print("reserve    {} GiB  ({})\n", static_cast<double>(config->reserve_free_bytes) / snapcache::kGiB,
               to_string(config->sources["reserve"]));
  });

  CLI11_PARSE(app, argc, argv);
  if (argc == 1) std::fputs(app.help().c_str(), stdout);
  return 0;
}
