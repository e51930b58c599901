// Plain-text output: aligned tables, times and ages, JSON on stdout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace snapcache::cli {

// Keys in the order they are written: the documented order, easier to read than sorted.
using json = nlohmann::ordered_json;

// Columns padded to their widest cell; the last column is never padded, so lines end cleanly.
class Table {
 public:
  explicit Table(std::vector<std::string> header = {}, std::string indent = "");
  void right_align(std::size_t column);  // numbers and sizes
  void add(std::vector<std::string> row);
  bool empty() const { return rows_.empty(); }
  std::string render() const;
  void print() const;

 private:
  std::vector<std::string> header_;
  std::string indent_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// "2025-06-01 12:00:03" in local time; "-" for 0; "after 2262-04-11" for a saturated time.
std::string when(std::int64_t unix_ns);
// "3d ago", "12m ago", "in 9y" (a time in the future: a clock that was wrong); "-" for 0.
std::string ago(std::int64_t unix_ns);
// "2.0 MiB"
std::string size(std::uint64_t bytes);

// Two-space indented JSON and a newline, on stdout.
void print_json(const json& value);

// The command name of a process ("python3"), "?" when it is gone or hidden.
std::string process_name(int pid);

bool is_terminal(int fd);

}  // namespace snapcache::cli
