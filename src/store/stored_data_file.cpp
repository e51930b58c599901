// A snapshot's data file as a StoredFile: what the upload engine reads instead of the mapping.
// Reads go through the store's FileSystem by the descriptor the lookup checked; chunks are checked
// against the manifest by the store's one chunk check, which names the tensors in a bad chunk.
#include "snapcache/extend/stored_file.h"

#include <algorithm>

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

std::optional<double> StoredFile::resident_share() const { return std::nullopt; }

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
    return for_each_chunk(begin, end, [&](std::uint64_t c, std::uint64_t at, std::uint64_t n) {
      util::Hasher64 hash;
      for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t piece = std::min(kHashedPiece, n - done);
        std::byte* to = out + (at - begin) + done;
        SNAPCACHE_RETURN_IF_ERROR(read(to, at + done, piece));
        hash.update(to, piece);
        done += piece;
      }
      return store::check_chunk(impl_.manifest, file_, c, hash.digest());
    });
  }

  Result<MappedRegion> map() const override {
    return impl_.fs->map(descriptor(), static_cast<std::size_t>(record_.size), MapMode::read_only_shared);
  }

  // Asked of the lookup's private mapping, whose untouched pages are the page cache's.
  std::optional<double> resident_share() const override {
    const MappedRegion& mapping = impl_.mappings.at(file_);
    return util::resident_share(mapping.data(), std::min<std::uint64_t>(mapping.size(), record_.size));
  }

 private:
  int descriptor() const { return impl_.data_files.at(file_).get(); }

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
