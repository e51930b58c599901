// One include for Catch2 v2 (Debian 12) and v3 (the GPU machine).
#pragma once

// c10's logging defines a glog-style CHECK that aborts the test binary. Included first and then
// undefined, it cannot replace Catch's CHECK when a torch header comes after this one (its include
// guard keeps it from defining CHECK again).
#if __has_include(<c10/util/Logging.h>)
#include <c10/util/Logging.h>
#undef CHECK
#endif

#if SNAPCACHE_CATCH2_MAJOR >= 3
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#else
#include <catch2/catch.hpp>
#endif
