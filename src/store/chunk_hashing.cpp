#include "store/chunk_hashing.h"

#include "util/fmt.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "format/manifest.h"
#include "util/file_io.h"
#include "util/hash.h"
#include "util/parallel.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/manifest.h"

namespace snapcache::store {

RehashResult rehash_files(FileSystem& fs, const Manifest& manifest, const std::vector<UniqueFd>& data_files,
                          const std::vector<std::uint32_t>& files, std::size_t threads,
                          const std::function<void(std::uint64_t)>& progress) {
  RehashResult result;
  struct Job {
    std::uint32_t file;
    std::uint64_t chunk;
  };
  std::vector<Job> jobs;
  for (std::uint32_t f : files) {
    if (f >= data_files.size() || !data_files[f].valid()) {
      result.status = Status(StatusCode::invalid_argument, "data file " + manifest.files.at(f).name + " is not open");
      return result;
    }
    for (std::uint64_t c = 0; c < manifest.files[f].chunk_hashes.size(); ++c) jobs.push_back({f, c});
  }
  std::mutex mu;
  std::atomic<std::uint64_t> bytes{0};
  result.status = util::parallel_for(jobs.size(), threads, [&](std::size_t j) -> Status {
    const DataFile& df = manifest.files[jobs[j].file];
    const auto [offset, size] = chunk_range(df, jobs[j].chunk);
    thread_local std::vector<char> buf;
    buf.resize(size);
    Status st = read_all(fs, data_files[jobs[j].file].get(), buf.data(), size, offset);
    if (st.code() == StatusCode::damaged) {
      // The file is shorter than the manifest says: that chunk is damaged, not an I/O failure.
      std::lock_guard lock(mu);
      result.damaged.push_back({df.name, jobs[j].chunk, offset, size,
                                format::tensors_in_range(manifest, jobs[j].file, offset, size)});
      return Status::ok();
    }
    if (!st) return st.with_context(df.name);
    bytes += size;
    if (progress) progress(size);
    if (util::xxh3_64(buf.data(), size) != df.chunk_hashes[jobs[j].chunk]) {
      std::lock_guard lock(mu);
      result.damaged.push_back({df.name, jobs[j].chunk, offset, size,
                                format::tensors_in_range(manifest, jobs[j].file, offset, size)});
    }
    return Status::ok();
  });
  result.bytes = bytes;
  std::sort(result.damaged.begin(), result.damaged.end(), [](const DamagedChunk& a, const DamagedChunk& b) {
    return a.file != b.file ? a.file < b.file : a.chunk < b.chunk;
  });
  return result;
}

std::string describe_damage(const std::vector<DamagedChunk>& damaged) {
  if (damaged.empty()) return "no damage";
  const DamagedChunk& d = damaged.front();
  std::string tensors = d.tensors.empty() ? "padding only" : fmt::format("tensors {}", fmt::join(d.tensors, ", "));
  std::string s = fmt::format("{} chunk {} (bytes {}..{}) failed its checksum ({})", d.file, d.chunk, d.offset,
                              d.offset + d.size, tensors);
  if (damaged.size() > 1) s += fmt::format(", and {} more damaged chunks", damaged.size() - 1);
  return s;
}

namespace {

Status damaged_chunk(const DataFile& file, std::uint64_t chunk, const std::vector<std::string>* tensors) {
  const auto [offset, size] = chunk_range(file, chunk);
  if (tensors != nullptr) return Status(StatusCode::damaged, describe_damage({{file.name, chunk, offset, size, *tensors}}));
  return Status(StatusCode::damaged,
                fmt::format("{} chunk {} (bytes {}..{}) failed its checksum", file.name, chunk, offset, offset + size));
}

bool matches(const DataFile& file, std::uint64_t chunk, std::uint64_t digest) {
  return chunk < file.chunk_hashes.size() && digest == file.chunk_hashes[chunk];
}

}  // namespace

Status check_chunk(const DataFile& file, std::uint64_t chunk, std::uint64_t digest) {
  return matches(file, chunk, digest) ? Status::ok() : damaged_chunk(file, chunk, nullptr);
}

Status check_chunk(const Manifest& manifest, std::uint32_t file, std::uint64_t chunk, std::uint64_t digest) {
  const DataFile& df = manifest.files.at(file);
  if (matches(df, chunk, digest)) return Status::ok();
  const auto [offset, size] = chunk_range(df, chunk);
  const std::vector<std::string> tensors = format::tensors_in_range(manifest, file, offset, size);
  return damaged_chunk(df, chunk, &tensors);
}

}  // namespace snapcache::store
