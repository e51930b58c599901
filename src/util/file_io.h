// Helpers composed from FileSystem calls only, so a fault injected into the FileSystem reaches
// them too. Private to the library: users get the FileSystem seam, not these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "snapcache/file_system.h"

namespace snapcache {

// Loop until every byte moved: FileSystem::pwrite/pread may transfer fewer bytes than asked.
Status write_all(FileSystem& fs, int fd, const void* data, std::size_t size, std::uint64_t offset);
// A file that ends before `size` bytes is damaged.
Status read_all(FileSystem& fs, int fd, void* data, std::size_t size, std::uint64_t offset);
Result<std::string> read_file(FileSystem& fs, const std::string& path);
// Writes `path` through an AtomicFile (see util/atomic_file.h): readers see old or new, never half.
Status write_file_atomic(FileSystem& fs, const std::string& path, const std::string& contents);
// Removes a directory tree; a missing path is fine.
Status remove_tree(FileSystem& fs, const std::string& path);
// Sum of file sizes below `path`; a file removed while counting counts as nothing.
Result<std::uint64_t> tree_size(FileSystem& fs, const std::string& path);
// Creates `path` and missing parents.
Status make_directories(FileSystem& fs, const std::string& path);

// Unique among processes and threads on this host: "<pid>-<counter>-<random>". For names of
// temporary files and directories that several writers may create side by side.
std::string unique_suffix();

}  // namespace snapcache
