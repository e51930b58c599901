#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "output.h"

namespace snapcache::cli {

ProgressBar::ProgressBar(std::uint64_t total_bytes, bool enabled) : enabled_(enabled), total_(total_bytes) {}

ProgressBar::~ProgressBar() { clear(); }

bool ProgressBar::wanted() { return is_terminal(STDOUT_FILENO) && is_terminal(STDERR_FILENO); }

void ProgressBar::set_label(const std::string& label) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  label_ = printable(label);
}

void ProgressBar::add(std::uint64_t bytes) {
  done_ += bytes;
  if (enabled_) draw(false);
}

void ProgressBar::draw(bool force) {
  // Hashing threads must not queue up behind the terminal: whoever finds the lock taken skips.
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const std::uint64_t done = std::min(done_.load(), total_);
  const double fraction = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const double seconds = std::chrono::duration<double>(now - started_).count();
  const auto rate = seconds > 0 ? static_cast<std::uint64_t>(static_cast<double>(done) / seconds) : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar = std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(kWidth - filled), '.');
  std::string line = fmt::format("\r[{}] {:3.0f}%  {} / {}  {}/s  {}\033[K", bar, fraction * 100, size(done),
                                 size(total_), size(rate), label_);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace snapcache::cli
