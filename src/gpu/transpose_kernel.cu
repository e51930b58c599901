#include "gpu/transpose_kernel.h"

#include <algorithm>

namespace snapcache::gpu {
namespace {

// Square tiles through shared memory: a warp reads 32 consecutive elements of a source row and
// writes 32 consecutive elements of a destination row, so both sides are coalesced. The padding
// column keeps a warp's column reads on different banks.
constexpr unsigned kTile = 32;
constexpr unsigned kRowsPerPass = 8;  // the block is kTile x kRowsPerPass threads
constexpr unsigned kMaxBlocks = 4096;  // tiles beyond it are taken in turn by the same blocks

// An element of 16 bytes, moved whole.
struct alignas(16) Bytes16 {
  unsigned long long low, high;
};

template <class T>
__global__ void transpose_tiles(char* dst, unsigned long long dst_pitch, const T* __restrict__ src,
                                unsigned long long rows, unsigned long long cols, unsigned long long tiles_across,
                                unsigned long long tiles) {
  __shared__ T tile[kTile][kTile + 1];
  for (unsigned long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const unsigned long long row0 = t / tiles_across * kTile, col0 = t % tiles_across * kTile;
    for (unsigned i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const unsigned long long r = row0 + i, c = col0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
    }
    __syncthreads();
    // Destination row c is source column c; its element r is source row r.
    for (unsigned i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const unsigned long long c = col0 + i, r = row0 + threadIdx.x;
      if (c < cols && r < rows) reinterpret_cast<T*>(dst + c * dst_pitch)[r] = tile[threadIdx.x][i];
    }
    __syncthreads();  // the tile is refilled for the next t
  }
}

template <class T>
cudaError_t launch(void* dst, std::uint64_t dst_pitch, const void* src, std::uint64_t rows, std::uint64_t cols,
                   cudaStream_t stream) {
  const std::uint64_t across = (cols + kTile - 1) / kTile, down = (rows + kTile - 1) / kTile;
  const std::uint64_t tiles = across * down;
  const auto blocks = static_cast<unsigned>(std::min<std::uint64_t>(tiles, kMaxBlocks));
  transpose_tiles<T><<<blocks, dim3(kTile, kRowsPerPass), 0, stream>>>(
      static_cast<char*>(dst), dst_pitch, static_cast<const T*>(src), rows, cols, across, tiles);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_transpose(void* dst, std::uint64_t dst_pitch, const void* src, std::uint64_t rows,
                             std::uint64_t cols, std::uint64_t element_size, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const auto misaligned = [&](std::uint64_t a) {
    return reinterpret_cast<std::uintptr_t>(dst) % a != 0 || reinterpret_cast<std::uintptr_t>(src) % a != 0 ||
           dst_pitch % a != 0;
  };
  if (dst_pitch < rows * element_size || misaligned(element_size)) return cudaErrorInvalidValue;
  switch (element_size) {
    case 1: return launch<unsigned char>(dst, dst_pitch, src, rows, cols, stream);
    case 2: return launch<unsigned short>(dst, dst_pitch, src, rows, cols, stream);
    case 4: return launch<unsigned int>(dst, dst_pitch, src, rows, cols, stream);
    case 8: return launch<unsigned long long>(dst, dst_pitch, src, rows, cols, stream);
    case 16: return launch<Bytes16>(dst, dst_pitch, src, rows, cols, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace snapcache::gpu
