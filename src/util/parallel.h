// A minimal parallel loop: hashing and copying are the only parallel work snapcache does, and
// both are short-lived, so plain threads per call are simpler than a pool and cost little.
#pragma once

#include <cstddef>
#include <functional>

#include "snapcache/status.h"

namespace snapcache::util {

// Threads to use for I/O-and-hash work: hardware threads, at most `cap`.
std::size_t worker_count(std::size_t cap = 16);

// Runs fn(i) for i in [0, n) on up to `threads` threads. Stops handing out work after the first
// failure and returns that failure.
Status parallel_for(std::size_t n, std::size_t threads, const std::function<Status(std::size_t)>& fn);

}  // namespace snapcache::util
