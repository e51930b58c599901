// Plain-text output: aligned tables, lines, times and ages, JSON on stdout. Every command prints
// through these alone: what they print is made printable() on the way (names and reasons come from
// caches, archives, donors and other processes; an escape sequence or a newline in one must not
// reach the terminal or start a line of its own), and JSON is ASCII with everything else escaped.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "snapcache/printable.h"

namespace snapcache::cli {

// Keys in the order they are written: the documented order, easier to read than sorted.
using json = nlohmann::ordered_json;

// Columns padded to their widest cell (counted in characters, not bytes); the last column is never
// padded, so lines end cleanly. Each cell is made printable() as it is added.
class Table {
 public:
  explicit Table(std::vector<std::string> header = {}, std::string indent = "");
  void right_align(std::size_t column);  // numbers and sizes
  void add(std::vector<std::string> row);
  bool empty() const { return rows_.empty(); }
  std::string render() const;
  void print() const;

  // Rows printed one at a time as results come (verify's, between progress bars), aligned as if
  // the table held them all: reserve() first the cells known beforehand (each entry's component),
  // so that every column is already as wide as any row will make it.
  void reserve(std::vector<std::string> row);
  void print_header() const;
  void print_row(std::vector<std::string> row) const;

 private:
  std::vector<std::size_t> widths(const std::vector<std::string>* extra) const;
  std::string line(const std::vector<std::string>& row, const std::vector<std::size_t>& width) const;

  std::vector<std::string> header_;
  std::string indent_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::size_t> reserved_;
};

// "2025-06-01 12:00:03" in local time; "-" for 0; "after 2262-04-11" for a saturated time.
std::string when(std::int64_t unix_ns);
// "3d ago", "12m ago", "in 9y" (a time in the future: a clock that was wrong); "-" for 0.
std::string ago(std::int64_t unix_ns);
// "2.0 MiB"
std::string size(std::uint64_t bytes);

// Two-space indented JSON and a newline, on stdout (or `file`). ASCII: every other character is a
// \u escape, so no control character (C0, DEL, C1) or bidirectional override is written raw, and a
// JSON reader gets the exact names back.
void print_json(const json& value, std::FILE* file = stdout);

// The command's own text as it is, its help: nothing in it came from outside.
void print_own_text(const std::string& text);

namespace detail {
// A string argument of say() made printable; numbers and the like pass as they are.
template <class T>
auto printable_argument(T&& value) {
  if constexpr (std::is_convertible_v<const std::decay_t<T>&, std::string_view>)
    return printable(std::string_view(value));
  else
    return std::decay_t<T>(std::forward<T>(value));
}
}  // namespace detail

// fmt::print with every string argument made printable(); the format string is the command's own
// (its newlines and padding are kept). say_to(stderr, ...) for messages beside an archive on stdout.
template <class... Args>
void say_to(std::FILE* file, fmt::format_string<Args...> format, Args&&... args) {
  auto values = std::make_tuple(detail::printable_argument(std::forward<Args>(args))...);
  std::apply([&](auto&... v) { fmt::vprint(file, fmt::string_view(format), fmt::make_format_args(v...)); }, values);
}
template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  say_to(stdout, format, std::forward<Args>(args)...);
}

// The one way the command reports an error, on stderr: "snapcache: <message>", then each detail
// line indented under it (an ambiguous prefix's candidates), all printed escaped. Whatever stdout
// holds is flushed first, so the error comes after it.
void print_error(const std::string& message, const std::vector<std::string>& details = {});

// The command name of a process ("python3"), "?" when it is gone or hidden.
std::string process_name(int pid);

bool is_terminal(int fd);

}  // namespace snapcache::cli
