#if SNAPCACHE_CATCH2_MAJOR >= 3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include "snapcache/log.h"

int main(int argc, char* argv[]) {
  // Tests check outcomes, not log lines; keep the output readable unless asked (SNAPCACHE_LOG).
  snapcache::set_log_level(snapcache::LogLevel::error);
  return Catch::Session().run(argc, argv);
}
