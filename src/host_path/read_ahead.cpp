#include "host_path/read_ahead.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "methods/named.h"
#include "snapcache/extend/stored_file.h"
#include "torch/exceptions.h"
#include "util/page_cache.h"
#include "util/parallel.h"

namespace snapcache::host_path {
namespace {

// Reads in flight at once. A page fault or a small read waits for the disk's latency; on the GPU
// machine's virtual disk 16 workers reached its bandwidth (bench/disk_read_bench.cpp), and more
// reads of a few KiB each keep its queue full.
constexpr std::size_t kReaders = 32;
// Read in pieces of at most this: one piece per read, so large storages spread over the readers.
constexpr std::uint64_t kPieceBytes = 4ull << 20;
// Ranges closer than this are read as one: a read of the gap costs less than a second one.
constexpr std::uint64_t kMergeGap = 256ull << 10;
// Pages sampled per storage to decide whether it is already in the page cache.
constexpr std::size_t kSamplesPerStorage = 8;

struct Range {
  const StoredFile* file;
  std::uint64_t begin, end;
};

// The served storages the methods read, as indices into served.storages; nullopt when one of them
// may read any.
Result<std::optional<std::set<std::size_t>>> storages_read(const std::vector<std::shared_ptr<PostLoadMethod>>& post_load,
                                                           const NamedTensors& tensors, const HostStorages& served) {
  std::set<std::size_t> read;
  for (const auto& method : post_load) {
    auto named = guarded([&]() -> Result<std::optional<std::vector<std::string>>> {
      if (!method->properties().reads_only_targets) return std::optional<std::vector<std::string>>();
      return std::optional(method->targets(tensors));
    });
    if (!named) return named.status();
    if (!*named) return std::optional<std::set<std::size_t>>();
    const auto wanted = methods::name_set(**named);
    for (std::size_t i = 0; i < tensors.size() && i < served.storage_of.size(); ++i)
      if (wanted.count(tensors[i].first) != 0) read.insert(served.storage_of[i]);
  }
  return std::optional(std::move(read));
}

// Piece-sized buffers for the readers, made as they are first needed and reused.
class Buffers {
 public:
  std::unique_ptr<std::byte[]> take() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return std::make_unique_for_overwrite<std::byte[]>(kPieceBytes);
    auto b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give_back(std::unique_ptr<std::byte[]> b) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(b));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<std::byte[]>> free_;
};

// Reads each piece into the page cache on kReaders threads, in order, adding the bytes read to
// `bytes`; hands out no more once `stop` is set or a read fails.
void read_pieces(const std::vector<Range>& pieces, const std::atomic<bool>* stop, std::atomic<std::uint64_t>& bytes) {
  Buffers buffers;  // what is read lands in the page cache; these only receive a copy
  (void)util::parallel_for(pieces.size(), kReaders, [&](std::size_t i) -> Status {
    if (stop != nullptr && stop->load()) return Status(StatusCode::busy, "stopped");
    const Range& piece = pieces[i];
    auto buffer = buffers.take();
    Status st = piece.file->read(buffer.get(), piece.begin, piece.end - piece.begin);
    buffers.give_back(std::move(buffer));
    if (st) bytes += piece.end - piece.begin;
    return st;
  });
}

}  // namespace

std::uint64_t read_ahead_for_post_load(const std::vector<std::shared_ptr<PostLoadMethod>>& post_load,
                                       const NamedTensors& tensors, const HostStorages& served) {
  auto read = storages_read(post_load, tensors, served);
  if (!read) return 0;  // the post-load stage calls the method again and reports its error
  std::vector<Range> ranges;
  for (std::size_t s = 0; s < served.storages.size(); ++s) {
    if (*read && (*read)->count(s) == 0) continue;
    const HostStorage& storage = served.storages[s];
    if (!storage.file || storage.nbytes == 0) continue;
    const std::optional<double> resident = util::resident_share(storage.data, storage.nbytes, kSamplesPerStorage);
    if (resident && *resident >= 1.0) continue;
    ranges.push_back({storage.file->file.get(), storage.file->offset, storage.file->offset + storage.nbytes});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.file, a.begin) < std::tie(b.file, b.begin);
  });
  std::vector<Range> pieces;
  for (std::size_t i = 0; i < ranges.size();) {
    Range merged = ranges[i];
    for (++i; i < ranges.size() && ranges[i].file == merged.file && ranges[i].begin <= merged.end + kMergeGap; ++i)
      merged.end = std::max(merged.end, ranges[i].end);
    for (std::uint64_t at = merged.begin; at < merged.end; at += kPieceBytes)
      pieces.push_back({merged.file, at, std::min(merged.end, at + kPieceBytes)});
  }
  std::atomic<std::uint64_t> bytes{0};
  read_pieces(pieces, nullptr, bytes);
  return bytes.load();
}

FileReadAhead::FileReadAhead(std::vector<std::shared_ptr<const StoredFile>> files) : files_(std::move(files)) {
  reader_ = std::thread([this] {
    std::vector<Range> pieces;
    for (const auto& file : files_)
      for (std::uint64_t at = 0; at < file->size(); at += kPieceBytes)
        pieces.push_back({file.get(), at, std::min(file->size(), at + kPieceBytes)});
    read_pieces(pieces, &stopped_, bytes_);
  });
}

FileReadAhead::~FileReadAhead() { (void)stop(); }

std::uint64_t FileReadAhead::stop() {
  stopped_ = true;
  if (reader_.joinable()) reader_.join();
  return bytes_.load();
}

}  // namespace snapcache::host_path
