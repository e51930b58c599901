// fmt, checked: the torch wheel bundles a newer fmt in its include directory, which would shadow
// Debian's in every file that sees torch headers. The build puts Debian's first (see
// cmake/SnapcacheDependencies.cmake); this guard fails the compile if that ever stops holding.
#pragma once

#include <fmt/format.h>

#if defined(SNAPCACHE_EXPECTED_FMT_VERSION)
static_assert(FMT_VERSION == SNAPCACHE_EXPECTED_FMT_VERSION,
              "a different fmt than the one CMake found is being used (torch's bundled fmt?)");
#endif
