#include "gpu/shareable_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "gpu/cuda_status.h"
#include "util/fmt.h"
#include "snapcache/extend/file_system.h"

namespace snapcache::gpu {
namespace {

// The driver functions this file uses, found through the runtime (which loads libcuda itself).
struct Driver {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetUuid) device_get_uuid = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_handle = nullptr;
  Status status;  // why the table is unusable
};

template <typename F>
Status find(const char* symbol, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // 12.0: the ABI these declarations (cuda.h) have had since CUDA 12.
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr)
    return err != cudaSuccess ? cuda_status(err, fmt::format("finding the CUDA driver function {}", symbol))
                              : Status(StatusCode::unsupported, fmt::format("the CUDA driver has no {}", symbol));
  fn = reinterpret_cast<F>(p);
  return Status::ok();
}

const Driver& driver() {
  static const Driver table = [] {
    Driver d;
    d.status = [&]() -> Status {
      SNAPCACHE_RETURN_IF_ERROR(find("cuGetErrorName", d.get_error_name));
      SNAPCACHE_RETURN_IF_ERROR(find("cuDeviceGet", d.device_get));
      SNAPCACHE_RETURN_IF_ERROR(find("cuDeviceGetUuid", d.device_get_uuid));
      SNAPCACHE_RETURN_IF_ERROR(find("cuDeviceGetAttribute", d.device_get_attribute));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemGetAllocationGranularity", d.granularity));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemCreate", d.create));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemRelease", d.release));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemAddressReserve", d.reserve));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemAddressFree", d.address_free));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemMap", d.map));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemUnmap", d.unmap));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemSetAccess", d.set_access));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemExportToShareableHandle", d.export_handle));
      SNAPCACHE_RETURN_IF_ERROR(find("cuMemImportFromShareableHandle", d.import_handle));
      return Status::ok();
    }();
    return d;
  }();
  return table;
}

Status check(CUresult err, const std::string& what) {
  if (err == CUDA_SUCCESS) return Status::ok();
  const char* name = nullptr;
  if (driver().get_error_name != nullptr) (void)driver().get_error_name(err, &name);
  return Status(err == CUDA_ERROR_OUT_OF_MEMORY ? StatusCode::no_space : StatusCode::io_error,
                fmt::format("{}: {}", what, name != nullptr ? name : fmt::format("CUDA driver error {}", int(err))));
}

// Makes the device's primary context current on this thread, as the runtime (and torch) use it.
Status use_device(int device_ordinal) {
  SNAPCACHE_RETURN_IF_ERROR(driver().status);
  if (cudaError_t err = cudaSetDevice(device_ordinal); err != cudaSuccess)
    return cuda_status(err, fmt::format("selecting cuda:{}", device_ordinal));
  if (cudaError_t err = cudaFree(nullptr); err != cudaSuccess)
    return cuda_status(err, fmt::format("initializing cuda:{}", device_ordinal));
  return Status::ok();
}

CUmemAllocationProp allocation_properties(int device_ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

Result<std::uint64_t> granularity(int device_ordinal) {
  const Driver& d = driver();
  CUdevice dev = 0;
  SNAPCACHE_RETURN_IF_ERROR(check(d.device_get(&dev, device_ordinal), "cuDeviceGet"));
  int vmm = 0, fds = 0;
  SNAPCACHE_RETURN_IF_ERROR(check(d.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
                                  "querying virtual memory management support"));
  SNAPCACHE_RETURN_IF_ERROR(check(d.device_get_attribute(&fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev),
                                  "querying file-descriptor handle support"));
  if (vmm == 0 || fds == 0)
    return Status(StatusCode::unsupported,
                  fmt::format("cuda:{} does not support {}", device_ordinal,
                              vmm == 0 ? "virtual memory management" : "POSIX file-descriptor memory handles"));
  CUmemAllocationProp prop = allocation_properties(device_ordinal);
  std::size_t g = 0;
  SNAPCACHE_RETURN_IF_ERROR(check(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity"));
  return static_cast<std::uint64_t>(g);
}

// The device made current and its allocation granularity: where both sides begin.
Result<std::uint64_t> start_on(int device_ordinal) {
  SNAPCACHE_RETURN_IF_ERROR(use_device(device_ordinal));
  return granularity(device_ordinal);
}

std::uint64_t round_up(std::uint64_t n, std::uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

int cuda_ordinal(c10::Device device) {
  if (device.has_index()) return device.index();
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return current;
}

Result<std::string> device_uuid(int device_ordinal) {
  SNAPCACHE_RETURN_IF_ERROR(use_device(device_ordinal));
  CUdevice dev = 0;
  SNAPCACHE_RETURN_IF_ERROR(check(driver().device_get(&dev, device_ordinal), "cuDeviceGet"));
  CUuuid uuid{};
  SNAPCACHE_RETURN_IF_ERROR(check(driver().device_get_uuid(&uuid, dev), "cuDeviceGetUuid"));
  std::string hex;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) hex += '-';
    hex += fmt::format("{:02x}", static_cast<unsigned char>(uuid.bytes[i]));
  }
  return "GPU-" + hex;
}

Result<std::unique_ptr<ShareableMemory>> ShareableMemory::allocate(int device_ordinal, std::uint64_t bytes,
                                                                   std::uint64_t max_allocation) {
  auto g = start_on(device_ordinal);
  if (!g) return g.status();
  const Driver& d = driver();
  std::unique_ptr<ShareableMemory> m(new ShareableMemory());
  m->device_ = device_ordinal;
  m->size_ = round_up(std::max<std::uint64_t>(bytes, 1), *g);
  max_allocation = std::max(round_up(max_allocation, *g), *g);
  CUdeviceptr base = 0;
  SNAPCACHE_RETURN_IF_ERROR(check(d.reserve(&base, m->size_, *g, 0, 0), "reserving device addresses"));
  m->base_ = base;
  const CUmemAllocationProp prop = allocation_properties(device_ordinal);
  for (std::uint64_t at = 0; at < m->size_;) {
    const std::uint64_t n = std::min(max_allocation, m->size_ - at);
    CUmemGenericAllocationHandle h = 0;
    SNAPCACHE_RETURN_IF_ERROR(check(d.create(&h, n, &prop, 0), fmt::format("allocating {} bytes of shareable memory on cuda:{}", n, device_ordinal)));
    m->handles_.push_back(h);
    m->sizes_.push_back(n);
    SNAPCACHE_RETURN_IF_ERROR(check(d.map(base + at, n, 0, h, 0), "mapping shareable memory"));
    at += n;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SNAPCACHE_RETURN_IF_ERROR(check(d.set_access(base, m->size_, &access, 1), "granting access to shareable memory"));
  return m;
}

Result<std::unique_ptr<ShareableMemory>> ShareableMemory::import(int device_ordinal, std::vector<ipc::UniqueFd> fds,
                                                                 const std::vector<std::uint64_t>& sizes) {
  if (fds.size() != sizes.size() || fds.empty())
    return Status(StatusCode::invalid_argument,
                  fmt::format("{} memory descriptors for {} allocations", fds.size(), sizes.size()));
  auto g = start_on(device_ordinal);
  if (!g) return g.status();
  const Driver& d = driver();
  std::unique_ptr<ShareableMemory> m(new ShareableMemory());
  m->device_ = device_ordinal;
  for (std::uint64_t n : sizes) {
    if (n == 0 || n % *g != 0)
      return Status(StatusCode::invalid_argument, fmt::format("allocation of {} bytes is not a multiple of the granularity {}", n, *g));
    m->size_ += n;
  }
  CUdeviceptr base = 0;
  SNAPCACHE_RETURN_IF_ERROR(check(d.reserve(&base, m->size_, *g, 0, 0), "reserving device addresses"));
  m->base_ = base;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    CUmemGenericAllocationHandle h = 0;
    SNAPCACHE_RETURN_IF_ERROR(check(d.import_handle(&h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fds[i].get())),
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                                    "importing a memory descriptor"));
    // The mapping keeps the physical memory alive; the handle and the descriptor are not needed.
    const Status mapped = check(d.map(base + at, sizes[i], 0, h, 0), "mapping imported memory");
    (void)d.release(h);
    SNAPCACHE_RETURN_IF_ERROR(mapped);
    m->sizes_.push_back(sizes[i]);
    at += sizes[i];
  }
  CUmemAccessDesc access{};
  access.location = allocation_properties(device_ordinal).location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;  // CUDA has no read-only device mappings
  SNAPCACHE_RETURN_IF_ERROR(check(d.set_access(base, m->size_, &access, 1), "granting access to imported memory"));
  return m;
}

Result<std::vector<ipc::UniqueFd>> ShareableMemory::export_fds() const {
  std::vector<ipc::UniqueFd> fds;
  for (auto h : handles_) {
    int fd = -1;
    SNAPCACHE_RETURN_IF_ERROR(check(driver().export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                                    "exporting a memory descriptor"));
    fds.emplace_back(fd);
  }
  return fds;
}

ShareableMemory::~ShareableMemory() {
  const Driver& d = driver();
  if (base_ == 0 || d.unmap == nullptr) return;
  // Work queued on any stream may still read these addresses: unmapping under it is a fault.
  if (cudaSetDevice(device_) == cudaSuccess) (void)cudaDeviceSynchronize();
  // Unmapped in the pieces that were mapped: a partly built mapping unmaps only what it mapped.
  std::uint64_t at = 0;
  for (std::uint64_t n : sizes_) {
    (void)d.unmap(base_ + at, n);
    at += n;
  }
  for (auto h : handles_) (void)d.release(h);
  (void)d.address_free(base_, size_);
}

}  // namespace snapcache::gpu
