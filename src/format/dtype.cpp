#include "snapcache/dtype.h"

#include <array>

namespace snapcache {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::uint32_t size;
};

constexpr std::array<DTypeInfo, 41> kTable{{
    {DType::bool_, "bool", 1},
    {DType::uint8, "uint8", 1}, {DType::int8, "int8", 1}, {DType::int16, "int16", 2},
    {DType::int32, "int32", 4}, {DType::int64, "int64", 8},
    {DType::uint16, "uint16", 2}, {DType::uint32, "uint32", 4}, {DType::uint64, "uint64", 8},
    {DType::float16, "float16", 2}, {DType::bfloat16, "bfloat16", 2},
    {DType::float32, "float32", 4}, {DType::float64, "float64", 8},
    {DType::complex32, "complex32", 4}, {DType::complex64, "complex64", 8},
    {DType::complex128, "complex128", 16},
    {DType::float8_e4m3fn, "float8_e4m3fn", 1}, {DType::float8_e5m2, "float8_e5m2", 1},
    {DType::float8_e4m3fnuz, "float8_e4m3fnuz", 1}, {DType::float8_e5m2fnuz, "float8_e5m2fnuz", 1},
    {DType::float8_e8m0fnu, "float8_e8m0fnu", 1}, {DType::float4_e2m1fn_x2, "float4_e2m1fn_x2", 1},
    {DType::bits1x8, "bits1x8", 1}, {DType::bits2x4, "bits2x4", 1}, {DType::bits4x2, "bits4x2", 1},
    {DType::bits8, "bits8", 1}, {DType::bits16, "bits16", 2},
    {DType::uint1, "uint1", 1}, {DType::uint2, "uint2", 1}, {DType::uint3, "uint3", 1},
    {DType::uint4, "uint4", 1}, {DType::uint5, "uint5", 1}, {DType::uint6, "uint6", 1},
    {DType::uint7, "uint7", 1},
    {DType::int1, "int1", 1}, {DType::int2, "int2", 1}, {DType::int3, "int3", 1},
    {DType::int4, "int4", 1}, {DType::int5, "int5", 1}, {DType::int6, "int6", 1},
    {DType::int7, "int7", 1},
}};

const DTypeInfo* find(DType dtype) {
  for (const auto& info : kTable)
    if (info.dtype == dtype) return &info;
  return nullptr;
}

}  // namespace

std::uint32_t element_size(DType dtype) {
  const DTypeInfo* info = find(dtype);
  return info ? info->size : 0;
}

std::string_view dtype_name(DType dtype) {
  const DTypeInfo* info = find(dtype);
  return info ? info->name : std::string_view("unknown");
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kTable)
    if (info.name == name) return info.dtype;
  return std::nullopt;
}

std::optional<DType> dtype_from_code(std::uint8_t code) {
  const DTypeInfo* info = find(static_cast<DType>(code));
  if (info == nullptr) return std::nullopt;
  return info->dtype;
}

}  // namespace snapcache
