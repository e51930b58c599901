#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "output.h"
#include "snapcache/text.h"

namespace snapcache::cli {

ProgressBar::ProgressBar(std::uint64_t total_bytes, bool enabled) : enabled_(enabled), total_(total_bytes) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::finish() {
  stop_ticking();
  clear();
  enabled_ = false;
}

// stdout may be a pipe (`export -o -`) or a file while a person watches stderr: the line goes
// where they look, and never into what --json or a pipe carries.
bool ProgressBar::wanted(bool json_output) { return !json_output && is_terminal(STDERR_FILENO); }

void ProgressBar::set_label(const std::string& label) {
  if (!enabled_) return;
  {
    std::lock_guard lock(mu_);
    label_ = printable(label);
  }
  draw(true);
}

void ProgressBar::add(std::uint64_t bytes) {
  done_ += bytes;
  if (enabled_) draw(false);
}

void ProgressBar::tick_in_background() {
  if (!enabled_ || ticker_.joinable()) return;
  draw(true);
  ticker_ = std::thread([this] {
    std::unique_lock lock(tick_mu_);
    while (!tick_cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; })) {
      lock.unlock();
      draw(false);
      lock.lock();
    }
  });
}

void ProgressBar::stop_ticking() {
  if (!ticker_.joinable()) return;
  {
    std::lock_guard lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  ticker_.join();
}

void ProgressBar::draw(bool force) {
  // Hashing threads must not queue up behind the terminal: whoever finds the lock taken skips.
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - started_).count();
  const std::uint64_t done = total_ ? std::min(done_.load(), total_) : done_.load();
  const auto rate = seconds > 0 ? static_cast<std::uint64_t>(static_cast<double>(done) / seconds) : 0;
  std::string line;
  if (total_ == 0) {
    line = fmt::format("\r{}  {}/s  {}  {}\033[K", size(done), size(rate), format_duration(seconds), label_);
  } else {
    const double fraction = static_cast<double>(done) / static_cast<double>(total_);
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    const std::string bar = std::string(static_cast<std::size_t>(filled), '#') +
                            std::string(static_cast<std::size_t>(kWidth - filled), '.');
    line = fmt::format("\r[{}] {:3.0f}%  {} / {}  {}/s  {}\033[K", bar, fraction * 100, size(done), size(total_),
                       size(rate), label_);
  }
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

void ProgressBar::above(const std::function<void()>& print) {
  if (!enabled_) {
    print();
    return;
  }
  std::lock_guard lock(mu_);
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }
  print();
  std::fflush(stdout);
  last_draw_ = {};  // drawn again at the next chance, below what was printed
}

}  // namespace snapcache::cli
