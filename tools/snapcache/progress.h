// One progress line on stderr for the commands that can take a while (verify, export, import,
// gc): rewritten in place with \r, at most ten times a second, and cleared before any other
// output and at the end. Drawn only when stderr is a terminal and the output is not --json: a
// pipe, a file or a test's captured output never holds it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace snapcache::cli {

class ProgressBar {
 public:
  // `total_bytes` 0: the total is not known (an archive read from a pipe, gc's sweep), so the
  // line shows what was done and for how long instead of a bar.
  ProgressBar(std::uint64_t total_bytes, bool enabled);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // The one rule for whether to draw: stderr is a terminal, and the output is text.
  static bool wanted(bool json_output);
  bool enabled() const { return enabled_; }
  void set_label(const std::string& label);
  // Thread-safe; called from the hashing threads.
  void add(std::uint64_t bytes);
  // For work that reports no bytes for a while (gc's sweep, one large entry being compressed):
  // redraws the line every 200 ms from a thread of its own, so the elapsed time moves on.
  void tick_in_background();
  // Clears the line so normal output continues where the bar was.
  void clear();
  // The work is done: no more ticks, the line cleared for good.
  void finish();
  // Prints above the line: clears it, runs `print` (stdout is flushed after it) and lets the line
  // be drawn again below; the ticker cannot draw in between.
  void above(const std::function<void()>& print);

 private:
  void draw(bool force);
  void stop_ticking();

  bool enabled_;
  std::uint64_t total_;
  std::atomic<std::uint64_t> done_{0};
  std::mutex mu_;
  std::string label_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ = false;
  std::thread ticker_;
};

}  // namespace snapcache::cli
