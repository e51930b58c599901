// Element types as snapcache stores them. The numeric codes are part of the on-disk format and
// never change; they are deliberately not c10::ScalarType's numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "snapcache/export.h"

namespace snapcache {

enum class DType : std::uint8_t {
  bool_ = 1,
  uint8 = 2, int8 = 3, int16 = 4, int32 = 5, int64 = 6,
  uint16 = 7, uint32 = 8, uint64 = 9,
  float16 = 10, bfloat16 = 11, float32 = 12, float64 = 13,
  complex32 = 14, complex64 = 15, complex128 = 16,
  float8_e4m3fn = 17, float8_e5m2 = 18, float8_e4m3fnuz = 19, float8_e5m2fnuz = 20,
  float8_e8m0fnu = 21, float4_e2m1fn_x2 = 22,
  bits1x8 = 23, bits2x4 = 24, bits4x2 = 25, bits8 = 26, bits16 = 27,
  // Torch's sub-byte "shell" integer types; each element still takes one byte in memory.
  uint1 = 28, uint2 = 29, uint3 = 30, uint4 = 31, uint5 = 32, uint6 = 33, uint7 = 34,
  int1 = 35, int2 = 36, int3 = 37, int4 = 38, int5 = 39, int6 = 40, int7 = 41,
};

// Bytes per element; 0 for an unknown code.
SNAPCACHE_API std::uint32_t element_size(DType dtype);
// "bfloat16", "float8_e4m3fn", ... (the names torch prints, without "torch.").
SNAPCACHE_API std::string_view dtype_name(DType dtype);
SNAPCACHE_API std::optional<DType> dtype_from_name(std::string_view name);
SNAPCACHE_API std::optional<DType> dtype_from_code(std::uint8_t code);

}  // namespace snapcache
