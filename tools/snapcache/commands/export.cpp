// snapcache export: entries into one streamed, compressed archive, to a file or stdout (for a
// pipe: `snapcache export ID | ssh host snapcache import -`). Every chunk is proven while read;
// with --sign KEYFILE the archive is signed, so that the nodes that trust its key take it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "commands/commands.h"
#include "progress.h"
#include "render.h"
#include "snapcache/archive.h"

namespace snapcache::cli {
namespace {

struct Options {
  std::vector<std::string> ids;
  bool all = false;
  std::string output;
  int level = 3;
  std::size_t threads = 0;
  std::string sign;  // --sign KEYFILE
};

// A file is written beside its final name and renamed there once whole: an export that fails
// leaves no archive that looks finished.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path) : path_(path), temp_(fmt::format("{}.tmp-{}", path, ::getpid())) {
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) throw CliError(kFailure, fmt::format("cannot create {}: {}", temp_, std::strerror(errno)));
  }
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!done_) ::unlink(temp_.c_str());
  }
  int fd() const { return fd_; }
  void commit() {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      throw CliError(kFailure, fmt::format("cannot write {}: {}", temp_, std::strerror(errno)));
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      throw CliError(kFailure, fmt::format("cannot rename {} to {}: {}", temp_, path_, std::strerror(errno)));
    done_ = true;
  }

 private:
  std::string path_, temp_;
  int fd_ = -1;
  bool done_ = false;
};

int run(Context& ctx, const Options& o) {
  Store& store = ctx.store();
  std::vector<std::string> ids;
  if (o.all) {
    for (const auto& e : published_entries(store))
      if (e.state == EntryState::ok) ids.push_back(e.id);
  } else {
    for (const auto& text : o.ids) ids.push_back(resolve_entry(store, text));
  }
  if (ids.empty()) throw CliError(kNotFound, "no entries to export");
  const bool to_stdout = o.output == "-";
  if (to_stdout && is_terminal(STDOUT_FILENO))
    throw CliError(kUsage, "the archive is binary and stdout is a terminal: redirect it, pipe it, or use -o FILE");
  std::optional<OutputFile> file;
  if (!to_stdout) file.emplace(o.output);
  // With the archive on stdout, what we say goes to stderr.
  std::FILE* out = to_stdout ? stderr : stdout;
  json entries = json::array();
  // The archive's bytes as they are written, and which entry of how many: a compressed total is
  // not known beforehand.
  ProgressBar bar(0, ProgressBar::wanted(ctx.options.json));
  std::size_t done = 0;
  auto entry_label = [&] { return fmt::format("written, entry {} of {}", std::min(done + 1, ids.size()), ids.size()); };
  bar.set_label(entry_label());
  bar.tick_in_background();
  auto on_entry = [&](const ExportedEntry& e) {
    ++done;
    if (ctx.options.json) {
      entries.push_back({{"id", e.id}, {"component", e.component}, {"status", e.status ? "exported" : "skipped"},
                         {"reason", e.status ? "" : e.status.message()}, {"bytes", e.bytes}});
      return;
    }
    bar.above([&] {
      if (e.status) say_to(out, "exported {}  {}  {}\n", e.id.substr(0, 12), e.component, size(e.bytes));
      else say_to(out, "skipped  {}  {}\n", e.id.substr(0, 12), e.status.message());
      std::fflush(out);
    });
    bar.set_label(entry_label());
  };
  ArchiveSink sink = fd_sink(to_stdout ? STDOUT_FILENO : file->fd());
  ArchiveSink counted = [&](const void* data, std::size_t n) {
    Status st = sink(data, n);
    bar.add(n);
    return st;
  };
  ExportOptions options;
  options.level = o.level;
  options.threads = o.threads;
  options.signing_key_file = o.sign;
  auto summary = export_entries(store, ids, bar.enabled() ? counted : sink, options, on_entry);
  bar.finish();
  if (!summary) {
    const StatusCode code = summary.status().code();
    // A key file that is not one, or that others may read, is the user's to fix.
    throw CliError(is_entry_damage(code) ? kDamaged
                   : code == StatusCode::invalid_argument || code == StatusCode::permission_denied ? kUsage
                                                                                                    : kFailure,
                   summary.status().message());
  }
  if (file) file->commit();
  const double ratio = summary->archive_bytes ? static_cast<double>(summary->data_bytes) / static_cast<double>(summary->archive_bytes) : 0;
  if (ctx.options.json) {
    print_json({{"entries", entries},
                {"output", o.output},
                {"data_bytes", summary->data_bytes},
                {"archive_bytes", summary->archive_bytes},
                {"ratio", ratio},
                {"seconds", summary->seconds},
                {"signer", summary->signer.empty() ? json(nullptr) : json(summary->signer)}},
               out);
  } else {
    say_to(out, "{} of {} into {} ({:.2f}x) in {:.2f} s\n", summary->entries.size() == 1 ? "1 entry" :
           fmt::format("{} entries", summary->entries.size()), size(summary->data_bytes), size(summary->archive_bytes),
           ratio, summary->seconds);
    if (summary->signer.empty())
      say_to(out, "unsigned: an import refuses it unless told --trust-unsigned (sign with --sign KEYFILE; "
                  "`snapcache keygen` makes a key)\n");
    else
      say_to(out, "signed by {}: a node imports it when this key is in its trusted_archive_keys\n", summary->signer);
  }
  for (const auto& e : summary->entries)
    if (!e.status) return kBusy;
  return kOk;
}

}  // namespace

Command add_export(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("export", "Write entries into a compressed archive (a file, or - for stdout)");
  auto o = std::make_shared<Options>();
  auto* ids = cmd->add_option("ids", o->ids, "Entry ids or unique prefixes");
  cmd->add_flag("--all", o->all, "Export every sound entry")->excludes(ids);
  cmd->add_option("-o,--output", o->output, "Archive file, or - for stdout")->required();
  cmd->add_option("--level", o->level, "zstd level (1..19)")->capture_default_str()->check(CLI::Range(1, 19));
  cmd->add_option("--threads", o->threads, "zstd workers (default: one per core, at most 16)");
  cmd->add_option("--sign", o->sign,
                  "Sign the archive with this private key (`snapcache keygen` makes one); importers that trust its "
                  "public key take it, and refuse unsigned archives by default")
      ->type_name("KEYFILE");
  add_common_options(*cmd, options);
  return {cmd, [o](Context& ctx) {
            if (o->ids.empty() && !o->all) throw CliError(kUsage, "name the entries to export, or --all");
            return run(ctx, *o);
          }};
}

}  // namespace snapcache::cli
