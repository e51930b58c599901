// A snapshot's data file as a StoredFile: what the upload engine reads instead of the mapping.
// Reads go through the store's FileSystem by the descriptor the lookup checked; chunks are checked
// against the manifest by the store's one chunk check, which names the tensors in a bad chunk.
#include "snapcache/extend/stored_file.h"

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "snapcache/log.h"
#include "snapcache/manifest.h"
#include "store/chunk_hashing.h"
#include "store/snapshot_impl.h"
#include "util/file_io.h"
#include "util/fmt.h"
#include "util/hash.h"
#include "util/page_cache.h"

namespace snapcache {

StoredFile::~StoredFile() = default;

Status StoredFile::read_checked(std::byte* out, std::uint64_t begin, std::uint64_t end) const {
  if (end < begin)
    return Status(StatusCode::invalid_argument, fmt::format("bytes [{}, {}) of {} end before they begin", begin, end, name()));
  SNAPCACHE_RETURN_IF_ERROR(read(out, begin, end - begin));
  return check(begin, end, out);
}

Status StoredFile::read_checked_uncached(std::byte*, std::uint64_t, std::uint64_t) const {
  return Status(StatusCode::unsupported, name() + " cannot be read around the page cache");
}

std::optional<double> StoredFile::resident_share(std::uint64_t, std::uint64_t) const { return std::nullopt; }

namespace {

// A chunk is read and hashed in pieces of this size: each piece is hashed right after the read
// wrote it, while it is in the core's cache (1-2 MiB of L2 on the GPU machines' CPUs), so the
// chunk crosses memory once where read-then-hash crossed it twice.
constexpr std::uint64_t kHashedPiece = 512ull << 10;

class SnapshotDataFile final : public StoredFile {
 public:
  SnapshotDataFile(std::shared_ptr<Snapshot> snapshot, const Snapshot::Impl& impl, std::uint32_t file)
      : snapshot_(std::move(snapshot)), impl_(impl), file_(file), record_(impl.manifest.files.at(file)) {}

  std::string name() const override { return snapshot_->data_file_path(file_); }
  std::uint64_t size() const override { return record_.size; }
  std::uint64_t chunk_bytes() const override { return record_.chunk_size; }

  Status read(std::byte* out, std::uint64_t offset, std::uint64_t bytes) const override {
    if (offset > record_.size || bytes > record_.size - offset)
      return Status(StatusCode::invalid_argument,
                    fmt::format("a read of {} bytes at {} reaches past the end of {}", bytes, offset, name()));
    Status st = read_all(*impl_.fs, descriptor(), out, bytes, offset);
    return st ? st : st.with_context("reading " + name());
  }

  Status check(std::uint64_t begin, std::uint64_t end, const std::byte* bytes) const override {
    return for_each_chunk(begin, end, [&](std::uint64_t c, std::uint64_t at, std::uint64_t n) {
      return store::check_chunk(impl_.manifest, file_, c, util::xxh3_64(bytes + (at - begin), n));
    });
  }

  Status read_checked(std::byte* out, std::uint64_t begin, std::uint64_t end) const override {
    return read_and_hash(out, begin, end, [&](std::byte* to, std::uint64_t at, std::uint64_t bytes) {
      return read(to, at, bytes);
    });
  }

  Status read_checked_uncached(std::byte* out, std::uint64_t begin, std::uint64_t end) const override {
    if (reinterpret_cast<std::uintptr_t>(out) % kUncachedAlignment != 0 || begin % kUncachedAlignment != 0 ||
        record_.chunk_size % kUncachedAlignment != 0 || kHashedPiece % kUncachedAlignment != 0)
      return Status(StatusCode::unsupported,
                    fmt::format("{} is read around the page cache only in reads aligned to {} bytes", name(),
                                kUncachedAlignment));
    auto fd = uncached_descriptor();
    if (!fd) return fd.status();
    Status st = read_and_hash(out, begin, end, [&](std::byte* to, std::uint64_t at, std::uint64_t bytes) {
      if (at > record_.size || bytes > record_.size - at)
        return Status(StatusCode::invalid_argument,
                      fmt::format("a read of {} bytes at {} reaches past the end of {}", bytes, at, name()));
      Status read = read_all_uncached(*impl_.fs, *fd, to, bytes, at);
      return read ? read : read.with_context("reading " + name() + " around the page cache");
    });
    // The disk refused the alignment (a block larger than kUncachedAlignment): so it will refuse
    // every read, and the rest of the file is read through the page cache.
    if (st.code() == StatusCode::unsupported) refuse_uncached(st);
    return st;
  }

  Result<MappedRegion> map() const override {
    return impl_.fs->map(descriptor(), static_cast<std::size_t>(record_.size), MapMode::read_only_shared);
  }

  // Asked of the lookup's private mapping, whose untouched pages are the page cache's.
  std::optional<double> resident_share(std::uint64_t begin, std::uint64_t end) const override {
    const MappedRegion& mapping = impl_.mappings.at(file_);
    end = std::min<std::uint64_t>({end, mapping.size(), record_.size});
    if (begin >= end) return 1.0;  // nothing to read
    // A page per kHashedPiece, 8 to 1,024 of them: a staging unit's 16 cost microseconds, and say
    // as much about a unit as 1,024 say about a whole file.
    const std::size_t samples = std::clamp<std::uint64_t>((end - begin) / kHashedPiece, 8, 1024);
    return util::resident_share(mapping.data() + begin, end - begin, samples);
  }

 private:
  int descriptor() const { return impl_.data_files.at(file_).get(); }

  // The file reopened around the page cache, once; what refused it is kept and answered
  // (unsupported) to every later read, which then goes through the page cache.
  Result<int> uncached_descriptor() const {
    std::lock_guard lock(uncached_mutex_);
    if (!uncached_tried_) {
      uncached_tried_ = true;
      auto reopened = impl_.fs->reopen_uncached(descriptor());
      if (reopened) uncached_ = std::move(*reopened);
      else refuse_uncached_locked(reopened.status());
    }
    if (!uncached_refused_.is_ok())
      return Status(StatusCode::unsupported,
                    fmt::format("{} cannot be read around the page cache: {}", name(), uncached_refused_.message()),
                    uncached_refused_.sys_errno());
    return uncached_.get();
  }
  void refuse_uncached(const Status& why) const {
    std::lock_guard lock(uncached_mutex_);
    refuse_uncached_locked(why);
  }
  // Said once: a load's workers may meet the same refusal together. The descriptor stays open
  // while a worker may still be reading through it; it closes with the file.
  void refuse_uncached_locked(const Status& why) const {
    if (!uncached_refused_.is_ok()) return;
    uncached_refused_ = why;
    log(LogLevel::info, fmt::format("{} is read through the page cache: {}", name(), why.to_string()));
  }

  // Reads [begin, end), whole chunks, by `read_piece(to, offset, bytes)` in pieces of
  // kHashedPiece, hashing each piece as it arrives, and checks each chunk.
  template <class ReadPiece>
  Status read_and_hash(std::byte* out, std::uint64_t begin, std::uint64_t end, ReadPiece&& read_piece) const {
    return for_each_chunk(begin, end, [&](std::uint64_t c, std::uint64_t at, std::uint64_t n) {
      util::Hasher64 hash;
      for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t piece = std::min(kHashedPiece, n - done);
        std::byte* to = out + (at - begin) + done;
        SNAPCACHE_RETURN_IF_ERROR(read_piece(to, at + done, piece));
        hash.update(to, piece);
        done += piece;
      }
      return store::check_chunk(impl_.manifest, file_, c, hash.digest());
    });
  }

  // Calls fn(chunk, offset, bytes) for each chunk of [begin, end), which must be whole chunks (the
  // last may end at the file's end), in order, until one fails.
  template <class Fn>
  Status for_each_chunk(std::uint64_t begin, std::uint64_t end, Fn&& fn) const {
    if (record_.chunk_size == 0 || begin % record_.chunk_size != 0 || end > record_.size || end < begin)
      return Status(StatusCode::invalid_argument,
                    fmt::format("bytes [{}, {}) of {} are not whole checksum chunks", begin, end, name()));
    for (std::uint64_t c = begin / record_.chunk_size; c < store::chunk_count(record_); ++c) {
      const auto [at, n] = store::chunk_range(record_, c);
      if (at >= end) break;
      if (at + n > end)
        return Status(StatusCode::invalid_argument,
                      fmt::format("bytes [{}, {}) of {} end inside chunk {}", begin, end, name(), c));
      SNAPCACHE_RETURN_IF_ERROR(fn(c, at, n));
    }
    return Status::ok();
  }

  std::shared_ptr<Snapshot> snapshot_;  // keeps the descriptor, the manifest and the lease alive
  const Snapshot::Impl& impl_;
  std::uint32_t file_;
  const DataFile& record_;
  mutable std::mutex uncached_mutex_;
  mutable bool uncached_tried_ = false;
  mutable UniqueFd uncached_;
  mutable Status uncached_refused_;
};

}  // namespace

std::vector<std::shared_ptr<const StoredFile>> stored_files(const std::shared_ptr<Snapshot>& snapshot) {
  std::vector<std::shared_ptr<const StoredFile>> out;
  const Snapshot::Impl& impl = snapshot->impl();
  for (std::uint32_t i = 0; i < impl.manifest.files.size(); ++i)
    out.push_back(std::make_shared<SnapshotDataFile>(snapshot, impl, i));
  return out;
}

}  // namespace snapcache
