// The safetensors header grammar, without torch (the reader, snapcache/safetensors.h, is built
// on it; so is the fuzz target). The file's layout:
//   header_size:u64 (little-endian) | header: JSON, header_size bytes | data
//   header = { "__metadata__": {str: str}?, NAME: {"dtype": D, "shape": [n...], "data_offsets": [b, e]} ... }
//   offsets are relative to the data section; tensors tile it exactly (no gaps, no overlaps).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "snapcache/dtype.h"
#include "snapcache/export.h"
#include "snapcache/status.h"

namespace snapcache {

inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::float32;
  std::string dtype_name;  // as in the file: "BF16", "F8_E4M3", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // within the data section
  std::uint64_t end = 0;
};

// Parses and validates a header (the bytes after the 8-byte size) against a data section of
// `data_bytes` bytes: the format's rules (a tensor entry has exactly dtype, shape and
// data_offsets; sizes agree; the tensors tile the data), invalid_argument naming the problem.
SNAPCACHE_API Result<std::vector<SafetensorsEntry>> parse_safetensors_header(std::string_view header, std::uint64_t data_bytes,
                                                                             std::map<std::string, std::string>* metadata);

SNAPCACHE_API std::optional<DType> dtype_from_safetensors(std::string_view name);
SNAPCACHE_API std::optional<std::string> safetensors_dtype_name(DType dtype);

}  // namespace snapcache
