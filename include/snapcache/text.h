// Quantities as people read and write them: sizes ("128GiB", "1.5 GiB"), ages ("7d"), durations
// ("12.3 ms"), tensor shapes ("[4, 8]") and 64-bit checksums. The library reads sizes with these
// (the settings file, SNAPCACHE_CAPACITY) and writes its messages with them (why: "modified 3m
// after the entry was made"); the `snapcache` command, which may use only the public API, reads
// its options and prints its tables with the same functions, so a size or an age is one rule
// (one number grammar, one clock that saturates instead of wrapping) wherever it is read or shown.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "snapcache/export.h"
#include "snapcache/status.h"

namespace snapcache {

// Binary (KiB, MiB, GiB, TiB; also K, M, G, T) and decimal (kB, MB, GB, TB, PB) units, B for
// bytes. One rule everywhere a size is written (settings file, command-line sizes): a size has a
// unit, so "500" is an error (bytes or GiB?), except 0. Only decimal digits and one point ("1.5",
// no "0x10", no "1e3"); a size that rounds to 0 bytes is an error unless it is 0, and one larger
// than 8 EiB (what a file offset can hold) is an error, never a wrapped value.
SNAPCACHE_API Result<std::uint64_t> parse_size(std::string_view text);
// A plain number of GiB ("2", "0.5"): what a name that carries the unit takes
// (SNAPCACHE_CAPACITY_GIB, the demo's --capacity-gib). The same rules as parse_size, in GiB.
SNAPCACHE_API Result<std::uint64_t> parse_gib(std::string_view text);
// Largest binary unit that keeps the number >= 1, one decimal: "1.5 GiB", "512 B".
SNAPCACHE_API std::string format_size(std::uint64_t bytes);

// s, m (min), h, d, w; a bare number is seconds.
SNAPCACHE_API Result<std::int64_t> parse_age_seconds(std::string_view text);
// "2y", "3d", "5h", "12m", "40s": the largest unit with a whole number (a year is 365 days).
SNAPCACHE_API std::string format_age(std::int64_t seconds);
// The same moment as people read it relative to now: "3d ago"; "in 9y" for one in the future (a
// file's time is whatever its writer set: a wrong clock, a copy from a host whose clock was); "in
// the future" for one past what nanoseconds since 1970 hold (after 2262: a saturated time).
SNAPCACHE_API std::string format_time_from_now(std::int64_t unix_ns);

// "850 us", "12.3 ms", "1.52 s", "3m 20s".
SNAPCACHE_API std::string format_duration(double seconds);
// "[4, 8]": sizes or strides of a tensor.
SNAPCACHE_API std::string format_dims(std::span<const std::int64_t> dims);
// 16 lowercase hex digits.
SNAPCACHE_API std::string format_hex64(std::uint64_t value);

}  // namespace snapcache
