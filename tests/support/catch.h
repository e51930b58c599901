// One include for Catch2 v2 (Debian 12) and v3 (the GPU machine).
#pragma once

#if SNAPCACHE_CATCH2_MAJOR >= 3
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#else
#include <catch2/catch.hpp>
#endif
