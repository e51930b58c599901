#include "host_path/host_copy.h"

#include <c10/core/Storage.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "snapcache/extend/host_storage.h"
#include "snapcache/text.h"
#include "util/align.h"
#include "util/fmt.h"
#include "util/host_memory.h"
#include "util/parallel.h"

namespace snapcache::host_path {
namespace {

// The mapping every copied storage lies in; each storage's DataPtr holds a reference.
class Region {
 public:
  explicit Region(std::uint64_t bytes) : bytes_(bytes), data_(util::map_huge_pages(bytes)) {}
  ~Region() { util::unmap_huge_pages(data_, bytes_); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  std::uint64_t bytes_;
  void* data_;
};

// Each storage starts on a 4 KiB boundary, as a storage the allocator or a mapping gives does.
constexpr std::uint64_t kStorageAlignment = 4096;
// The copy goes in pieces of at most this size, so one large storage keeps every thread busy.
constexpr std::uint64_t kPiece = 64ull << 20;

}  // namespace

Result<HostCopy> copy_host_tensors(const NamedTensors& tensors, std::size_t threads) {
  auto host = describe_host_storages(tensors);
  if (!host) return host.status();
  std::vector<std::uint64_t> offsets;
  std::uint64_t total = 0;   // mapped
  std::uint64_t copied = 0;  // copied
  for (const HostStorage& s : host->storages) {
    if (s.pending) return Status(StatusCode::invalid_argument, "a storage holds a pending layout conversion");
    offsets.push_back(total);
    total += util::align_up(s.used_bytes, kStorageAlignment);
    copied += s.used_bytes;
  }
  if (const auto available = util::available_host_memory(); available && total > *available / 2)
    return Status(StatusCode::no_space,
                  fmt::format("a copy of the weights would take {} of the {} of memory available", format_size(total),
                              format_size(*available)));
  auto region = std::make_shared<Region>(std::max<std::uint64_t>(total, 1));
  if (region->data() == nullptr)
    return Status(StatusCode::no_space, fmt::format("mapping {} for a copy of the weights failed", format_size(total)));

  struct Piece {
    const std::byte* from;
    std::byte* to;
    std::uint64_t bytes;
  };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < host->storages.size(); ++i) {
    const HostStorage& s = host->storages[i];
    for (std::uint64_t at = 0; at < s.used_bytes; at += kPiece)
      pieces.push_back({s.data + at, region->data() + offsets[i] + at, std::min(kPiece, s.used_bytes - at)});
  }
  SNAPCACHE_RETURN_IF_ERROR(util::parallel_for(pieces.size(), threads, [&](std::size_t i) {
    std::memcpy(pieces[i].to, pieces[i].from, pieces[i].bytes);
    return Status::ok();
  }));

  std::vector<c10::Storage> storages;
  storages.reserve(host->storages.size());
  for (std::size_t i = 0; i < host->storages.size(); ++i) {
    auto* owner = new std::shared_ptr<Region>(region);
    c10::DataPtr ptr(region->data() + offsets[i], owner,
                     [](void* ctx) { delete static_cast<std::shared_ptr<Region>*>(ctx); }, c10::Device(c10::kCPU));
    storages.emplace_back(c10::Storage::use_byte_size_t(), host->storages[i].used_bytes, std::move(ptr),
                          /*allocator=*/nullptr, /*resizable=*/false);
  }
  return HostCopy{views_over(tensors, *host, storages), copied};
}

}  // namespace snapcache::host_path
