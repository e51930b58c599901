#include "support/catch.h"
#include "snapcache/text.h"

using namespace snapcache;

TEST_CASE("sizes parse in binary and decimal units and reject nonsense", "[units]") {
  CHECK(*parse_size("0") == 0);
  CHECK(*parse_size("512") == 512);
  CHECK(*parse_size("4KiB") == 4096);
  CHECK(*parse_size("1.5 GiB") == 1610612736ull);
  CHECK(*parse_size("2g") == 2147483648ull);
  CHECK(*parse_size("10GB") == 10000000000ull);
  CHECK(*parse_size("3 MB") == 3000000ull);
  for (const char* bad : {"", "GiB", "-1GiB", "1.2.3", "12 parsecs", "1e3"}) {
    auto r = parse_size(bad);
    CHECK_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::invalid_argument);
  }
}

TEST_CASE("sizes and ages format with units", "[units]") {
  CHECK(format_size(512) == "512 B");
  CHECK(format_size(1536) == "1.5 KiB");
  CHECK(format_size(128ull << 30) == "128.0 GiB");
  CHECK(*parse_age_seconds("7d") == 7 * 86400);
  CHECK(*parse_age_seconds("12h") == 12 * 3600);
  CHECK(*parse_age_seconds("90") == 90);
  CHECK_FALSE(parse_age_seconds("soon").is_ok());
  CHECK(format_age(3 * 86400 + 5) == "3d");
  CHECK(format_age(59) == "59s");
}
