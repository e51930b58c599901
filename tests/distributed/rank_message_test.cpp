// What another process wrote into the group's channel, read field by field
// (src/distributed/rank_message.h): every field checked for its type and range before it is used,
// a refusal naming the message, the field and what a rank sends. The processes that write such
// messages on a real port are in group_exchange_test.cpp.
#include <string>

#include "distributed/rank_message.h"
#include "support/group_fixture.h"

namespace snapcache::test {

using distributed::RankMessage;

TEST_CASE("a rank message is read field by field and refused by name when a field is not what a rank sends",
          "[group][message]") {
  const std::string whose = "rank 1's message (outcome of the load)";
  auto good = RankMessage::read(whose, R"({"ok": true, "code": 0, "error": "", "publish": "published"})");
  REQUIRE(good.is_ok());
  CHECK(good->flag("ok"));
  CHECK(good->integer("code", 0, 14) == 0);
  CHECK(good->text("error").empty());
  CHECK(good->optional_text("publish") == std::optional<std::string>("published"));
  CHECK(good->optional_text("publish_reason") == std::nullopt);  // a field a rank may leave out
  CHECK(good->one_of("publish", {"published", "failed"}) == "published");
  CHECK(good->status().is_ok());

  // Each: a message, the field read, and what the refusal says.
  struct Bad {
    std::string text;
    std::string read;  // "flag ok", "integer code", "text tier", "optional publish", "one_of outcome"
    std::string says;
  };
  const Bad bad = GENERATE(values<Bad>({
      {R"({"tier": ["x"]})", "text tier", "its field 'tier' is an array, where a rank sends a string"},
      {R"({"tier": {"name": ["x"]}})", "text tier", "its field 'tier' is an object, where a rank sends a string"},
      {R"({"tier": true})", "text tier", "its field 'tier' is true, where a rank sends a string"},
      {R"({"reason": "x"})", "text tier", "it has no field 'tier', where a rank sends a string"},
      {R"({"publish": 7})", "optional publish", "its field 'publish' is an integer, where a rank sends a string"},
      {R"({"ok": "yes"})", "flag ok", "its field 'ok' is a string, where a rank sends true or false"},
      {R"({"ok": null})", "flag ok", "its field 'ok' is null, where a rank sends true or false"},
      {R"({"code": "5"})", "integer code", "its field 'code' is a string, where a rank sends an integer from 0 to 14"},
      {R"({"code": 5.5})", "integer code", "its field 'code' is a floating-point number"},
      {R"({"code": 15})", "integer code", "its field 'code' is 15, where a rank sends an integer from 0 to 14"},
      {R"({"code": -1})", "integer code", "its field 'code' is -1, where a rank sends an integer from 0 to 14"},
      // Above INT64_MAX, which a careless read would wrap into range.
      {R"({"code": 18446744073709551615})", "integer code", "its field 'code' is 18446744073709551615"},
      {R"({"outcome": "served\u001b[31m"})", "one_of outcome", "its field 'outcome' is 'served\x1b[31m', where a rank "
                                                                 "sends one of served, missed"},
  }));
  INFO(bad.text << " (" << bad.read << ")");
  auto m = RankMessage::read(whose, bad.text);
  REQUIRE(m.is_ok());
  const auto space = bad.read.find(' ');
  const std::string how = bad.read.substr(0, space);
  const std::string field = bad.read.substr(space + 1);
  if (how == "text") CHECK(m->text(field.c_str()).empty());
  else if (how == "optional") CHECK(m->optional_text(field.c_str()) == std::optional<std::string>(""));
  else if (how == "flag") CHECK_FALSE(m->flag(field.c_str()));
  else if (how == "integer") CHECK(m->integer(field.c_str(), 0, 14) == 0);
  else CHECK(m->one_of(field.c_str(), {"served", "missed"}).empty());
  REQUIRE_FALSE(m->status().is_ok());
  CHECK(m->status().code() == StatusCode::invalid_argument);
  REQUIRE_TEXT(m->status().message(), starts_with, "rank group: " + whose + " is malformed: ");
  REQUIRE_TEXT(m->status().message(), contains, bad.says);
  REQUIRE_TEXT(m->status().message(), contains, "another process may have written it");
  // The first field that was wrong stays the reason.
  (void)m->text("another");
  REQUIRE_TEXT(m->status().message(), contains, bad.says);
}

TEST_CASE("a rank message that is not a JSON object, or is larger than any rank sends, is refused by name",
          "[group][message]") {
  for (const std::string& text : {std::string("{\"tier\": ["), std::string("[1, 2]"), std::string("\"served\""),
                                  std::string(), "{\"reason\": \"" + std::string(70000, 'x') + "\"}"}) {
    INFO(text.substr(0, 40));
    auto m = RankMessage::read("rank 3's message (answer from the snapshot tier)", text);
    REQUIRE_FALSE(m.is_ok());
    REQUIRE_TEXT(m.status().message(), starts_with,
                 "rank group: rank 3's message (answer from the snapshot tier) is malformed: it is ");
    REQUIRE(m.status().message().size() < 600);
  }
}

}  // namespace snapcache::test
