// What this process writes to stderr while one of these lives, read back as bytes: the library's
// default log sink writes there, and tests check the lines it printed (escaped, one per message).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "support/temp_dir.h"

namespace snapcache::test {

class CapturedStderr {
 public:
  CapturedStderr() : file_(dir_ / "stderr") {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    const int fd = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (saved_ < 0 || fd < 0 || ::dup2(fd, STDERR_FILENO) != STDERR_FILENO)
      throw std::runtime_error("cannot redirect stderr to " + file_);
    ::close(fd);
  }
  ~CapturedStderr() { restore(); }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;

  // Puts stderr back and returns everything written to it meanwhile.
  std::string text() {
    restore();
    return read_bytes(file_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }

  TempDir dir_;
  std::string file_;
  int saved_ = -1;
};

}  // namespace snapcache::test
