#include "snapcache/text.h"

#include "util/fmt.h"

#include "util/clock.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

namespace snapcache {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "1.5 GiB" into 1.5 and "GiB"; fails on anything but a non-negative number.
bool split_number(std::string_view text, double& number, std::string& unit) {
  text = trim(text);
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return false;
  std::string num(text.substr(0, i));
  char* end = nullptr;
  number = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !std::isfinite(number) || number < 0) return false;
  unit = std::string(trim(text.substr(i)));
  return true;
}

bool equals_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace

namespace {

constexpr const char* kSizeForms = "a number with a unit: 512B, 64KiB, 1.5GiB, 2TiB, 500MB, 2GB";
// 2^63: file offsets (off_t) and sizes on disk are signed 64-bit, so nothing larger is a size.
constexpr double kMaxSizeBytes = 9223372036854775808.0;

// Bytes for `number` of `factor`-byte units, or why not. `text` is what the user wrote.
Result<std::uint64_t> to_bytes(std::string_view text, double number, double factor) {
  const double bytes = std::round(number * factor);
  if (!(bytes < kMaxSizeBytes))  // also NaN; llround would wrap (15000PB became 8 PiB)
    return Status(StatusCode::invalid_argument,
                  fmt::format("size '{}' is larger than the largest size snapcache handles (8 EiB)", text));
  if (bytes == 0 && number != 0)
    return Status(StatusCode::invalid_argument,
                  fmt::format("size '{}' rounds to 0 bytes; write 0 if you mean none", text));
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text) {
  // Decimal units are matched exactly ("MB"); binary ones in any case ("GiB", "gib", "G").
  static const std::array<std::pair<const char*, double>, 6> decimal{{
      {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15}}};
  static const std::array<std::pair<const char*, double>, 9> binary{{
      {"B", 1.0}, {"K", 1024.0}, {"KiB", 1024.0}, {"M", 1048576.0},
      {"MiB", 1048576.0}, {"G", 1073741824.0}, {"GiB", 1073741824.0},
      {"T", 1099511627776.0}, {"TiB", 1099511627776.0}}};
  double number = 0;
  std::string unit;
  if (split_number(text, number, unit)) {
    // A bare number would mean bytes here and GiB in SNAPCACHE_CAPACITY_GIB: refuse to guess.
    if (unit.empty() && number != 0)
      return Status(StatusCode::invalid_argument,
                    fmt::format("size '{0}' has no unit: write {1}B for bytes, or {1}GiB, {1}GB, ... (only 0 may "
                                "be written without one)",
                                text, trim(text)));
    double factor = unit.empty() ? 1.0 : -1.0;
    for (const auto& [name, f] : decimal)
      if (unit == name) factor = f;
    for (const auto& [name, f] : binary)
      if (factor < 0 && equals_ignore_case(unit, name)) factor = f;
    if (factor > 0) return to_bytes(text, number, factor);
  }
  return Status(StatusCode::invalid_argument, fmt::format("invalid size '{}' (expected {})", text, kSizeForms));
}

Result<std::uint64_t> parse_gib(std::string_view text) {
  double number = 0;
  std::string unit;
  if (split_number(text, number, unit) && unit.empty()) return to_bytes(text, number, 1073741824.0);
  return Status(StatusCode::invalid_argument,
                fmt::format("'{}' is not a number of GiB (expected a plain non-negative number such as 2 or 0.5)", text));
}

std::string format_size(std::uint64_t bytes) {
  static const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, names[u]);
}

Result<std::int64_t> parse_age_seconds(std::string_view text) {
  double number = 0;
  std::string unit;
  if (split_number(text, number, unit)) {
    double factor = -1;
    if (unit.empty() || unit == "s") factor = 1;
    else if (unit == "m" || unit == "min") factor = 60;
    else if (unit == "h") factor = 3600;
    else if (unit == "d") factor = 86400;
    else if (unit == "w") factor = 7 * 86400;
    if (factor > 0) return static_cast<std::int64_t>(std::llround(number * factor));
  }
  return Status(StatusCode::invalid_argument,
                fmt::format("invalid age '{}' (expected a number with s, m, h, d or w)", text));
}

std::string format_age(std::int64_t seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds >= 365 * 86400) return fmt::format("{}y", seconds / (365 * 86400));
  if (seconds >= 86400) return fmt::format("{}d", seconds / 86400);
  if (seconds >= 3600) return fmt::format("{}h", seconds / 3600);
  if (seconds >= 60) return fmt::format("{}m", seconds / 60);
  return fmt::format("{}s", seconds);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  if (seconds < 1e-3) return fmt::format("{:.0f} us", seconds * 1e6);
  if (seconds < 1.0) return fmt::format("{:.1f} ms", seconds * 1e3);
  if (seconds < 60.0) return fmt::format("{:.2f} s", seconds);
  const auto whole = static_cast<std::int64_t>(seconds);
  return fmt::format("{}m {}s", whole / 60, whole % 60);
}

std::string format_dims(std::span<const std::int64_t> dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

std::string format_time_from_now(std::int64_t unix_ns) {
  if (unix_ns == util::kLatestUnixNs) return "in the future";  // saturated: after 2262
  const std::int64_t now = util::now_unix_ns();
  if (unix_ns > now) return "in " + format_age(util::elapsed_ns(now, unix_ns) / 1'000'000'000);
  return format_age(util::elapsed_ns(unix_ns, now) / 1'000'000'000) + " ago";
}

std::string format_hex64(std::uint64_t value) { return fmt::format("{:016x}", value); }

}  // namespace snapcache
