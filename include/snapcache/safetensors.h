// safetensors files: a strict reader (the format's validation rules, clear errors on malformed
// files) and a writer. The reader maps the file; each tensor it hands out owns its own storage
// over the mapping and keeps the mapping alive. A load from the checkpoint reads the bytes of the
// tensors a loader hands on untouched from the file itself, through the FileSystem the file was
// opened with (docs/loading.md).
//
// Format: header_size:u64 (little-endian) | header: JSON, header_size bytes | data
//   header = { "__metadata__": {str: str}?, NAME: {"dtype": D, "shape": [n...], "data_offsets": [b, e]} ... }
//   offsets are relative to the data section; tensors tile it exactly (no gaps, no overlaps).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/safetensors_header.h"

namespace snapcache {

class StoredFile;

class SNAPCACHE_API SafetensorsFile {
 public:
  // Opens and validates; malformed files give invalid_argument naming the file and the problem.
  static Result<std::shared_ptr<SafetensorsFile>> open(const std::string& path,
                                                       std::shared_ptr<FileSystem> fs = posix_file_system());

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // A CPU tensor over the (private, copy-on-write) mapping; not_found if absent.
  Result<at::Tensor> tensor(const std::string& name) const;
  // Every tensor, in file order.
  NamedTensors tensors() const;

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<StoredFile> file_;  // the open file and its mapping
  std::byte* mapped_ = nullptr;        // the file's byte 0 in the mapping
  std::uint64_t data_start_ = 0;
};

// Writes tensors (made contiguous) in the safetensors format, through a temporary file.
SNAPCACHE_API Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata = {},
                         std::shared_ptr<FileSystem> fs = posix_file_system());

}  // namespace snapcache
