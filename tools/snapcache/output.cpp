#include "output.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include "snapcache/text.h"

namespace snapcache::cli {

Table::Table(std::vector<std::string> header, std::string indent)
    : header_(std::move(header)), indent_(std::move(indent)) {}

void Table::right_align(std::size_t column) {
  if (right_.size() <= column) right_.resize(column + 1, false);
  right_[column] = true;
}

void Table::add(std::vector<std::string> row) {
  for (auto& cell : row) cell = printable(cell);
  rows_.push_back(std::move(row));
}

std::string Table::render() const {
  std::vector<std::vector<std::string>> all;
  if (!header_.empty()) all.push_back(header_);
  all.insert(all.end(), rows_.begin(), rows_.end());
  std::vector<std::size_t> width;
  for (const auto& row : all) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : all) {
    std::string line = indent_;
    for (std::size_t i = 0; i < row.size(); ++i) {
      bool right = i < right_.size() && right_[i];
      bool last = i + 1 == row.size();
      std::string pad(width[i] - row[i].size(), ' ');
      if (right) line += pad + row[i];
      else line += last ? row[i] : row[i] + pad;
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

void Table::print() const { std::fputs(render().c_str(), stdout); }

std::string when(std::int64_t unix_ns) {
  if (unix_ns == 0) return "-";
  // A saturated time: the file's real date is later than any that 64-bit nanoseconds hold.
  if (unix_ns == std::numeric_limits<std::int64_t>::max()) return "after 2262-04-11";
  std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string ago(std::int64_t unix_ns) {
  if (unix_ns == 0) return "-";
  return format_time_from_now(unix_ns);
}

std::string size(std::uint64_t bytes) { return format_size(bytes); }

void print_json(const json& value, std::FILE* file) {
  // Paths need not be UTF-8; replacing bad bytes beats failing to print.
  std::string text = value.dump(2, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  text += '\n';
  std::fputs(text.c_str(), file);
}

void print_own_text(const std::string& text) { std::fputs(text.c_str(), stdout); }

std::string process_name(int pid) {
  std::ifstream in(fmt::format("/proc/{}/comm", pid));
  std::string name;
  if (!std::getline(in, name) || name.empty()) return "?";
  return name;
}

bool is_terminal(int fd) { return ::isatty(fd) == 1; }

}  // namespace snapcache::cli
