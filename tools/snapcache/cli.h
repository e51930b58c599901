// What every command shares: exit codes, the typed error that carries one, the global options,
// and the cache they point at.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "snapcache/config.h"
#include "snapcache/maintenance.h"
#include "snapcache/store.h"

namespace snapcache::cli {

// Documented in docs/cli.md; scripts depend on them.
enum ExitCode : int {
  kOk = 0,
  kDamaged = 1,   // verify found damage (also when --repair removed it)
  kUsage = 2,     // bad arguments or input
  kNotFound = 3,  // no such entry, recorded miss or cache directory; an ambiguous prefix
  kBusy = 4,      // entries in use were left in place
  kFailure = 5,   // configuration invalid, or the cache could not be read or written
};

// An error a person can act on, and the exit code it ends the command with. The message is one
// line; `details` are lines printed under it (the candidates of an ambiguous prefix). Both are
// printed escaped: they quote names and what the user typed.
class CliError : public std::runtime_error {
 public:
  CliError(ExitCode code, const std::string& message, std::vector<std::string> details = {})
      : std::runtime_error(message), code_(code), details_(std::move(details)) {}
  ExitCode code() const { return code_; }
  const std::vector<std::string>& details() const { return details_; }

 private:
  ExitCode code_;
  std::vector<std::string> details_;
};

struct GlobalOptions {
  std::string dir;          // --dir
  std::string config_file;  // --config
  bool json = false;        // --json
};

class Context {
 public:
  GlobalOptions options;

  // The library's configuration (defaults, settings file, environment) with the flags on top.
  const Config& config();
  // The cache named by the configuration. It must exist: inspecting a mistyped directory should
  // say so, not create an empty cache there.
  Store& store();
  // The same, created when absent (a cache an import fills).
  Store& store_creating();

 private:
  std::optional<Config> config_;
  std::shared_ptr<Store> store_;
};

// Every entry and unfinished publication (list_entries); a cache that cannot be listed ends the
// command with kFailure and the reason.
std::vector<EntryInfo> entries_or_fail(Store& store);
// The entries of the cache, unfinished publications left out.
std::vector<EntryInfo> published_entries(Store& store);
// The full id of the entry `text` names: a whole id or a prefix that only one entry has.
std::string resolve_entry(Store& store, const std::string& text);
bool is_hex(const std::string& text);
// The name among `names` nearest to `word` (a typed command), when one is near enough to be what
// was meant: at most one edit (a letter added, dropped, changed, or two swapped) per three
// letters of the name, at least one; case is ignored. None when nothing is that close.
std::optional<std::string> nearest_name(const std::string& word, const std::vector<std::string>& names);

}  // namespace snapcache::cli
