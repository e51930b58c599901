// Publication: write a whole entry into tmp/, make it durable, then rename it into entries/ in one
// step. A crash at any moment leaves either no entry or a whole one; a dead writer's leftovers in
// tmp/ are recognisable (nobody holds their lease lock) and collected.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>
#include <thread>

#include "util/fmt.h"

#include "format/manifest.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "snapcache/version.h"
#include "store/chunk_hashing.h"
#include "store/entry_commit.h"
#include "store/layout.h"
#include "store/miss_record.h"
#include "store/touched_checkpoint.h"
#include "util/align.h"
#include "util/clock.h"
#include "util/file_io.h"
#include "util/hash.h"
#include "util/parallel.h"

namespace snapcache {
namespace {

using util::align_up;

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "";
  return buf.data();
}

// Hands `emit` the bytes of chunk `chunk` of the data file in order (storage bytes and the zero
// padding between them), each piece with its offset in the file.
template <typename Emit>
Status walk_chunk(const DataFile& file, const std::vector<StorageRecord>& layout, std::span<const StorageSource> sources,
                  std::uint64_t chunk, Emit&& emit) {
  static const std::array<char, kStorageAlignment> zeros{};
  const format::ByteRange range = format::chunk_range(file, chunk);
  const std::uint64_t begin = range.offset;
  const std::uint64_t end = range.offset + range.size;
  // First storage that ends after `begin`.
  auto it = std::partition_point(layout.begin(), layout.end(),
                                 [&](const StorageRecord& s) { return s.offset + s.nbytes <= begin; });
  std::uint64_t pos = begin;
  for (; pos < end; ++it) {
    std::uint64_t next_start = it == layout.end() ? end : std::min(it->offset, end);
    while (pos < next_start) {  // padding
      std::uint64_t n = std::min<std::uint64_t>(next_start - pos, zeros.size());
      SNAPCACHE_RETURN_IF_ERROR(emit(zeros.data(), n, pos));
      pos += n;
    }
    if (it == layout.end() || pos >= end) break;
    std::uint64_t stop = std::min(it->offset + it->nbytes, end);
    if (stop > pos) {
      const auto* src = static_cast<const std::byte*>(sources[static_cast<std::size_t>(it - layout.begin())].data);
      SNAPCACHE_RETURN_IF_ERROR(emit(src + (pos - it->offset), stop - pos, pos));
      pos = stop;
    }
  }
  return Status::ok();
}

// Writes chunk `chunk` and returns its XXH3-64. Hashing happens on the same thread right beside the
// write, so N threads overlap hashing with I/O and publication costs about what writing alone
// costs. With `expected` (sources their owner may write meanwhile) each piece is read once, into
// `held`, then hashed and written from there, so the hash is of the bytes written; a chunk that is
// not the fingerprinted bytes fails the publication.
Result<std::uint64_t> write_chunk(FileSystem& fs, int fd, const DataFile& file,
                                  const std::vector<StorageRecord>& layout, std::span<const StorageSource> sources,
                                  std::uint64_t chunk, const std::uint64_t* expected) {
  util::Hasher64 hasher;
  // Kept for the thread's life: fresh memory for each chunk would cost its page faults every time.
  thread_local std::vector<std::byte> held;
  SNAPCACHE_RETURN_IF_ERROR(walk_chunk(file, layout, sources, chunk, [&](const void* data, std::uint64_t size,
                                                                         std::uint64_t offset) -> Status {
    if (expected != nullptr) {
      const auto* bytes = static_cast<const std::byte*>(data);
      held.assign(bytes, bytes + size);
      data = held.data();
    }
    hasher.update(data, size);
    return write_all(fs, fd, data, size, offset);
  }));
  const std::uint64_t written = hasher.digest();
  if (expected != nullptr && written != *expected)
    return Status(StatusCode::mismatch,
                  fmt::format("chunk {} of the data changed after it was fingerprinted: its owner wrote into the "
                              "tensors while they were published",
                              chunk));
  return written;
}

// The data file of `sources`, one after another, each at an aligned offset; its chunk hashes
// sized, not yet computed.
Result<std::pair<DataFile, std::vector<StorageRecord>>> plan_data_file(std::span<const StorageSource> sources,
                                                                       std::uint64_t chunk_size) {
  if (chunk_size == 0) return Status(StatusCode::invalid_argument, "chunk size must be positive");
  DataFile file;
  file.name = store::data_file_name(0);
  file.chunk_size = chunk_size;
  std::vector<StorageRecord> storages;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].nbytes > 0 && sources[i].data == nullptr)
      return Status(StatusCode::invalid_argument, fmt::format("storage {} has no data", i));
    offset = align_up(offset, kStorageAlignment);
    storages.push_back({0, offset, sources[i].nbytes});
    offset += sources[i].nbytes;
  }
  file.size = offset;
  file.identity.size = offset;
  file.chunk_hashes.resize(format::chunk_count(file));
  return std::pair{std::move(file), std::move(storages)};
}

// The manifest of a publication with its storages laid out in one data file, each at an aligned
// offset; chunk hashes and the file identity are filled in as the data is written.
Result<Manifest> plan_manifest(const Key& key, std::span<const StorageSource> sources,
                               std::vector<TensorRecord> tensors, std::uint64_t chunk_size) {
  Manifest m;
  m.key = key_identity(key);  // what the manifest stores and decodes to
  m.creation = {util::now_unix_ns(), kVersion, host_name(), static_cast<std::uint32_t>(::getpid())};
  auto planned = plan_data_file(sources, chunk_size);
  if (!planned) return planned.status();
  m.files.push_back(std::move(planned->first));
  m.storages = std::move(planned->second);
  m.tensors = std::move(tensors);
  if (Status st = format::validate_layout(m); !st)
    return Status(StatusCode::invalid_argument, "invalid tensor layout: " + st.message());
  return m;
}

// Writes the data file reserved for it (hashing each chunk as it goes) and records the identity
// it has once durable: a load that sees that identity again trusts these hashes.
Status write_data(FileSystem& fs, int data, Manifest& m, std::span<const StorageSource> sources, std::size_t threads,
                  const std::vector<std::uint64_t>& expected) {
  DataFile& df = m.files[0];
  if (!expected.empty() && expected.size() != df.chunk_hashes.size())
    return Status(StatusCode::invalid_argument, fmt::format("{} expected chunk hashes for {} chunks", expected.size(),
                                                            df.chunk_hashes.size()));
  SNAPCACHE_RETURN_IF_ERROR(util::parallel_for(df.chunk_hashes.size(), threads, [&](std::size_t c) -> Status {
    auto h = write_chunk(fs, data, df, m.storages, sources, c, expected.empty() ? nullptr : &expected[c]);
    if (!h) return h.status();
    df.chunk_hashes[c] = *h;
    return Status::ok();
  }));
  return store::seal_data_file(fs, data, df);
}

std::size_t threads_of(const PublishOptions& options) {
  return options.threads ? options.threads : util::worker_count();
}

}  // namespace

Result<std::vector<std::uint64_t>> fingerprint_sources(std::span<const StorageSource> sources,
                                                       const PublishOptions& options) {
  auto planned = plan_data_file(sources, options.chunk_size);
  if (!planned) return planned.status();
  DataFile& file = planned->first;
  const std::vector<StorageRecord>& storages = planned->second;
  SNAPCACHE_RETURN_IF_ERROR(util::parallel_for(file.chunk_hashes.size(), threads_of(options), [&](std::size_t c) {
    util::Hasher64 hasher;
    (void)walk_chunk(file, storages, sources, c, [&](const void* data, std::uint64_t size, std::uint64_t) {
      hasher.update(data, size);
      return Status::ok();
    });
    file.chunk_hashes[c] = hasher.digest();
    return Status::ok();
  }));
  return std::move(file.chunk_hashes);
}

PublishOutcome Store::publish(const Key& key, std::span<const StorageSource> sources,
                              std::vector<TensorRecord> tensors) {
  return publish(key, sources, std::move(tensors), PublishOptions{});
}

PublishOutcome Store::publish(const Key& key, std::span<const StorageSource> sources,
                              std::vector<TensorRecord> tensors, const PublishOptions& options) {
  store::EntryCommit commit(*this, key, {.kind = EntryOriginKind::published});
  if (!commit.takes_entries()) return commit.outcome();
  auto planned = plan_manifest(key, sources, std::move(tensors), options.chunk_size);
  if (!planned) return commit.finish(PublishResult::failed, planned.status());
  Manifest& m = *planned;
  auto entry = commit.begin(m);
  if (!entry) return commit.outcome();
  UniqueFd data = entry->take_data_file(0);
  if (Status st = write_data(*fs_, data.get(), m, sources, threads_of(options), options.expected_chunk_hashes); !st) {
    if (st.code() == StatusCode::mismatch && !options.expected_chunk_hashes.empty())
      store::record_changed_sources(*fs_, config().directory, key, key_id(key), st.message());
    return commit.finish(PublishResult::failed, st.with_context("publish"));
  }
  commit.commit(*entry, m);
  // After the entry is visible: what lets a touched checkpoint be served by it later.
  if (commit.outcome().result == PublishResult::published) store::record_checkpoint_digests(*this, key);
  return commit.outcome();
}

}  // namespace snapcache
