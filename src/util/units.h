// Sizes and ages as people write them: "128GiB", "500MB", "1.5 GiB", "7d", "12h", "30m".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "snapcache/status.h"

namespace snapcache::util {

// Binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) units; a bare number is bytes.
Result<std::uint64_t> parse_size(std::string_view text);
// Largest binary unit that keeps the number >= 1, one decimal: "1.5 GiB", "512 B".
std::string format_size(std::uint64_t bytes);

// s, m, h, d, w; a bare number is seconds.
Result<std::int64_t> parse_age_seconds(std::string_view text);
// "3d", "5h", "12m", "40s": the largest unit with a whole number.
std::string format_age(std::int64_t seconds);

}  // namespace snapcache::util
