// What another process wrote into the group's channel (a rank's message in an exchange, the
// group's start or a claim in its store), read one field at a time. Anyone who reaches the channel
// can write it (a c10d store has no authentication), and a rank of another snapcache version may
// send other fields, so nothing in it is taken on trust: every field is checked for its type (and
// its range) before it is used, and a message that is not what a rank sends is refused by name,
// never as a JSON library's exception. Every reader of such text goes through here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "snapcache/status.h"

namespace snapcache::distributed {

// A rank's message is a few lines of JSON (its reasons are clipped to a few hundred bytes before
// they are sent); anything much larger was written by something else.
inline constexpr std::size_t kMaxRankMessageBytes = 64 * 1024;

class RankMessage {
 public:
  // `text` as a JSON object of at most kMaxRankMessageBytes; else the refusal. `whose` names the
  // message in every refusal: "rank 2's message (answer from the snapshot tier)".
  static Result<RankMessage> read(std::string whose, std::string_view text);

  // A field's value when it is present and of its type. Otherwise the message is malformed: the
  // call returns an empty value, and status() names the first field that was not as expected
  // (later calls change nothing), so a caller reads every field it needs and then asks once.
  std::string text(const char* field);
  // A string that is one of `allowed`.
  std::string one_of(const char* field, std::initializer_list<std::string_view> allowed);
  bool flag(const char* field);
  std::int64_t integer(const char* field, std::int64_t min, std::int64_t max);
  // The same for a field a rank may leave out: nullopt when it is absent (still malformed when it
  // is there with another type).
  std::optional<std::string> optional_text(const char* field);
  std::optional<std::int64_t> optional_integer(const char* field, std::int64_t min, std::int64_t max);

  // Ok, or why the message is not one a rank sends (invalid_argument).
  const Status& status() const { return status_; }

 private:
  RankMessage(std::string whose, nlohmann::json fields) : whose_(std::move(whose)), fields_(std::move(fields)) {}
  // The field's value, or nullptr (and, unless `optional`, the message malformed) when absent.
  const nlohmann::json* find(const char* field, const char* expected, bool optional);
  void malformed(const std::string& why);

  std::string whose_;
  nlohmann::json fields_;
  Status status_;
};

// The refusal of a message that is not what a rank sends: "rank group: <whose> is malformed:
// <why>; ...", saying who may have written it.
Status malformed_rank_message(const std::string& whose, const std::string& why);

}  // namespace snapcache::distributed
