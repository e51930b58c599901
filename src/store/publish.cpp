// Publication: write a whole entry into tmp/, make it durable, then rename it into entries/ in one
// step. A crash at any moment leaves either no entry or a whole one; a dead writer's leftovers in
// tmp/ are recognisable (nobody holds their lease lock) and collected.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <thread>

#include "util/fmt.h"

#include "format/manifest.h"
#include "snapcache/store.h"
#include "snapcache/log.h"
#include "snapcache/version.h"
#include "store/layout.h"
#include "store/stats.h"
#include "util/hash.h"
#include "util/parallel.h"
#include "snapcache/text.h"

namespace snapcache {
namespace {

store::Counter counter_of(PublishResult result) {
  switch (result) {
    case PublishResult::published: return store::Counter::published;
    case PublishResult::already_present: return store::Counter::already_present;
    case PublishResult::skipped: return store::Counter::publish_skipped;
    case PublishResult::failed: return store::Counter::publish_failed;
  }
  return store::Counter::publish_failed;
}

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "";
  return buf.data();
}

// Writes chunk `chunk` of the data file (storage bytes and the zero padding between them) and
// returns its XXH3-64. Hashing happens on the same thread right beside the write, so N threads
// overlap hashing with I/O and publication costs about what writing alone costs.
Result<std::uint64_t> write_chunk(FileSystem& fs, int fd, const DataFile& file,
                                  const std::vector<StorageRecord>& layout,
                                  std::span<const StorageSource> sources, std::uint64_t chunk) {
  static const std::array<char, kStorageAlignment> zeros{};
  const std::uint64_t begin = chunk * file.chunk_size;
  const std::uint64_t end = std::min(begin + file.chunk_size, file.size);
  util::Hasher64 hasher;
  auto emit = [&](const void* data, std::uint64_t size, std::uint64_t offset) -> Status {
    hasher.update(data, size);
    return write_all(fs, fd, data, size, offset);
  };
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
  return hasher.digest();
}

// File timestamps come from a coarse clock (one scheduler tick, up to 10 ms). A change made in the
// same tick as the identity we just recorded would keep that identity, and a later load would
// trust stale checksums. Waiting until the clock has moved on makes every later write visible as
// a new mtime/ctime. Costs at most ~20 ms per publication.
void settle_timestamps(const FileIdentity& id) {
  constexpr std::int64_t kTickMarginNs = 20'000'000;
  const std::int64_t stamp = std::max(id.mtime_ns, id.ctime_ns);
  const std::int64_t wait = stamp + kTickMarginNs - store::now_unix_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(wait, kTickMarginNs)));
}

}  // namespace

PublishOutcome Store::publish(const Key& key, std::span<const StorageSource> sources,
                              std::vector<TensorRecord> tensors, const PublishOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  PublishOutcome out;
  out.entry_id = key_id(key);
  auto finish = [&](PublishResult result, Status status) {
    out.result = result;
    out.status = std::move(status);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    LogLevel level = result == PublishResult::failed ? LogLevel::warn : LogLevel::info;
    if (result == PublishResult::published)
      log(level, fmt::format("publish {}: entry {} ({}, {:.2f} s, {:.2f} GB/s)", key.component,
                             store::short_id(out.entry_id), format_size(out.bytes), out.seconds,
                             out.seconds > 0 ? static_cast<double>(out.bytes) / out.seconds / 1e9 : 0.0));
    else
      log(level, fmt::format("publish {}: {} ({})", key.component, to_string(result), out.status.to_string()));
    if (config_.enabled()) store::bump_counter(config_.directory, counter_of(result));
    return out;
  };
  if (!config_.enabled())
    return finish(PublishResult::skipped, {StatusCode::disabled, "the cache is disabled by configuration"});
  if (options.chunk_size == 0)
    return finish(PublishResult::failed, {StatusCode::invalid_argument, "chunk size must be positive"});

  // Lay the storages out in one data file, each at an aligned offset.
  Manifest m;
  m.key = key;
  m.creation = {store::now_unix_ns(), kVersion, host_name(), static_cast<std::uint32_t>(::getpid())};
  DataFile file;
  file.name = store::data_file_name(0);
  file.chunk_size = options.chunk_size;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].nbytes > 0 && sources[i].data == nullptr)
      return finish(PublishResult::failed, {StatusCode::invalid_argument, fmt::format("storage {} has no data", i)});
    offset = align_up(offset, kStorageAlignment);
    m.storages.push_back({0, offset, sources[i].nbytes});
    offset += sources[i].nbytes;
  }
  file.size = offset;
  file.identity.size = offset;
  file.chunk_hashes.resize((file.size + file.chunk_size - 1) / file.chunk_size);
  m.files.push_back(file);
  m.tensors = std::move(tensors);
  if (Status st = format::validate_layout(m); !st)
    return finish(PublishResult::failed, {StatusCode::invalid_argument, "invalid tensor layout: " + st.message()});
  out.bytes = file.size;

  const std::string final_path = entry_path(out.entry_id);
  if (fs_->stat(final_path + "/" + store::kManifestFile))
    return finish(PublishResult::already_present, {});

  collect_garbage();
  const std::uint64_t manifest_estimate = 4096 + 64 * m.tensors.size() + 8 * file.chunk_hashes.size();
  if (Status st = make_room(file.size + manifest_estimate, &out.evicted); !st)
    return finish(PublishResult::skipped, st);

  // Write the entry into tmp/, holding its lease exclusively so collectors leave it alone.
  const std::string tmp = config_.directory + "/" + store::kTmpDir + "/" + out.entry_id + "." + store::unique_suffix();
  auto fail = [&](const Status& st) {
    (void)remove_tree(*fs_, tmp);
    return finish(PublishResult::failed, st.with_context("publish"));
  };
  if (Status st = fs_->make_directory(tmp); !st) return fail(st);
  auto lease = fs_->open(tmp + "/" + store::kLeaseFile, OpenMode::create_exclusive);
  if (!lease) return fail(lease.status());
  if (Status st = fs_->lock(lease->get(), LockMode::exclusive, LockWait::no_wait); !st) return fail(st);

  auto data = fs_->open(tmp + "/" + file.name, OpenMode::create_exclusive);
  if (!data) return fail(data.status());
  if (Status st = fs_->allocate(data->get(), file.size); !st) return fail(st);
  std::size_t threads = options.threads ? options.threads : util::worker_count();
  DataFile& df = m.files[0];
  Status written = util::parallel_for(df.chunk_hashes.size(), threads, [&](std::size_t c) -> Status {
    auto h = write_chunk(*fs_, data->get(), df, m.storages, sources, c);
    if (!h) return h.status();
    df.chunk_hashes[c] = *h;
    return Status::ok();
  });
  if (!written) return fail(written);
  if (Status st = fs_->fsync(data->get()); !st) return fail(st);
  // The identity the data has now, durable; a load that sees it again trusts these hashes.
  auto identity = fs_->fstat(data->get());
  if (!identity) return fail(identity.status());
  if (identity->size != df.size)
    return fail({StatusCode::io_error, fmt::format("data file is {} bytes after writing {}", identity->size, df.size)});
  df.identity = *identity;
  df.identity.is_directory = false;
  settle_timestamps(df.identity);

  std::string manifest_bytes = format::encode_manifest(m);
  auto mf = fs_->open(tmp + "/" + store::kManifestFile, OpenMode::create_exclusive);
  if (!mf) return fail(mf.status());
  if (Status st = write_all(*fs_, mf->get(), manifest_bytes.data(), manifest_bytes.size(), 0); !st) return fail(st);
  if (Status st = fs_->fsync(mf->get()); !st) return fail(st);
  if (Status st = fs_->fsync(lease->get()); !st) return fail(st);
  if (Status st = fs_->fsync_directory(tmp); !st) return fail(st);

  // Commit. If another process published the same key first, its entry stands and ours goes.
  const std::string entries = config_.directory + "/" + store::kEntriesDir;
  if (Status st = fs_->rename(tmp, final_path); !st) {
    if (st.sys_errno() == EEXIST || st.sys_errno() == ENOTEMPTY) {
      (void)remove_tree(*fs_, tmp);
      return finish(PublishResult::already_present, {});
    }
    return fail(st);
  }
  if (Status st = fs_->fsync_directory(entries); !st) {
    // The entry is complete and visible; only its durability across a power cut is in doubt.
    log(LogLevel::warn, "publish: " + st.to_string());
  }
  return finish(PublishResult::published, {});
}

}  // namespace snapcache
