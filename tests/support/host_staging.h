// The upload engine's host half as an uploader, for CPU tests: the staging plan run into host
// memory (reads through the store's FileSystem, every chunk checked, pending transposes written)
// by an uploader that declares what the engine declares. With it, load_model leaves layout
// conversions pending and stages a warm hit's data files exactly as it does for the CUDA engine.
#pragma once

#include <ATen/Functions.h>

#include <cstring>
#include <memory>
#include <vector>

#include "gpu/staging.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/uploader.h"

namespace snapcache::test {

// Staging buffers small enough that the fixture's data file takes several units, so matrix rows
// and storages cross unit boundaries.
constexpr std::uint64_t kBufferBytes = 16ull << 20;

// Writes staged bytes into a host arena.
class HostSink final : public gpu::StagingSink {
 public:
  explicit HostSink(std::byte* arena) : arena_(arena) {}
  Status copy(std::uint64_t dst, const std::byte* src, std::uint64_t bytes) override {
    std::memcpy(arena_ + dst, src, bytes);
    return Status::ok();
  }
  // Element by element, the definition of a transpose, so the test does not share the engine's code.
  Status transpose(std::uint64_t dst, std::uint64_t dst_pitch, const std::byte* src, std::uint64_t rows,
                   std::uint64_t cols, std::uint64_t element_size) override {
    for (std::uint64_t r = 0; r < rows; ++r)
      for (std::uint64_t c = 0; c < cols; ++c)
        std::memcpy(arena_ + dst + c * dst_pitch + r * element_size, src + (r * cols + c) * element_size, element_size);
    return Status::ok();
  }
  Status wait() override { return Status::ok(); }

 private:
  std::byte* arena_;
};

// The engine's contract (converts layouts, checks files) with host memory as the device.
class HostStagingUploader final : public Uploader {
 public:
  std::string name() const override { return "host staging"; }
  UploaderTraits traits(c10::Device) const override { return {.converts_layouts = true}; }
  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& host, c10::Device) override {
    for (const HostStorage& s : host.storages) pending += s.pending.has_value();
    auto plan = gpu::plan_staging(host, kBufferBytes);
    if (!plan) return plan.status();
    units = plan->units.size();
    bytes_checked = plan->bytes_checked;
    bytes_read_from_files = 0;
    for (const auto& unit : plan->units)
      if (plan->sources[unit.source].file != nullptr) bytes_read_from_files += unit.read_end - unit.begin;
    bytes_wanted_from_files = 0;
    for (const HostStorage& s : host.storages)
      if (s.file || (s.pending && s.pending->source_file)) bytes_wanted_from_files += s.nbytes;
    at::Tensor arena = at::empty({static_cast<std::int64_t>(plan->destination_bytes)}, at::kByte);
    auto* base = static_cast<std::byte*>(arena.data_ptr());
    HostSink sink(base);
    std::vector<std::byte> read(plan->buffer_bytes);
    for (const auto& unit : plan->units) SNAPCACHE_RETURN_IF_ERROR(gpu::stage_unit(*plan, unit, read.data(), sink));
    std::vector<c10::Storage> storages;
    for (std::size_t i = 0; i < host.storages.size(); ++i)
      storages.push_back(at::from_blob(base + plan->storage_offsets[i], {static_cast<std::int64_t>(host.storages[i].nbytes)},
                                       [arena](void*) {}, at::kByte)
                             .storage());
    return Uploaded{views_over(tensors, host, storages), plan->bytes_checked};
  }
  int pending = 0;
  std::size_t units = 0;
  std::uint64_t bytes_checked = 0;
  std::uint64_t bytes_read_from_files = 0;    // what the units read from files (not memory)
  std::uint64_t bytes_wanted_from_files = 0;  // the storages (or conversion sources) that lie in files
};

}  // namespace snapcache::test
