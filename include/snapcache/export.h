// SNAPCACHE_API marks what the shared library exports. The library is built with hidden visibility
// (see src/CMakeLists.txt), so only declarations carrying this macro are part of the ABI: the
// public headers' classes and functions, nothing in src/.
#pragma once

// The standard attribute form, so it combines with others: `class [[nodiscard]] SNAPCACHE_API Status`.
#define SNAPCACHE_API [[gnu::visibility("default")]]
