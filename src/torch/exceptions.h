// Exceptions become Status at the library's boundary. libtorch reports errors by throwing
// c10::Error, and the hooks a plan carries (ordinary loader, post-load methods, refresh hooks,
// tiers, uploaders) may throw anything; a load must end in a Status either way.
#pragma once

#include "snapcache/status.h"

namespace snapcache {

// Call only inside a catch block: the exception being handled as a Status (code `exception`, or
// `no_space` for an allocation failure). c10::Error gives its message without the C++ backtrace.
Status status_of_current_exception();

// Runs `f` (returning Status or Result<T>) and turns anything it throws into a Status. Callers add
// their context (`.with_context("post-load method x")`) to thrown and returned errors alike.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return status_of_current_exception();
  }
}

}  // namespace snapcache
