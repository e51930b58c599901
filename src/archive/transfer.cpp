// export_entries and import_archive: the archive codec joined to the store's verifying entry
// reader and writer (store/entry_stream.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

#include "util/fmt.h"

#include "archive/archive_codec.h"
#include "archive/archive_format.h"
#include "archive/signing.h"
#include "format/manifest.h"
#include "format/public_key.h"
#include "snapcache/archive.h"
#include "snapcache/config.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "store/entry_stream.h"
#include "store/layout.h"
#include "util/parallel.h"

namespace snapcache {

const char* to_string(ImportResult r) {
  switch (r) {
    case ImportResult::imported: return "imported";
    case ImportResult::already_present: return "already_present";
    case ImportResult::skipped: return "skipped";
    case ImportResult::refused: return "refused";
    case ImportResult::failed: return "failed";
  }
  return "?";
}

ArchiveSink fd_sink(int fd) {
  return [fd](const void* data, std::size_t size) -> Status {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::from_errno(errno, "write the archive");
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return Status::ok();
  };
}

ArchiveSource fd_source(int fd) {
  return [fd](void* data, std::size_t size) -> Result<std::size_t> {
    for (;;) {
      const ssize_t n = ::read(fd, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::from_errno(errno, "read the archive");
      return static_cast<std::size_t>(n);
    }
  };
}

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Result<std::string> make_archive_signing_key(const std::string& key_file) {
  auto key = archive::SigningKey::generate();
  if (!key) return key.status();
  SNAPCACHE_RETURN_IF_ERROR(key->write_files(key_file));
  return format::public_key_text(key->public_key());
}

Result<ExportSummary> export_entries(Store& store, const std::vector<std::string>& ids, const ArchiveSink& sink,
                                     const ExportOptions& options,
                                     const std::function<void(const ExportedEntry&)>& on_entry) {
  const auto started = std::chrono::steady_clock::now();
  ExportSummary summary;
  std::uint64_t written = 0;
  ArchiveSink counting = [&](const void* data, std::size_t size) {
    written += size;
    return sink(data, size);
  };
  const std::size_t threads = options.threads ? options.threads : util::worker_count();
  std::optional<archive::SigningKey> signer;
  if (!options.signing_key_file.empty()) {
    auto key = archive::SigningKey::from_file(options.signing_key_file);
    if (!key) return key.status();
    signer.emplace(std::move(*key));
    summary.signer = format::public_key_text(signer->public_key());
  }
  auto encoder = archive::Encoder::open(counting, options.level, threads, signer ? &*signer : nullptr);
  if (!encoder) return encoder.status();
  for (const std::string& id : ids) {
    ExportedEntry e;
    e.id = id;
    // The lease keeps evictors away while the entry is read.
    auto reader = store::EntryReader::open(store.fs(), store.entry_path(id), id, store::ReaderLease::shared);
    if (!reader) {
      const StatusCode code = reader.status().code();
      if (code == StatusCode::busy || code == StatusCode::not_found) {
        e.status = reader.status();
        if (on_entry) on_entry(e);
        summary.entries.push_back(std::move(e));
        continue;
      }
      return Status(code, fmt::format("entry {}: {}", id, reader.status().message()));
    }
    const Manifest& m = reader->manifest();
    e.component = m.key.component;
    e.bytes = store::stream_bytes(m);
    // The manifest as the cache holds it, re-encoded from the checked copy: the same bytes.
    const std::string manifest_bytes = format::encode_manifest(m);
    Status st = (*encoder)->begin_entry(id, manifest_bytes, m);
    if (st) st = reader->read([&](std::uint32_t, const void* data, std::size_t size) { return (*encoder)->data(data, size); });
    if (st) st = (*encoder)->end_entry();
    if (!st) {
      if (is_entry_damage(st.code()))
        return Status(st.code(), fmt::format("entry {} is damaged: {} (run `snapcache verify --repair {}`)", id,
                                             st.message(), store::short_id(id)));
      return Status(st.code(), fmt::format("entry {}: {}", id, st.message()), st.sys_errno());
    }
    summary.data_bytes += e.bytes;
    if (on_entry) on_entry(e);
    summary.entries.push_back(std::move(e));
  }
  SNAPCACHE_RETURN_IF_ERROR((*encoder)->finish());
  summary.archive_bytes = written;
  summary.seconds = since(started);
  return summary;
}

namespace {

// Why an archive whose authorship is not proven is refused, and what the user can do: sign it where
// it is made, trust the key that signed it, or say to trust it as it is.
Status unproven_authorship(const Config& config, const archive::Decoder& decoder, const std::string& signer) {
  const std::string why =
      "an entry's checksums prove it whole, not that its weights are the ones its key names (anyone who can compute "
      "a key can write a self-consistent entry for it)";
  const std::string trust_flag = "or, if you trust whoever made this archive, import it with --trust-unsigned, and its "
                                 "entries are recorded as of unproven authorship";
  if (signer.empty())
    return Status(StatusCode::permission_denied,
                  fmt::format("the archive is unsigned{}, so who made its entries cannot be proven: {}. Have it "
                              "exported with `snapcache export --sign KEYFILE` and add that key's public key to "
                              "trusted_archive_keys here; {}",
                              decoder.version() == archive::kUnsignedArchiveVersion
                                  ? " (archive format 1, from before snapcache signed archives)"
                                  : "",
                              why, trust_flag));
  const std::string from = config.origin("trusted_archive_keys");
  const std::string trusted =
      config.trusted_archive_keys.empty()
          ? std::string("no key is trusted here (trusted_archive_keys is not set)")
          : fmt::format("the {} trusted here (trusted_archive_keys, from {}) do not include it",
                        config.trusted_archive_keys.size() == 1 ? "one key" :
                        fmt::format("{} keys", config.trusted_archive_keys.size()),
                        from.empty() ? "the caller" : from);
  return Status(StatusCode::permission_denied,
                fmt::format("the archive is signed by {}, but {}: {}. If that is the key of whoever you trust to "
                            "make archives, add it to trusted_archive_keys (the settings file, or "
                            "SNAPCACHE_TRUSTED_ARCHIVE_KEYS); {}",
                            signer, trusted, why, trust_flag));
}

ImportResult import_result_of(const PublishOutcome& out) {
  switch (out.result) {
    case PublishResult::published: return ImportResult::imported;
    case PublishResult::already_present: return ImportResult::already_present;
    case PublishResult::skipped: return ImportResult::skipped;
    case PublishResult::failed: return is_entry_damage(out.status.code()) ? ImportResult::refused : ImportResult::failed;
  }
  return ImportResult::failed;
}

}  // namespace

ImportSummary import_archive(Store& store, const ArchiveSource& source, const ImportOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  ImportSummary summary;
  archive::Decoder decoder(source);
  auto decide = [&](ImportedEntry e) {
    if (options.on_entry) options.on_entry(e);
    summary.entries.push_back(std::move(e));
  };
  auto end = [&](Status st) {
    summary.status = std::move(st);
    summary.archive_bytes = decoder.bytes_in();
    summary.seconds = since(started);
    return summary;
  };
  if (Status st = decoder.open(); !st) return end(st);
  // Who made the archive decides whether anything of it is written, before any entry is read.
  const Config& config = store.config();
  if (decoder.signer()) summary.signer = format::public_key_text(*decoder.signer());
  summary.signer_trusted = !summary.signer.empty() &&
                           std::find(config.trusted_archive_keys.begin(), config.trusted_archive_keys.end(),
                                     summary.signer) != config.trusted_archive_keys.end();
  if (!summary.signer_trusted && !options.trust_unsigned)
    return end(unproven_authorship(config, decoder, summary.signer));
  // Recorded by this importer from what it checked, never taken from the archive.
  EntryOrigin origin;
  origin.kind = summary.signer_trusted ? EntryOriginKind::imported_signed : EntryOriginKind::imported_unproven;
  origin.signer = summary.signer;
  for (;;) {
    auto next = decoder.next();
    if (!next) return end(next.status());
    if (!next->has_value()) break;
    archive::DecodedEntry& entry = **next;
    ImportedEntry e;
    e.id = entry.id;
    e.key = entry.manifest.key;
    e.bytes = store::stream_bytes(entry.manifest);
    if (std::string why = options.screen ? options.screen(entry.manifest.key) : std::string(); !why.empty()) {
      if (Status st = decoder.data({}); !st) return end(st);
      e.result = ImportResult::skipped;
      e.reason = why;
      decide(std::move(e));
      continue;
    }
    auto begun = store::EntryWriter::begin(store, std::move(entry.manifest), origin, entry.id);
    if (!begun.writer) {
      // Nothing to write (present, no room, refused): its bytes are read past.
      if (Status st = decoder.data({}); !st) return end(st);
      e.result = import_result_of(begun.outcome);
      e.reason = begun.outcome.status.message();
      e.evicted = begun.outcome.evicted;
      decide(std::move(e));
      continue;
    }
    store::EntryWriter& writer = *begun.writer;
    Status written = Status::ok();
    // A chunk that fails its checksum refuses the entry; the rest of its bytes are read past (they
    // stay in step with the stream) and the next entry is imported as usual. So does a seal that
    // does not hold, checked before the commit: nothing of an entry signed otherwise is kept.
    Status read = decoder.data([&](std::uint32_t, const void* data, std::size_t size) {
      if (written) written = writer.write(data, size);
      return Status::ok();
    });
    PublishOutcome out = !read               ? writer.abandon(read)
                         : !decoder.seal()    ? writer.abandon(decoder.seal())
                                              : writer.finish();
    summary.data_bytes += writer.received();
    e.result = import_result_of(out);
    e.reason = out.status.message();
    e.evicted = out.evicted;
    decide(std::move(e));
    if (!read) return end(read);
  }
  return end(decoder.close());
}

KeyMatch match_key_here(FileSystem& fs, const Key& key, const TorchIdentity& here) {
  KeyMatch match;
  if (!(key.torch == here))
    match.never.push_back(fmt::format("it was built with torch {} (cuda {}, {} ABI) and this machine has torch {} "
                                      "(cuda {}, {} ABI)",
                                      key.torch.version, key.torch.cuda_version.empty() ? "none" : key.torch.cuda_version,
                                      key.torch.cxx_abi, here.version, here.cuda_version.empty() ? "none" : here.cuda_version,
                                      here.cxx_abi));
  for (const CheckpointFile& f : key.checkpoint) {
    if (!f.content_digest.empty()) continue;
    // Keyed by identity: a load hits only where this very file (same device, inode and times) is
    // at this path, which a copy to another machine never is.
    auto st = fs.stat(f.path);
    const bool same = st && st->size == f.size && st->mtime_ns == f.mtime_ns && st->ctime_ns == f.ctime_ns &&
                      st->device == f.device && st->inode == f.inode;
    if (!same) {
      match.never.push_back(fmt::format(
          "its checkpoint file {} is keyed by file identity (path, inode, times), not by content, and {}; turn on "
          "content hashing where the entry is built so that it hits wherever the bytes are the same",
          f.path, st ? "the file here is another one" : "there is no such file here"));
      break;  // one file says it; the rest would repeat it
    }
  }
  bool by_content = !key.checkpoint.empty();
  for (const auto& f : key.checkpoint) by_content = by_content && !f.content_digest.empty();
  if (by_content) match.notes.push_back("keyed by checkpoint content: hits where the checkpoint has the same bytes");
  const Topology& t = key.topology;
  match.notes.push_back(fmt::format("hits a load at tp rank {} of {}, pp rank {} of {}", t.tp_rank, t.tp_size, t.pp_rank,
                                    t.pp_size));
  return match;
}

}  // namespace snapcache
