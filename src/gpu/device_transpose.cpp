#include "gpu/device_transpose.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu/cuda_status.h"
#include "gpu/transpose_kernel.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache::gpu {

Status transpose_on_device(std::byte* dst, std::uint64_t dst_pitch, const std::byte* src, std::uint64_t rows,
                           std::uint64_t cols, std::uint64_t element_size, c10::Device device) {
  if (!device.is_cuda()) return Status(StatusCode::invalid_argument, "transposes on the device need a CUDA device");
  return guarded([&]() -> Status {
    c10::cuda::OptionalCUDAGuard on_device;  // "cuda" without an index: the current device
    if (device.has_index()) on_device.set_device(device);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const cudaError_t err = launch_transpose(dst, dst_pitch, src, rows, cols, element_size, stream);
    if (err == cudaErrorInvalidValue)
      return Status(StatusCode::invalid_argument,
                    fmt::format("cannot transpose {}x{} elements of {} bytes into rows {} bytes apart on the device "
                                "(element sizes 1, 2, 4, 8 or 16, aligned to their size)",
                                rows, cols, element_size, dst_pitch));
    return err == cudaSuccess ? Status::ok() : cuda_status(err, "transposing on the device");
  });
}

}  // namespace snapcache::gpu
