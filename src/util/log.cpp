#include "snapcache/log.h"
#include "snapcache/printable.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

namespace snapcache {
namespace {

using Sink = std::function<void(LogLevel, std::string_view)>;

LogLevel level_from_env() {
  const char* v = std::getenv("SNAPCACHE_LOG");
  if (v == nullptr) return LogLevel::info;
  if (std::strcmp(v, "error") == 0 || std::strcmp(v, "quiet") == 0) return LogLevel::error;
  if (std::strcmp(v, "warn") == 0) return LogLevel::warn;
  if (std::strcmp(v, "debug") == 0) return LogLevel::debug;
  return LogLevel::info;
}

// The sink is called outside the lock: it may take locks of its own (a Python sink takes the
// GIL, which another thread may hold while it logs). set_log_sink waits for the calls of the old
// sink running on other threads, so a replaced sink is never called after it returns.
struct LogState {
  std::mutex mu;
  std::condition_variable idle;
  LogLevel level = level_from_env();
  std::shared_ptr<const Sink> sink;
  int calls = 0;  // sink calls in progress, all threads
};

LogState& state() {
  static LogState s;
  return s;
}

thread_local int calls_on_this_thread = 0;  // a sink that logs or replaces the sink itself

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

// Counts a call into the sink for its duration, however it ends.
class SinkCall {
 public:
  SinkCall() { ++calls_on_this_thread; }
  ~SinkCall() {
    --calls_on_this_thread;
    {
      std::lock_guard lock(state().mu);
      --state().calls;
    }
    state().idle.notify_all();
  }
  SinkCall(const SinkCall&) = delete;
  SinkCall& operator=(const SinkCall&) = delete;
};

}  // namespace

void set_log_level(LogLevel level) {
  std::lock_guard lock(state().mu);
  state().level = level;
}

LogLevel log_level() {
  std::lock_guard lock(state().mu);
  return state().level;
}

void set_log_sink(std::function<void(LogLevel, std::string_view)> sink) {
  std::unique_lock lock(state().mu);
  state().sink = sink ? std::make_shared<const Sink>(std::move(sink)) : nullptr;
  state().idle.wait(lock, [] { return state().calls - calls_on_this_thread == 0; });
}

void log(LogLevel level, std::string_view message) {
  std::shared_ptr<const Sink> sink;
  {
    std::lock_guard lock(state().mu);
    if (static_cast<int>(level) > static_cast<int>(state().level)) return;
    sink = state().sink;
    if (sink) ++state().calls;
  }
  if (sink) {
    SinkCall call;
    (*sink)(level, message);
    return;
  }
  log_to_stderr(level, message);
}

void log_to_stderr(LogLevel level, std::string_view message) {
  const std::string line = std::string("snapcache[") + level_name(level) + "] " + printable(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace snapcache
