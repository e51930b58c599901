// Device memory another process can map: a few large allocations made with CUDA's virtual memory
// management, each exportable as a POSIX file descriptor (sent over a Unix socket with
// SCM_RIGHTS), mapped back to back into one range of addresses on both sides, so one offset names
// the same byte in the donor and in every consumer.
//
// Why not cudaIpcGetMemHandle: its handles are one per cudaMalloc allocation and need the two
// processes to see each other's pids; a descriptor passed over the socket needs neither, and is a
// reference to the physical memory itself (docs/gpu-retention.md has the measurements of both).
//
// The driver API is reached through the runtime's entry-point query, so nothing links libcuda
// (the library still loads on machines without a driver).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ipc/unix_socket.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/status.h"

namespace snapcache::gpu {

// The ordinal of a CUDA device; a device without an index ("cuda") is the current one, as in torch.
int cuda_ordinal(c10::Device device);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it: the physical device, the
// same whatever CUDA_VISIBLE_DEVICES calls it.
Result<std::string> device_uuid(int device_ordinal);

// One side's mapping of shareable memory: `sizes` allocations at consecutive addresses from base().
class ShareableMemory {
 public:
  // New physical memory for `bytes` (rounded up to the allocation granularity), in allocations of
  // at most `max_allocation` bytes each, mapped read-write on `device_ordinal`.
  static Result<std::unique_ptr<ShareableMemory>> allocate(int device_ordinal, std::uint64_t bytes,
                                                           std::uint64_t max_allocation = 16ull << 30);
  // Maps memory another process exported (one descriptor per allocation, with its size).
  static Result<std::unique_ptr<ShareableMemory>> import(int device_ordinal, std::vector<ipc::UniqueFd> fds,
                                                         const std::vector<std::uint64_t>& sizes);
  ~ShareableMemory();
  ShareableMemory(const ShareableMemory&) = delete;
  ShareableMemory& operator=(const ShareableMemory&) = delete;

  std::byte* base() const { return reinterpret_cast<std::byte*>(base_); }
  std::uint64_t size() const { return size_; }
  int device() const { return device_; }
  const std::vector<std::uint64_t>& allocation_sizes() const { return sizes_; }
  // Fresh descriptors, one per allocation, for one consumer (the caller closes them once sent).
  Result<std::vector<ipc::UniqueFd>> export_fds() const;

 private:
  ShareableMemory() = default;
  int device_ = 0;
  std::uint64_t base_ = 0;  // CUdeviceptr
  std::uint64_t size_ = 0;
  std::vector<std::uint64_t> sizes_;
  std::vector<unsigned long long> handles_;  // CUmemGenericAllocationHandle, kept by the exporter
};

}  // namespace snapcache::gpu
