// Entries that travel between machines: export entries of a cache into one streamed, compressed
// archive, and import an archive into another cache, every chunk checksum proven on the way and
// each entry published atomically (`snapcache export ID... -o FILE|-`, `snapcache import FILE|-`;
// docs/scale-out.md). An archive signed with a private key (Ed25519) proves who made it: an
// import takes an archive only when it is signed by one of the store's trusted_archive_keys, or
// when its caller says to trust archives whose authorship is not proven. The bytes are described
// in src/archive/archive_format.h. No torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/status.h"

namespace snapcache {

// Where archive bytes go, and where they come from (a source returns 0 at the end).
using ArchiveSink = std::function<Status(const void* data, std::size_t size)>;
using ArchiveSource = std::function<Result<std::size_t>(void* data, std::size_t size)>;
// A descriptor as sink or source (a file, a pipe, stdin/stdout); EINTR is retried.
SNAPCACHE_API ArchiveSink fd_sink(int fd);
SNAPCACHE_API ArchiveSource fd_source(int fd);

// A new key pair for signing archives (Ed25519): the private key into `key_file` (created with
// mode 0600; an existing file, a link included, is never overwritten) and its public key into
// `key_file`.pub. Returns the public key as trusted_archive_keys takes it: "ed25519:" and 64 hex
// digits.
SNAPCACHE_API Result<std::string> make_archive_signing_key(const std::string& key_file);

struct ExportOptions {
  int level = 3;            // zstd level, 1..19
  std::size_t threads = 0;  // zstd workers; 0: one per hardware thread, at most 16
  // A private key file (make_archive_signing_key) to sign the archive with; empty: unsigned, which
  // an import refuses unless told to trust unsigned archives. A key file others may read is
  // refused.
  std::string signing_key_file{};
};

struct ExportedEntry {
  std::string id;
  std::string component;
  Status status;            // ok: in the archive; otherwise why not (busy, gone)
  std::uint64_t bytes = 0;  // storage bytes carried
};

struct ExportSummary {
  std::vector<ExportedEntry> entries;
  std::string signer;               // the public key that signed the archive; empty: unsigned
  std::uint64_t data_bytes = 0;     // storage bytes carried
  std::uint64_t archive_bytes = 0;  // bytes written to the sink
  double seconds = 0;
};

// Writes the entries `ids` (full ids) to `sink`. Each is read under its lease (it cannot be evicted
// meanwhile) and every chunk is proven against its checksum before its bytes go out. An entry that
// is busy or gone is left out and reported; one found damaged ends the export with the damage
// (the archive is then unfinished, and an import refuses what it holds of that entry); so does a
// sink that fails. `on_entry` hears each entry as it is decided.
SNAPCACHE_API Result<ExportSummary> export_entries(Store& store, const std::vector<std::string>& ids,
                                                   const ArchiveSink& sink, const ExportOptions& options = {},
                                                   const std::function<void(const ExportedEntry&)>& on_entry = {});

enum class ImportResult {
  imported,         // published into the cache
  already_present,  // the cache has this entry
  skipped,          // not imported, for a reason that is not damage (no room, refused by `screen`)
  refused,          // its manifest or data failed a check (a checksum, its id); nothing was kept
  failed,           // the cache could not be written
};
SNAPCACHE_API const char* to_string(ImportResult result);

struct ImportedEntry {
  std::string id;
  std::optional<Key> key;  // once its manifest was read
  ImportResult result = ImportResult::failed;
  std::string reason;  // why, when not imported
  std::uint64_t bytes = 0;
  std::vector<EvictedEntry> evicted;  // entries removed to make room
};

struct ImportOptions {
  // Who made an archive is proven only by a signature of a key in the store's
  // trusted_archive_keys (Config): chunk checksums prove an entry whole, not that its weights are
  // the ones its key names (anyone who can compute a key can write a self-consistent entry for
  // it). Other archives (unsigned, of version 1, or signed by a key not trusted) are refused
  // (permission_denied, saying how to sign or trust) unless this is set: then their entries are
  // imported, recorded as of unproven authorship (EntryOriginKind::imported_unproven). A
  // signature that does not hold is refused either way: it is not a lack of proof but a change.
  bool trust_unsigned = false;
  // Asked about each entry before its bytes are written: a non-empty answer skips it, with that
  // reason (the `snapcache import --require-match` check, say).
  std::function<std::string(const Key&)> screen{};
  std::function<void(const ImportedEntry&)> on_entry{};  // hears each entry as it is decided
};

struct ImportSummary {
  std::vector<ImportedEntry> entries;
  // ok, or why the archive could not be read to its end (not an archive, another version,
  // truncated, a broken zstd frame), or was refused before any entry (permission_denied: its
  // authorship is not proven and trust_unsigned is not set). Entries decided before that stand:
  // each is whole or absent.
  Status status;
  // Once the archive's head is read: the public key it says signed it (empty: unsigned), and
  // whether that key is one of the store's trusted_archive_keys. Each entry's seal is checked
  // against the key before the entry is committed.
  std::string signer;
  bool signer_trusted = false;
  std::uint64_t data_bytes = 0;     // storage bytes read
  std::uint64_t archive_bytes = 0;  // bytes read from the source
  double seconds = 0;
};

SNAPCACHE_API ImportSummary import_archive(Store& store, const ArchiveSource& source, const ImportOptions& options = {});

// Whether a load on this machine could ever hit an entry with `key`, judged by what a key is made
// of: `never` lists what rules it out (another torch build; a checkpoint keyed by file identity,
// path, inode and times, that this machine does not have as such); `notes` what else must
// agree (the topology, the checkpoint's bytes when keyed by content).
struct KeyMatch {
  std::vector<std::string> never;
  std::vector<std::string> notes;
  bool may_hit() const { return never.empty(); }
};
SNAPCACHE_API KeyMatch match_key_here(FileSystem& fs, const Key& key, const TorchIdentity& here);

}  // namespace snapcache
