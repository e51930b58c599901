// Outcomes that callers act on. A Status is a value, never an exception: a loader that gets a
// non-ok Status keeps its ordinary path working.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "snapcache/export.h"

namespace snapcache {

enum class StatusCode : std::uint8_t {
  ok,
  not_found,          // no such entry or file
  damaged,            // data or manifest failed a check; never reused
  unfinished,         // an entry without its commit
  foreign,            // not a snapcache entry, or a format version we do not read
  mismatch,           // the entry differs from what the caller expects
  no_space,           // ENOSPC, EDQUOT, or the capacity/reserve rules leave no room
  read_only,          // EROFS
  permission_denied,  // EACCES, EPERM
  io_error,           // EIO and every other system error
  busy,               // leased, or locked by another process
  disabled,           // the cache is switched off by configuration
  invalid_argument,   // bad input from the caller or the user
  unsupported,        // a tensor or request snapcache cannot represent
  exception,          // a library or a user hook threw; the message is the exception's
};

SNAPCACHE_API const char* to_string(StatusCode code);

// [[nodiscard]]: an outcome dropped on the floor is a failure nobody hears about. Ignore one only
// on purpose, with (void) and the reason.
class [[nodiscard]] SNAPCACHE_API Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  static Status ok() { return {}; }
  // Maps an errno to the StatusCode a caller can act on; `context` names the operation and path.
  static Status from_errno(int sys_errno, std::string context);

  bool is_ok() const { return code_ == StatusCode::ok; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  int sys_errno() const { return errno_; }
  const std::string& message() const { return message_; }
  // "no_space: write /cache/x/data-0000.bin: No space left on device"
  std::string to_string() const;

  // Prefixes more context: "publish dit: " + message.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  int errno_ = 0;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }
  T value_or(T fallback) const { return is_ok() ? std::get<0>(v_) : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace snapcache

#define SNAPCACHE_RETURN_IF_ERROR(expr)            \
  do {                                             \
    ::snapcache::Status _snapcache_st = (expr);    \
    if (!_snapcache_st.is_ok()) return _snapcache_st; \
  } while (false)
