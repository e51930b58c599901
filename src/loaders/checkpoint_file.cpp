#include "loaders/checkpoint_file.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "util/file_io.h"
#include "util/fmt.h"
#include "util/page_map.h"
#include "util/parallel.h"

namespace snapcache::loaders {
namespace {

// The live mappings of checkpoint files, by first byte. An entry goes before its mapping is
// unmapped (~CheckpointFile), and a storage found in a range keeps that mapping alive (a tensor of
// a SafetensorsFile holds its file), so an address found here is that file's byte.
class Mappings {
 public:
  void add(const std::shared_ptr<CheckpointFile>& file) {
    std::lock_guard lock(mutex_);
    by_begin_[reinterpret_cast<std::uintptr_t>(file->data())] = file;
  }
  void remove(const CheckpointFile* file) {
    std::lock_guard lock(mutex_);
    by_begin_.erase(reinterpret_cast<std::uintptr_t>(file->data()));
  }
  // The file whose mapping holds [data, data + bytes) whole, and where in it they begin.
  std::optional<StoredBytes> find(const std::byte* data, std::uint64_t bytes) const {
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    std::uintptr_t first = 0;
    std::weak_ptr<const CheckpointFile> candidate;
    {
      std::lock_guard lock(mutex_);
      auto it = by_begin_.upper_bound(begin);
      if (it == by_begin_.begin()) return std::nullopt;
      --it;
      first = it->first;
      candidate = it->second;
    }
    // Locked outside the mutex: if this were the file's last reference, letting it go here would
    // unregister it (~CheckpointFile), which takes the mutex.
    std::shared_ptr<const CheckpointFile> file = candidate.lock();
    const std::uint64_t offset = begin - first;
    if (!file || offset > file->size() || bytes > file->size() - offset) return std::nullopt;
    return StoredBytes{std::move(file), offset};
  }
  bool empty() const {
    std::lock_guard lock(mutex_);
    return by_begin_.empty();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::weak_ptr<const CheckpointFile>> by_begin_;
};

Mappings& mappings() {
  static Mappings* all = new Mappings();  // never destroyed: files may outlive static destruction
  return *all;
}

// The pagemap is read by this many threads for each GiB asked about (about 2 ms a GiB each).
constexpr std::uint64_t kPageMapBytesPerThread = 1ull << 30;

}  // namespace

Result<std::shared_ptr<CheckpointFile>> CheckpointFile::map(std::shared_ptr<FileSystem> fs, std::string path,
                                                            UniqueFd fd, std::uint64_t size) {
  auto region = fs->map(fd.get(), static_cast<std::size_t>(size), MapMode::copy_on_write_private);
  if (!region) return region.status().with_context(path);
  std::shared_ptr<CheckpointFile> file(
      new CheckpointFile(std::move(fs), std::move(path), std::move(fd), size, std::move(*region)));
  if (file->data() != nullptr) mappings().add(file);
  return file;
}

Result<std::shared_ptr<CheckpointFile>> CheckpointFile::open(std::shared_ptr<FileSystem> fs, std::string path) {
  auto fd = fs->open(path, OpenMode::read, Follow::yes);
  if (!fd) return fd.status();
  auto id = fs->fstat(fd->get());
  if (!id) return id.status().with_context(path);
  return std::shared_ptr<CheckpointFile>(
      new CheckpointFile(std::move(fs), std::move(path), std::move(*fd), id->size, MappedRegion()));
}

CheckpointFile::CheckpointFile(std::shared_ptr<FileSystem> fs, std::string path, UniqueFd fd, std::uint64_t size,
                               MappedRegion mapping)
    : fs_(std::move(fs)), path_(std::move(path)), fd_(std::move(fd)), size_(size), mapping_(std::move(mapping)) {}

CheckpointFile::~CheckpointFile() {
  if (data() != nullptr) mappings().remove(this);  // before the members unmap it
}

Status CheckpointFile::read(std::byte* out, std::uint64_t offset, std::uint64_t bytes) const {
  if (offset > size_ || bytes > size_ - offset)
    return Status(StatusCode::invalid_argument,
                  fmt::format("a read of {} bytes at {} reaches past the end of {}", bytes, offset, path_));
  // A checkpoint that shrank since it was mapped ends early: damaged, as a snapshot's file would be.
  Status st = read_all(*fs_, fd_.get(), out, bytes, offset);
  return st ? st : st.with_context("reading " + path_);
}

Status CheckpointFile::check(std::uint64_t, std::uint64_t, const std::byte*) const { return Status::ok(); }

Result<MappedRegion> CheckpointFile::map() const {
  return fs_->map(fd_.get(), static_cast<std::size_t>(size_), MapMode::read_only_shared);
}

std::uint64_t mark_checkpoint_storages(HostStorages& host) {
  if (mappings().empty()) return 0;
  struct Candidate {
    HostStorage* storage;
    StoredBytes at;
  };
  std::vector<Candidate> candidates;
  std::uint64_t asked = 0;
  for (HostStorage& s : host.storages) {
    if (s.file || s.pending || s.nbytes == 0) continue;
    if (auto at = mappings().find(s.data, s.nbytes)) {
      candidates.push_back({&s, std::move(*at)});
      asked += s.nbytes;
    }
  }
  if (candidates.empty()) return 0;
  const std::optional<util::PageMap> pages = util::PageMap::open();
  if (!pages) return 0;
  std::vector<char> unwritten(candidates.size(), 0);
  const std::size_t threads =
      std::clamp<std::size_t>(asked / kPageMapBytesPerThread, 1, std::min<std::size_t>(8, util::worker_count()));
  (void)util::parallel_for(candidates.size(), threads, [&](std::size_t i) {
    const std::optional<bool> copied = pages->copied_on_write(candidates[i].storage->data, candidates[i].storage->nbytes);
    unwritten[i] = copied.has_value() && !*copied;
    return Status::ok();
  });
  std::uint64_t marked = 0;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (unwritten[i]) {
      candidates[i].storage->file = std::move(candidates[i].at);
      marked += candidates[i].storage->nbytes;
    }
  return marked;
}

}  // namespace snapcache::loaders
