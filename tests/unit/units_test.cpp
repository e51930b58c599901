#include "support/catch.h"
#include "util/units.h"

using namespace snapcache;

TEST_CASE("sizes parse in binary and decimal units and reject nonsense", "[units]") {
  CHECK(*util::parse_size("0") == 0);
  CHECK(*util::parse_size("512") == 512);
  CHECK(*util::parse_size("4KiB") == 4096);
  CHECK(*util::parse_size("1.5 GiB") == 1610612736ull);
  CHECK(*util::parse_size("2g") == 2147483648ull);
  CHECK(*util::parse_size("10GB") == 10000000000ull);
  CHECK(*util::parse_size("3 MB") == 3000000ull);
  for (const char* bad : {"", "GiB", "-1GiB", "1.2.3", "12 parsecs", "1e3"}) {
    auto r = util::parse_size(bad);
    CHECK_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::invalid_argument);
  }
}

TEST_CASE("sizes and ages format with units", "[units]") {
  CHECK(util::format_size(512) == "512 B");
  CHECK(util::format_size(1536) == "1.5 KiB");
  CHECK(util::format_size(128ull << 30) == "128.0 GiB");
  CHECK(*util::parse_age_seconds("7d") == 7 * 86400);
  CHECK(*util::parse_age_seconds("12h") == 12 * 3600);
  CHECK(*util::parse_age_seconds("90") == 90);
  CHECK_FALSE(util::parse_age_seconds("soon").is_ok());
  CHECK(util::format_age(3 * 86400 + 5) == "3d");
  CHECK(util::format_age(59) == "59s");
}
