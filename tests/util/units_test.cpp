#include "support/catch.h"
#include "snapcache/text.h"

using namespace snapcache;

TEST_CASE("sizes parse in binary and decimal units and reject nonsense", "[units]") {
  CHECK(*parse_size("0") == 0);
  CHECK(*parse_size("0B") == 0);
  CHECK(*parse_size("512B") == 512);
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

TEST_CASE("a size has a unit, decimal digits, and a value that neither wraps nor rounds to nothing", "[units]") {
  auto reason = [](const char* text) {
    auto r = parse_size(text);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::invalid_argument);
    return r.status().message();
  };
  // 1.5e19 B fits no file offset; llround made it 8 PiB.
  CHECK(reason("15000PB").find("larger than the largest size") != std::string::npos);
  CHECK(reason("20000000TiB").find("8 EiB") != std::string::npos);
  CHECK(reason("0x10").find("invalid size '0x10'") != std::string::npos);
  CHECK(reason("0x10GiB").find("invalid size") != std::string::npos);
  CHECK(reason("1e-300").find("invalid size") != std::string::npos);
  CHECK(reason("0.0001B").find("rounds to 0 bytes") != std::string::npos);
  CHECK(reason("0.0000000001KiB").find("rounds to 0 bytes") != std::string::npos);
  // One rule for bare numbers: none but 0 (bytes in a file and GiB in a variable was two rules).
  const std::string bare = reason("500");
  CHECK(bare.find("has no unit") != std::string::npos);
  CHECK(bare.find("500B") != std::string::npos);
  CHECK_FALSE(parse_size("8EiB").is_ok());  // no such unit: invalid, never wrapped
  CHECK(*parse_size("0.5B") == 1);
}

TEST_CASE("a number of GiB follows the size rules in GiB", "[units]") {
  CHECK(*parse_gib("2") == 2 * (1ull << 30));
  CHECK(*parse_gib(" 0.5 ") == (1ull << 29));
  CHECK(*parse_gib("0") == 0);
  for (const char* bad : {"", "0x10", "1e-300", "1e3", "-1", "nan", "inf", "2GiB", "0.0000000000001", "10000000000"}) {
    auto r = parse_gib(bad);
    INFO(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::invalid_argument);
  }
  CHECK(parse_gib("0.0000000000001").status().message().find("rounds to 0 bytes") != std::string::npos);
  CHECK(parse_gib("10000000000").status().message().find("8 EiB") != std::string::npos);
}
