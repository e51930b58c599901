// A one-line progress bar with throughput on stderr, for long rehashes. Drawn only when stdout
// and stderr are both terminals: piped or captured output stays free of control characters.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace snapcache::cli {

class ProgressBar {
 public:
  ProgressBar(std::uint64_t total_bytes, bool enabled);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  static bool wanted();  // on a terminal
  void set_label(const std::string& label);
  // Thread-safe; called from the hashing threads.
  void add(std::uint64_t bytes);
  // Clears the line so normal output continues where the bar was.
  void clear();

 private:
  void draw(bool force);

  bool enabled_;
  std::uint64_t total_;
  std::atomic<std::uint64_t> done_{0};
  std::mutex mu_;
  std::string label_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace snapcache::cli
