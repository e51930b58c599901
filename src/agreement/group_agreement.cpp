// The messages ranks exchange to agree on a load, and the group's decision in words.
#include "agreement/group_agreement.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>

#include "distributed/rank_list.h"
#include "util/fmt.h"
#include "snapcache/extend/tier.h"
#include "snapcache/rank_group.h"

namespace snapcache::agreement {
namespace {

using distributed::rank_list;

// A reason is a line for a person; a few hundred bytes of each rank's are plenty in a report.
constexpr std::size_t kMaxReasonBytes = 600;

std::string clipped(const std::string& text) {
  return text.size() <= kMaxReasonBytes ? text : text.substr(0, kMaxReasonBytes) + "...";
}

std::string ranks_word(std::size_t n) { return n == 1 ? "rank" : "ranks"; }

std::string on_every_rank(std::size_t n) { return n == 1 ? "on the group's only rank" : fmt::format("on all {} ranks", n); }

// A peer's error code, as it sent it; anything that is not an error code reads as a transport error.
StatusCode peer_code(int code) {
  return code > static_cast<int>(StatusCode::ok) && code <= static_cast<int>(StatusCode::exception)
             ? static_cast<StatusCode>(code)
             : StatusCode::io_error;
}

}  // namespace

GroupAgreement::GroupAgreement(RankGroup& group, LoadReport& report, GroupIdentity identity)
    : group_(group), report_(report), identity_(std::move(identity)) {
  GroupReport& g = report_.group.emplace();
  g.rank = group_.rank();
  g.size = group_.size();
  g.ranks.resize(static_cast<std::size_t>(std::max(g.size, 0)));
}

Status GroupAgreement::leave(Status why) {
  group_.leave(clipped(why.message()));
  return why;
}

Result<std::vector<distributed::RankMessage>> GroupAgreement::exchange(nlohmann::json mine, const std::string& step) {
  mine["group"] = identity_.id;
  mine["about"] = identity_.about;
  mine["step"] = step;
  // A reason may hold bytes that are not UTF-8 (a file's name): replaced, so the message still goes out.
  const std::string sent = mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const auto started = std::chrono::steady_clock::now();
  auto all = group_.exchange(sent);
  report_.group->agreement_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!all) return all.status();
  if (static_cast<int>(all->size()) != group_.size())
    return Status(StatusCode::io_error, fmt::format("rank group: {} messages from a group of {}", all->size(), group_.size()));
  const std::size_t me = static_cast<std::size_t>(group_.rank());
  // Only this rank can see that its own message came back changed; the others would go on with
  // the copy, so it tells them as it leaves.
  if ((*all)[me] != sent)
    return leave(Status(StatusCode::invalid_argument,
                        fmt::format("rank group: rank {}'s own message ({}) came back changed: another process "
                                    "overwrote it (anyone who reaches the group's c10d store can write to it); the "
                                    "group's load is not safe",
                                    me, step)));
  std::vector<distributed::RankMessage> out;
  out.reserve(all->size());
  for (std::size_t r = 0; r < all->size(); ++r) {
    // This rank's own too: it is the text it sent (checked above), read as every other.
    auto message = distributed::RankMessage::read(fmt::format("rank {}'s message ({})", r, step), (*all)[r]);
    if (!message) return message.status();
    // A message of no group, or of another, says so before anything else: its other fields are
    // another load's.
    const std::string group = message->optional_text("group").value_or("");
    const std::string about = message->optional_text("about").value_or("");
    if (!message->status()) return message->status();
    if (group != identity_.id)
      return Status(StatusCode::invalid_argument,
                    fmt::format("rank group: rank {}'s message belongs to group {} ({}), not this group {}: the ranks "
                                "load different models, or a process of another group (or of none) wrote it",
                                r, group.empty() ? "(none)" : clipped(group.substr(0, 6)), clipped(about),
                                identity_.name()));
    const std::string their_step = message->text("step");
    if (!message->status()) return message->status();
    if (their_step != step)
      return Status(StatusCode::io_error,
                    fmt::format("rank group: rank {} sent its {} where rank {} sent its {}: the ranks are out of step "
                                "(a message was overwritten by another process)",
                                r, clipped(their_step), me, step));
    out.push_back(std::move(*message));
  }
  return out;
}

Result<bool> GroupAgreement::agree_on_tier(const std::string& tier, const Result<TierAnswer>& answer) {
  nlohmann::json mine = {{"tier", tier}};
  if (answer) {
    mine["outcome"] = to_string(answer->outcome);
    mine["reason"] = clipped(answer->reason);
  } else {
    mine["outcome"] = "error";
    mine["reason"] = clipped(answer.status().message());
    mine["code"] = static_cast<int>(answer.status().code());
  }
  auto all = exchange(std::move(mine), "answer from the " + tier + " tier");
  if (!all) return all.status().with_context(fmt::format("agreeing on the {} tier", tier));
  std::vector<RankAnswer> round;
  for (distributed::RankMessage& m : *all) {
    RankAnswer a;
    a.tier = m.text("tier");
    a.outcome = m.one_of("outcome", {to_string(TierOutcome::served), to_string(TierOutcome::missed),
                                     to_string(TierOutcome::unusable), to_string(TierOutcome::skipped), "error"});
    a.reason = clipped(m.text("reason"));
    a.code = static_cast<int>(m.optional_integer("code", 0, static_cast<int>(StatusCode::exception)).value_or(0));
    if (!m.status()) return m.status().with_context(fmt::format("agreeing on the {} tier", tier));
    round.push_back(std::move(a));
  }
  rounds_.push_back(round);
  for (std::size_t r = 0; r < round.size(); ++r) {
    std::string& line = report_.group->ranks[r];
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", clipped(round[r].tier), round[r].outcome);
  }
  // An error anywhere ends the load everywhere: this rank's in its own words, a peer's named.
  if (!answer) return answer.status();
  for (std::size_t r = 0; r < round.size(); ++r) {
    if (round[r].tier != tier)
      return Status(StatusCode::invalid_argument,
                    fmt::format("rank group: rank {} asked the {} tier where rank {} asked {}; every rank of a group "
                                "must list the same tiers",
                                r, clipped(round[r].tier), group_.rank(), tier));
    if (round[r].outcome == "error")
      return Status(peer_code(round[r].code),
                    fmt::format("rank {}'s {} tier failed, so the group's load fails on every rank: {}", r, tier,
                                round[r].reason));
  }
  // This rank's own answer is the one its tier gave (its copy in `round` was checked to be the one
  // it sent); the others' are what they say.
  if (answer->outcome != TierOutcome::served) return false;
  return std::all_of(round.begin(), round.end(), [](const RankAnswer& a) { return a.outcome == "served"; });
}

std::string GroupAgreement::round_text(const std::vector<RankAnswer>& round) const {
  std::vector<int> served;
  std::vector<int> other;
  for (std::size_t r = 0; r < round.size(); ++r) (round[r].outcome == "served" ? served : other).push_back(static_cast<int>(r));
  const std::string& tier = round.front().tier;
  const bool one_outcome = std::all_of(other.begin(), other.end(), [&](int r) { return round[r].outcome == round[other[0]].outcome; });
  if (served.empty() && one_outcome)
    return fmt::format("{} {} {} (rank 0: {})", tier, round[0].outcome, on_every_rank(round.size()), round[0].reason);
  std::string text;
  constexpr std::size_t kNamed = 3;
  for (std::size_t i = 0; i < other.size() && i < kNamed; ++i)
    text += fmt::format("{}rank {}: {} {} ({})", text.empty() ? "" : "; ", other[i], tier, round[other[i]].outcome,
                        round[other[i]].reason);
  if (other.size() > kNamed)
    text += fmt::format("; and {} more {} ({})", other.size() - kNamed, ranks_word(other.size() - kNamed),
                        rank_list(std::vector<int>(other.begin() + kNamed, other.end())));
  if (!served.empty()) text += fmt::format("; {} served on {} {}", tier, ranks_word(served.size()), rank_list(served));
  return text;
}

Status GroupAgreement::nothing_served() const {
  std::string why;
  for (const auto& round : rounds_) why += (why.empty() ? "" : "; ") + round_text(round);
  return Status(StatusCode::not_found, "no tier served on every rank of the group: " + why);
}

void GroupAgreement::decide_path(const TierAnswer& served) {
  GroupReport& g = *report_.group;
  g.tier = rounds_.empty() ? "" : rounds_.back().front().tier;
  bool unusable = false, missed = false;
  std::string why;
  for (std::size_t i = 0; i + 1 < rounds_.size(); ++i) {
    for (const RankAnswer& a : rounds_[i]) {
      unusable |= a.outcome == "unusable";
      missed |= a.outcome == "missed";
    }
    why += (why.empty() ? "" : "; ") + round_text(rounds_[i]);
  }
  g.decision = why.empty() ? fmt::format("the {} tier served {}", g.tier, on_every_rank(static_cast<std::size_t>(g.size)))
                           : fmt::format("{}; the group took the {} tier", why, g.tier);
  if (served.provenance == Provenance::cache) report_.path = LoadPath::hit;
  else if (unusable) report_.path = LoadPath::fallback;
  else if (missed) report_.path = LoadPath::miss;
  else report_.path = LoadPath::ineligible;
  // This rank's own words stay in the report's tiers; the reason is what the group decided.
  if (!why.empty()) report_.reason = g.decision;
}

Status GroupAgreement::agree_on_outcome(const Status& local, bool damaged_hit, bool& retry) {
  retry = false;
  nlohmann::json mine = {{"ok", local.is_ok()}, {"code", static_cast<int>(local.code())},
                         {"error", clipped(local.message())}, {"damaged_hit", damaged_hit}};
  if (report_.publish) {
    mine["publish"] = report_.publish->outcome();
    mine["publish_reason"] = clipped(report_.publish->status.message());
  }
  auto all = exchange(std::move(mine), "outcome of the load");
  if (!all) return all.status().with_context("agreeing on the load's outcome");
  // Every rank's outcome, read in full before any of it is used.
  struct RankOutcome {
    bool ok = false;
    int code = 0;
    std::string error;
    bool damaged_hit = false;
    std::string publish;  // empty: nothing to publish
    std::string publish_reason;
  };
  std::vector<RankOutcome> outcomes;
  for (distributed::RankMessage& m : *all) {
    RankOutcome o;
    o.ok = m.flag("ok");
    o.code = static_cast<int>(m.integer("code", 0, static_cast<int>(StatusCode::exception)));
    o.error = clipped(m.text("error"));
    o.damaged_hit = m.flag("damaged_hit");
    o.publish = clipped(m.optional_text("publish").value_or(""));
    o.publish_reason = clipped(m.optional_text("publish_reason").value_or(""));
    if (!m.status()) return m.status().with_context("agreeing on the load's outcome");
    outcomes.push_back(std::move(o));
  }
  std::map<std::string, std::vector<int>> by_result;
  std::vector<std::string> not_published;
  int failed_rank = -1;
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    const RankOutcome& o = outcomes[r];
    retry |= o.damaged_hit;
    if (!o.ok && failed_rank < 0) failed_rank = static_cast<int>(r);
    if (o.publish.empty()) continue;
    by_result[o.publish].push_back(static_cast<int>(r));
    if (o.publish != "published" && o.publish != "already_present")
      not_published.push_back(fmt::format("rank {} {} ({})", r, o.publish, o.publish_reason));
  }
  GroupReport& g = *report_.group;
  if (!by_result.empty()) {
    std::string kept;
    for (const char* result : {"published", "already_present"})
      if (auto it = by_result.find(result); it != by_result.end())
        kept += fmt::format("{}{} on {} {}", kept.empty() ? "" : "; ", result, ranks_word(it->second.size()),
                            rank_list(it->second));
    g.publication = not_published.empty()
                        ? fmt::format("the entry is kept on every rank that loaded from the checkpoint: {}", kept)
                        : fmt::format("not kept on every rank: {}{}{}; the group's next load takes the ordinary path "
                                      "again",
                                      fmt::join(not_published, "; "), kept.empty() ? "" : "; ", kept);
    report_.reason += (report_.reason.empty() ? "" : "; ") + g.publication;
  }
  if (!local) return local;
  if (failed_rank >= 0)
    return Status(peer_code(outcomes[static_cast<std::size_t>(failed_rank)].code),
                  fmt::format("rank {}'s load failed, so the group's load fails on every rank: {}", failed_rank,
                              outcomes[static_cast<std::size_t>(failed_rank)].error));
  return Status::ok();
}

}  // namespace snapcache::agreement
