#include "snapcache/status.h"

#include <cerrno>
#include <cstring>

namespace snapcache {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::not_found: return "not_found";
    case StatusCode::damaged: return "damaged";
    case StatusCode::unfinished: return "unfinished";
    case StatusCode::foreign: return "foreign";
    case StatusCode::mismatch: return "mismatch";
    case StatusCode::no_space: return "no_space";
    case StatusCode::read_only: return "read_only";
    case StatusCode::permission_denied: return "permission_denied";
    case StatusCode::io_error: return "io_error";
    case StatusCode::busy: return "busy";
    case StatusCode::disabled: return "disabled";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::exception: return "exception";
  }
  return "unknown";
}

Status Status::from_errno(int sys_errno, std::string context) {
  StatusCode code = StatusCode::io_error;
  switch (sys_errno) {
    case ENOENT: code = StatusCode::not_found; break;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: code = StatusCode::no_space; break;
    case EROFS: code = StatusCode::read_only; break;
    case EACCES:
    case EPERM: code = StatusCode::permission_denied; break;
    case EWOULDBLOCK: code = StatusCode::busy; break;
    case EINVAL: code = StatusCode::invalid_argument; break;
    default: break;
  }
  return {code, context + ": " + std::strerror(sys_errno), sys_errno};
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(snapcache::to_string(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return {code_, context + ": " + message_, errno_};
}

}  // namespace snapcache
