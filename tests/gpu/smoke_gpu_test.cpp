// The GPU works end to end: a CUDA tensor allocated through libtorch, host bytes copied into it
// with the CUDA runtime on a stream of our own, copied back, compared byte for byte.
#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "support/catch.h"

#define CUDA_OK(expr) REQUIRE((expr) == cudaSuccess)

TEST_CASE("a libtorch CUDA tensor round-trips bytes through the CUDA runtime on a stream", "[gpu]") {
  constexpr std::size_t n = 1u << 24;  // 16 MiB
  std::vector<std::uint8_t> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);

  at::Tensor device = at::empty({static_cast<std::int64_t>(n)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  REQUIRE(device.is_cuda());
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMemcpyAsync(device.data_ptr(), host.data(), n, cudaMemcpyHostToDevice, stream));
  std::vector<std::uint8_t> back(n, 0);
  CUDA_OK(cudaMemcpyAsync(back.data(), device.data_ptr(), n, cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  REQUIRE(std::memcmp(host.data(), back.data(), n) == 0);

  // And torch sees the same bytes the runtime wrote.
  at::Tensor on_host = device.cpu();
  REQUIRE(std::memcmp(on_host.data_ptr(), host.data(), n) == 0);
}
