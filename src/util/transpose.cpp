#include "util/transpose.h"

#include <algorithm>
#include <cstring>

#include "util/parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace snapcache::util {
namespace {

#if defined(__SSE2__)
// Register transposes of one 16-byte-wide block: 16x16 bytes or 8x8 16-bit elements, src rows
// `ss` bytes apart, dst rows `ds` apart. Interleaving pairs of rows, then pairs of pairs, doubles
// the run of one column's elements at each step until a register holds a whole column. The int8
// and fp16 conversions spend their time here; element by element they ran at ~1 GB/s per thread.
inline __m128i load(const unsigned char* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void store(unsigned char* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }

void block_u8(const unsigned char* s, std::size_t ss, unsigned char* d, std::size_t ds) {
  __m128i r[16], a[16], b[16], c[16];
  for (int i = 0; i < 16; ++i) r[i] = load(s + i * ss);
  for (int p = 0; p < 8; ++p) {  // (row 2p, row 2p+1) byte pairs: columns 0-7, then 8-15
    a[2 * p] = _mm_unpacklo_epi8(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm_unpackhi_epi8(r[2 * p], r[2 * p + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3 as 32-bit units: columns 0-3, 4-7, 8-11, 12-15
    b[4 * g + 0] = _mm_unpacklo_epi16(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm_unpackhi_epi16(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm_unpacklo_epi16(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm_unpackhi_epi16(a[4 * g + 1], a[4 * g + 3]);
  }
  for (int h = 0; h < 2; ++h)  // rows 8h..8h+7 as 64-bit units: columns (4q, 4q+1), (4q+2, 4q+3)
    for (int q = 0; q < 4; ++q) {
      c[8 * h + 2 * q] = _mm_unpacklo_epi32(b[8 * h + q], b[8 * h + 4 + q]);
      c[8 * h + 2 * q + 1] = _mm_unpackhi_epi32(b[8 * h + q], b[8 * h + 4 + q]);
    }
  for (int q = 0; q < 4; ++q)
    for (int k = 0; k < 2; ++k) {
      const int col = 4 * q + 2 * k;
      store(d + col * ds, _mm_unpacklo_epi64(c[2 * q + k], c[8 + 2 * q + k]));
      store(d + (col + 1) * ds, _mm_unpackhi_epi64(c[2 * q + k], c[8 + 2 * q + k]));
    }
}

void block_u16(const unsigned char* s, std::size_t ss, unsigned char* d, std::size_t ds) {
  __m128i r[8], a[8], b[8];
  for (int i = 0; i < 8; ++i) r[i] = load(s + i * ss);
  for (int p = 0; p < 4; ++p) {  // (row 2p, row 2p+1) pairs: columns 0-3, then 4-7
    a[2 * p] = _mm_unpacklo_epi16(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm_unpackhi_epi16(r[2 * p], r[2 * p + 1]);
  }
  for (int g = 0; g < 2; ++g) {  // rows 4g..4g+3 as 64-bit units: columns (0,1), (2,3), (4,5), (6,7)
    b[4 * g + 0] = _mm_unpacklo_epi32(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm_unpackhi_epi32(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm_unpacklo_epi32(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm_unpackhi_epi32(a[4 * g + 1], a[4 * g + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    store(d + (2 * k) * ds, _mm_unpacklo_epi64(b[k], b[4 + k]));
    store(d + (2 * k + 1) * ds, _mm_unpackhi_epi64(b[k], b[4 + k]));
  }
}

// Rows [r0, r1) of a tile of columns [cb, ce) of N-byte elements: register blocks where whole,
// element by element at the edges.
template <std::size_t N>
void transpose_tile_simd(const unsigned char* src, unsigned char* dst, std::size_t rows, std::size_t cols,
                         std::size_t r0, std::size_t r1, std::size_t cb, std::size_t ce) {
  constexpr std::size_t kBlock = 16 / N;
  auto scalar = [&](std::size_t ra, std::size_t rz, std::size_t ca, std::size_t cz) {
    for (std::size_t r = ra; r < rz; ++r)
      for (std::size_t c = ca; c < cz; ++c) std::memcpy(dst + (c * rows + r) * N, src + (r * cols + c) * N, N);
  };
  std::size_t rb = r0;
  for (; rb + kBlock <= r1; rb += kBlock) {
    std::size_t c = cb;
    for (; c + kBlock <= ce; c += kBlock) {
      const unsigned char* s = src + (rb * cols + c) * N;
      unsigned char* d = dst + (c * rows + rb) * N;
      if constexpr (N == 1) block_u8(s, cols, d, rows);
      else block_u16(s, cols * 2, d, rows * 2);
    }
    scalar(rb, rb + kBlock, c, ce);
  }
  scalar(rb, r1, cb, ce);
}
#endif

// A tile is read row by row (each source row's slice once, whole cache lines) into a small buffer
// that stays in L1, then written column by column (each destination slice once, whole lines).
// Touching each line once matters: rows of a power-of-two width map to the same cache sets, so a
// direct strided copy evicts lines before it has used them up.
template <std::size_t N>
constexpr std::size_t tile_for() {
  return N <= 4 ? 64 : 32;  // a buffer of at most 16 KiB
}

// Elements are N raw bytes, moved by fixed-size memcpy (one load and one store once compiled), never
// through a typed pointer: src and dst need no alignment. The upload engine transposes into byte
// offsets of one staging buffer shared by matrices of different element sizes, so a 2-byte matrix
// may start at an odd address there.
template <std::size_t N>
void transpose_rows(const unsigned char* src, unsigned char* dst, std::size_t rows, std::size_t cols, std::size_t r0,
                    std::size_t r1) {
  constexpr std::size_t kTile = tile_for<N>();
#if defined(__SSE2__)
  if constexpr (N <= 2) {  // 64x64 tiles (a few KiB of each side stay in L1), in register blocks
    for (std::size_t cb = 0; cb < cols; cb += kTile)
      transpose_tile_simd<N>(src, dst, rows, cols, r0, r1, cb, std::min(cols, cb + kTile));
    return;
  }
#endif
  unsigned char buffer[kTile][kTile * N];  // element (r, c) of the tile at buffer[c - cb][(r - r0) * N]
  const std::size_t height = r1 - r0;
  for (std::size_t cb = 0; cb < cols; cb += kTile) {
    const std::size_t width = std::min(kTile, cols - cb);
    for (std::size_t r = 0; r < height; ++r) {
      const unsigned char* row = src + ((r0 + r) * cols + cb) * N;
      for (std::size_t c = 0; c < width; ++c) std::memcpy(&buffer[c][r * N], row + c * N, N);
    }
    for (std::size_t c = 0; c < width; ++c) std::memcpy(dst + ((cb + c) * rows + r0) * N, buffer[c], height * N);
  }
}

template <std::size_t N>
void transpose_sized(const void* src, void* dst, std::size_t rows, std::size_t cols, std::size_t threads) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  constexpr std::size_t kTile = tile_for<N>();
  const std::size_t blocks = (rows + kTile - 1) / kTile;
  (void)parallel_for(blocks, threads, [&](std::size_t b) {
    transpose_rows<N>(s, d, rows, cols, b * kTile, std::min(rows, (b + 1) * kTile));
    return Status::ok();
  });
}

}  // namespace

void transpose(const void* src, void* dst, std::size_t rows, std::size_t cols, std::size_t element_size,
               std::size_t threads) {
  if (rows == 0 || cols == 0) return;
  switch (element_size) {
    case 1: return transpose_sized<1>(src, dst, rows, cols, threads);
    case 2: return transpose_sized<2>(src, dst, rows, cols, threads);
    case 4: return transpose_sized<4>(src, dst, rows, cols, threads);
    case 8: return transpose_sized<8>(src, dst, rows, cols, threads);
    case 16: return transpose_sized<16>(src, dst, rows, cols, threads);
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
