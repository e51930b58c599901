#include "distributed/rank_message.h"

#include <cstdint>

#include "util/fmt.h"

namespace snapcache::distributed {
namespace {

// A peer's text quoted in a refusal: enough to recognise, never the whole of a forged megabyte.
constexpr std::size_t kQuotedBytes = 40;

// What a value is, as a person says it: "an array", "a string", "null", "true".
std::string kind_of(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "an integer";
    case nlohmann::json::value_t::number_float: return "a floating-point number";
    default: return "binary data";
  }
}

std::string in_quotes(const std::string& text) {
  return "'" + (text.size() <= kQuotedBytes ? text : text.substr(0, kQuotedBytes) + "...") + "'";
}

}  // namespace

Status malformed_rank_message(const std::string& whose, const std::string& why) {
  return Status(StatusCode::invalid_argument,
                fmt::format("rank group: {} is malformed: {}; no snapcache rank writes that: another process may "
                            "have written it (anyone who reaches the group's c10d store or process group can), or a "
                            "rank runs another version of snapcache",
                            whose, why));
}

Result<RankMessage> RankMessage::read(std::string whose, std::string_view text) {
  if (text.size() > kMaxRankMessageBytes)
    return malformed_rank_message(whose, fmt::format("it is {} bytes, and a rank's message is at most {}", text.size(),
                                                     kMaxRankMessageBytes));
  auto fields = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (fields.is_discarded()) return malformed_rank_message(whose, "it is not JSON");
  if (!fields.is_object())
    return malformed_rank_message(whose, fmt::format("it is {}, where a rank sends a JSON object", kind_of(fields)));
  return RankMessage(std::move(whose), std::move(fields));
}

void RankMessage::malformed(const std::string& why) {
  if (status_) status_ = malformed_rank_message(whose_, why);
}

const nlohmann::json* RankMessage::find(const char* field, const char* expected, bool optional) {
  auto it = fields_.find(field);
  if (it != fields_.end()) return &*it;
  if (!optional) malformed(fmt::format("it has no field '{}', where a rank sends {}", field, expected));
  return nullptr;
}

std::optional<std::string> RankMessage::optional_text(const char* field) {
  const nlohmann::json* value = find(field, "a string", /*optional=*/true);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) {
    malformed(fmt::format("its field '{}' is {}, where a rank sends a string", field, kind_of(*value)));
    return std::string();
  }
  return value->get<std::string>();
}

std::string RankMessage::text(const char* field) {
  if (find(field, "a string", /*optional=*/false) == nullptr) return {};
  return *optional_text(field);
}

std::string RankMessage::one_of(const char* field, std::initializer_list<std::string_view> allowed) {
  std::string value = text(field);
  if (!status_) return {};
  for (std::string_view a : allowed)
    if (value == a) return value;
  malformed(fmt::format("its field '{}' is {}, where a rank sends one of {}", field, in_quotes(value),
                        fmt::join(allowed, ", ")));
  return {};
}

bool RankMessage::flag(const char* field) {
  const nlohmann::json* value = find(field, "true or false", /*optional=*/false);
  if (value == nullptr) return false;
  if (!value->is_boolean()) {
    malformed(fmt::format("its field '{}' is {}, where a rank sends true or false", field, kind_of(*value)));
    return false;
  }
  return value->get<bool>();
}

std::optional<std::int64_t> RankMessage::optional_integer(const char* field, std::int64_t min, std::int64_t max) {
  const nlohmann::json* value = find(field, "an integer", /*optional=*/true);
  if (value == nullptr) return std::nullopt;
  const std::string expected = fmt::format("an integer from {} to {}", min, max);
  if (!value->is_number_integer()) {
    malformed(fmt::format("its field '{}' is {}, where a rank sends {}", field, kind_of(*value), expected));
    return 0;
  }
  // An unsigned value above INT64_MAX is out of every range here; read as int64 it would wrap.
  const bool fits = !value->is_number_unsigned() ||
                    value->get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX);
  const std::int64_t number = fits ? value->get<std::int64_t>() : 0;
  if (!fits || number < min || number > max) {
    malformed(fmt::format("its field '{}' is {}, where a rank sends {}", field, value->dump(), expected));
    return 0;
  }
  return number;
}

std::int64_t RankMessage::integer(const char* field, std::int64_t min, std::int64_t max) {
  if (find(field, "an integer", /*optional=*/false) == nullptr) return 0;
  return *optional_integer(field, min, max);
}

}  // namespace snapcache::distributed
