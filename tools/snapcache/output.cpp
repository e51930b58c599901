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

namespace {

// Characters, not bytes: a printable() cell is UTF-8 (a byte that is not is escaped), and a name
// in another script takes one column a character, not one a byte. (East Asian wide characters
// take two; they are not counted so.)
std::size_t display_width(const std::string& cell) {
  std::size_t n = 0;
  for (unsigned char c : cell) n += (c & 0xC0) != 0x80;  // continuation bytes add no character
  return n;
}

}  // namespace

void Table::reserve(std::vector<std::string> row) {
  if (reserved_.size() < row.size()) reserved_.resize(row.size(), 0);
  for (std::size_t i = 0; i < row.size(); ++i) reserved_[i] = std::max(reserved_[i], display_width(printable(row[i])));
}

std::vector<std::size_t> Table::widths(const std::vector<std::string>* extra) const {
  std::vector<std::size_t> width = reserved_;
  auto widen = [&](const std::vector<std::string>& row) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], display_width(row[i]));
  };
  widen(header_);
  for (const auto& row : rows_) widen(row);
  if (extra != nullptr) widen(*extra);
  return width;
}

std::string Table::line(const std::vector<std::string>& row, const std::vector<std::size_t>& width) const {
  std::string out = indent_;
  for (std::size_t i = 0; i < row.size(); ++i) {
    bool right = i < right_.size() && right_[i];
    bool last = i + 1 == row.size();
    std::string pad(width[i] - display_width(row[i]), ' ');
    if (right) out += pad + row[i];
    else out += last ? row[i] : row[i] + pad;
    if (!last) out += "  ";
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out + "\n";
}

std::string Table::render() const {
  const auto width = widths(nullptr);
  std::string out;
  if (!header_.empty()) out += line(header_, width);
  for (const auto& row : rows_) out += line(row, width);
  return out;
}

void Table::print() const { std::fputs(render().c_str(), stdout); }

void Table::print_header() const {
  if (!header_.empty()) std::fputs(line(header_, widths(nullptr)).c_str(), stdout);
}

void Table::print_row(std::vector<std::string> row) const {
  for (auto& cell : row) cell = printable(cell);
  std::fputs(line(row, widths(&row)).c_str(), stdout);
}

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

void print_error(const std::string& message, const std::vector<std::string>& details) {
  std::fflush(stdout);
  say_to(stderr, "snapcache: {}\n", message);
  for (const auto& line : details) say_to(stderr, "  {}\n", line);
}

std::string process_name(int pid) {
  std::ifstream in(fmt::format("/proc/{}/comm", pid));
  std::string name;
  if (!std::getline(in, name) || name.empty()) return "?";
  return name;
}

bool is_terminal(int fd) { return ::isatty(fd) == 1; }

}  // namespace snapcache::cli
