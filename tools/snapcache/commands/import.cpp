// snapcache import: entries from an archive (a file, or - for stdin) into the cache, every chunk
// proven while read and each entry published atomically; only an archive signed by a trusted key
// unless --trust-unsigned says to take one whose authorship is unproven; says when this machine
// would never hit an entry (another torch, a checkpoint keyed by file identity).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "commands/commands.h"
#include "progress.h"
#include "render.h"
#include "snapcache/archive.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"

namespace snapcache::cli {
namespace {

struct Options {
  std::string input;
  bool require_match = false;
  bool trust_unsigned = false;
};

const char* label(ImportResult r) {
  switch (r) {
    case ImportResult::imported: return "imported";
    case ImportResult::already_present: return "present";
    case ImportResult::skipped: return "skipped";
    case ImportResult::refused: return "REFUSED";
    case ImportResult::failed: return "FAILED";
  }
  return "?";
}

int run(Context& ctx, const Options& o) {
  Store& store = ctx.store_creating();
  int fd = STDIN_FILENO;
  if (o.input != "-") {
    fd = ::open(o.input.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw CliError(errno == ENOENT ? kNotFound : kFailure, fmt::format("cannot open {}: {}", o.input, std::strerror(errno)));
  }
  // A file's size is the total; stdin's is not known.
  struct stat st {};
  const std::uint64_t total = fd != STDIN_FILENO && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                                  ? static_cast<std::uint64_t>(st.st_size) : 0;
  ProgressBar bar(total, ProgressBar::wanted(ctx.options.json));
  bar.set_label("of the archive read");
  bar.tick_in_background();
  ArchiveSource source = fd_source(fd);
  ArchiveSource counted = [&](void* data, std::size_t n) -> Result<std::size_t> {
    auto got = source(data, n);
    if (got) bar.add(*got);
    return got;
  };
  const TorchIdentity here = current_torch_identity();
  json entries = json::array();
  ImportOptions options;
  options.trust_unsigned = o.trust_unsigned;
  std::map<std::string, KeyMatch> matches;
  options.screen = [&](const Key& key) -> std::string {
    KeyMatch m = match_key_here(store.fs(), key, here);
    std::string why = o.require_match && !m.may_hit() ? "a load here would never hit it (--require-match): " + m.never.front() : "";
    matches[key_id(key)] = std::move(m);
    return why;
  };
  options.on_entry = [&](const ImportedEntry& e) {
    const KeyMatch& m = matches[e.id];
    const std::string component = e.key ? e.key->component : "-";
    if (ctx.options.json) {
      json evicted = json::array();
      for (const EvictedEntry& v : e.evicted)
        evicted.push_back({{"id", v.id}, {"component", v.component}, {"bytes", v.bytes}});
      entries.push_back({{"id", e.id}, {"component", component}, {"result", to_string(e.result)}, {"reason", e.reason},
                         {"bytes", e.bytes}, {"evicted", evicted}, {"never_hits_here", m.never}, {"notes", m.notes}});
      return;
    }
    bar.above([&] {
      say("{:<9}{}  {}  {}{}\n", label(e.result), e.id.substr(0, 12), component, size(e.bytes),
          e.reason.empty() ? "" : "  " + e.reason);
      // What was evicted to make room for it, whether or not it then fitted (a skip may follow evictions).
      if (!e.evicted.empty()) say("         {}\n", describe_evictions(e.evicted));
      if (e.result == ImportResult::imported || e.result == ImportResult::already_present)
        for (const auto& why : m.never) say("         warning: a load here would never hit it: {}\n", why);
    });
  };
  ImportSummary summary = import_archive(store, bar.enabled() ? counted : source, options);
  bar.finish();
  if (fd != STDIN_FILENO) ::close(fd);
  std::size_t imported = 0, present = 0, skipped = 0, refused = 0, failed = 0;
  for (const auto& e : summary.entries) {
    switch (e.result) {
      case ImportResult::imported: ++imported; break;
      case ImportResult::already_present: ++present; break;
      case ImportResult::skipped: ++skipped; break;
      case ImportResult::refused: ++refused; break;
      case ImportResult::failed: ++failed; break;
    }
  }
  const double rate = summary.seconds > 0 ? static_cast<double>(summary.data_bytes) / summary.seconds : 0;
  const char* authorship = summary.signer_trusted ? "proven" : "unproven";
  // Entries were taken (or would have been) on the word of --trust-unsigned alone.
  const bool taken_unproven = o.trust_unsigned && !summary.signer_trusted && (imported || present || summary.status);
  if (ctx.options.json) {
    print_json({{"entries", entries}, {"status", summary.status ? "ok" : "error"},
                {"signer", summary.signer.empty() ? json(nullptr) : json(summary.signer)},
                {"authorship", authorship},
                {"reason", summary.status ? "" : summary.status.message()}, {"imported", imported},
                {"already_present", present}, {"skipped", skipped}, {"refused", refused}, {"failed", failed},
                {"data_bytes", summary.data_bytes}, {"archive_bytes", summary.archive_bytes},
                {"seconds", summary.seconds}});
  } else {
    say("{} imported, {} already present, {} skipped, {} refused, {} failed; {} read in {:.2f} s ({}/s)\n",
        imported, present, skipped, refused, failed, size(summary.data_bytes), summary.seconds,
        size(static_cast<std::uint64_t>(rate)));
    if (summary.signer_trusted)
      say("signed by {}, a trusted key (trusted_archive_keys): the entries' authorship is proven\n", summary.signer);
    else if (taken_unproven)
      say("warning: {}; imported with --trust-unsigned: the entries' authorship is unproven (ls and inspect show "
          "them as such)\n",
          summary.signer.empty() ? std::string("the archive is unsigned")
                                 : "the archive is signed by " + summary.signer + ", a key not trusted here");
  }
  if (!summary.status)
    print_error(fmt::format("{}: {}", o.input == "-" ? "stdin" : o.input, summary.status.message()));
  // Refused: an entry that failed a check, a damaged archive, or one whose authorship is not proven.
  if (refused || (!summary.status && (is_entry_damage(summary.status.code()) ||
                                      summary.status.code() == StatusCode::permission_denied)))
    return kDamaged;
  if (failed || !summary.status) return kFailure;
  return kOk;
}

}  // namespace

Command add_import(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("import", "Read entries from an archive (a file, or - for stdin) into the cache");
  auto o = std::make_shared<Options>();
  cmd->add_option("input", o->input, "Archive file, or - for stdin")->required();
  cmd->add_flag("--require-match", o->require_match,
                "Skip entries a load on this machine would never hit (another torch, a checkpoint keyed by file identity)");
  cmd->add_flag("--trust-unsigned", o->trust_unsigned,
                "Also import an archive whose authorship is not proven (unsigned, or signed by a key not in "
                "trusted_archive_keys): its entries' weights are whatever whoever made it put there; they are "
                "recorded as of unproven authorship. A signature that does not hold is refused anyway");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) { return run(ctx, *o); }};
}

}  // namespace snapcache::cli
