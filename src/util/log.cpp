#include "snapcache/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace snapcache {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("SNAPCACHE_LOG");
  if (v == nullptr) return LogLevel::info;
  if (std::strcmp(v, "error") == 0 || std::strcmp(v, "quiet") == 0) return LogLevel::error;
  if (std::strcmp(v, "warn") == 0) return LogLevel::warn;
  if (std::strcmp(v, "debug") == 0) return LogLevel::debug;
  return LogLevel::info;
}

struct LogState {
  std::mutex mu;
  LogLevel level = level_from_env();
  std::function<void(LogLevel, std::string_view)> sink;
};

LogState& state() {
  static LogState s;
  return s;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

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
  std::lock_guard lock(state().mu);
  state().sink = std::move(sink);
}

void log(LogLevel level, std::string_view message) {
  std::lock_guard lock(state().mu);
  if (static_cast<int>(level) > static_cast<int>(state().level)) return;
  if (state().sink) {
    state().sink(level, message);
  } else {
    std::string line = std::string("snapcache[") + level_name(level) + "] ";
    line.append(message);
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
}

}  // namespace snapcache
