#include "util/transpose.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "util/parallel.h"

namespace snapcache::util {
namespace {

template <std::size_t N>
struct Element {
  std::array<unsigned char, N> bytes;
};

// A tile is read row by row (each source row's slice once, whole cache lines) into a small buffer
// that stays in L1, then written column by column (each destination slice once, whole lines).
// Touching each line once matters: rows of a power-of-two width map to the same cache sets, so a
// direct strided copy evicts lines before it has used them up.
template <class T>
constexpr std::size_t tile_for() {
  return sizeof(T) <= 4 ? 64 : 32;  // a buffer of at most 16 KiB
}

template <class T>
void transpose_rows(const T* src, T* dst, std::size_t rows, std::size_t cols, std::size_t r0, std::size_t r1) {
  constexpr std::size_t kTile = tile_for<T>();
  T buffer[kTile][kTile];  // buffer[c - cb][r - r0]
  const std::size_t height = r1 - r0;
  for (std::size_t cb = 0; cb < cols; cb += kTile) {
    const std::size_t width = std::min(kTile, cols - cb);
    for (std::size_t r = 0; r < height; ++r) {
      const T* row = src + (r0 + r) * cols + cb;
      for (std::size_t c = 0; c < width; ++c) buffer[c][r] = row[c];
    }
    for (std::size_t c = 0; c < width; ++c) std::memcpy(dst + (cb + c) * rows + r0, buffer[c], height * sizeof(T));
  }
}

template <class T>
void transpose_typed(const void* src, void* dst, std::size_t rows, std::size_t cols, std::size_t threads) {
  const auto* s = static_cast<const T*>(src);
  auto* d = static_cast<T*>(dst);
  constexpr std::size_t kTile = tile_for<T>();
  const std::size_t blocks = (rows + kTile - 1) / kTile;
  (void)parallel_for(blocks, threads, [&](std::size_t b) {
    transpose_rows(s, d, rows, cols, b * kTile, std::min(rows, (b + 1) * kTile));
    return Status::ok();
  });
}

}  // namespace

void transpose(const void* src, void* dst, std::size_t rows, std::size_t cols, std::size_t element_size,
               std::size_t threads) {
  if (rows == 0 || cols == 0) return;
  switch (element_size) {
    case 1: return transpose_typed<std::uint8_t>(src, dst, rows, cols, threads);
    case 2: return transpose_typed<std::uint16_t>(src, dst, rows, cols, threads);
    case 4: return transpose_typed<std::uint32_t>(src, dst, rows, cols, threads);
    case 8: return transpose_typed<std::uint64_t>(src, dst, rows, cols, threads);
    case 16: return transpose_typed<Element<16>>(src, dst, rows, cols, threads);
    default: break;
  }
  // Any other size: element by element, bytes at a time (not a case the post-load methods have).
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      std::memcpy(d + (c * rows + r) * element_size, s + (r * cols + c) * element_size, element_size);
}

}  // namespace snapcache::util
