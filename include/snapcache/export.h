// SNAPCACHE_API marks what the shared library exports. The library is built with hidden visibility
// (see src/CMakeLists.txt), so only declarations carrying this macro are part of the ABI: the
// public headers' classes and functions, nothing in src/.
#pragma once

#define SNAPCACHE_API __attribute__((visibility("default")))
