// A checkpoint file a SafetensorsFile mapped, as a StoredFile: where a load from the checkpoint
// finds the bytes of the tensors its loader handed out untouched (a tensor the file hands out, a
// share of its rows), so that, with the checkpoint off the page cache, the executor reads ahead
// what the post-load methods will read (host_path/read_ahead.h) in parallel instead of a page fault
// at a time. Reads go through the FileSystem that opened the file, by the descriptor that was
// mapped: the same file, whatever its path names later.
//
// The bytes are the file's only where the process never wrote them: the mapping is private and
// copy-on-write (a loader may write into a tensor it was handed). mark_checkpoint_storages asks
// the kernel which pages were copied (util/page_map.h) and marks only storages with none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/stored_file.h"

namespace snapcache::loaders {

class CheckpointFile final : public StoredFile {
 public:
  // Maps the open file `fd` of `size` bytes privately (copy-on-write) and registers the mapping,
  // so that mark_checkpoint_storages finds storages in it while the file lives.
  static Result<std::shared_ptr<CheckpointFile>> map(std::shared_ptr<FileSystem> fs, std::string path, UniqueFd fd,
                                                     std::uint64_t size);
  // Opens the file the user named at `path` (links followed, a regular file only) to read it,
  // without a mapping: nothing is registered (data() is null).
  static Result<std::shared_ptr<CheckpointFile>> open(std::shared_ptr<FileSystem> fs, std::string path);
  ~CheckpointFile() override;
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  // The private mapping's first byte: the file's byte 0 (null when opened without one).
  std::byte* data() const { return mapping_.data(); }

  std::string name() const override { return path_; }
  std::uint64_t size() const override { return size_; }
  std::uint64_t chunk_bytes() const override { return 0; }  // a checkpoint has no checksums of ours
  Status read(std::byte* out, std::uint64_t offset, std::uint64_t bytes) const override;
  Status check(std::uint64_t begin, std::uint64_t end, const std::byte* bytes) const override;
  Result<MappedRegion> map() const override;

 private:
  CheckpointFile(std::shared_ptr<FileSystem> fs, std::string path, UniqueFd fd, std::uint64_t size,
                 MappedRegion mapping);
  std::shared_ptr<FileSystem> fs_;
  std::string path_;
  UniqueFd fd_;
  std::uint64_t size_;
  MappedRegion mapping_;
};

// Sets HostStorage::file on each storage (with no file or pending conversion yet) whose bytes lie
// in the mapping of a live CheckpointFile and whose pages this process never wrote: the read-ahead
// may read them from the file. Storages the kernel cannot answer for are left as they are (read
// from memory). Returns the bytes marked.
std::uint64_t mark_checkpoint_storages(HostStorages& host);

}  // namespace snapcache::loaders
