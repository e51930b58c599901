// One rank's part in a group load's agreement (LoadPlan::group). Each call is an exchange with
// every other rank, so every rank makes the same calls in the same order, on error paths too:
// the executor calls agree_on_tier once per tier it asks, and agree_on_outcome once at the end
// unless an agreement on a tier already failed (which fails on every rank alike).
//
// What it trusts: a message in the exchange is anyone's who reaches the channel (a c10d store has
// no authentication), so each carries the load's identity (group_identity.h) and its step, and a
// message of another load, of another step or of no rank is refused by name. What it never trusts:
// its own answer read back (a rank decides from the answer its tier gave; a copy that differs was
// overwritten, and the rank leaves the group saying so).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "agreement/group_identity.h"
#include "distributed/rank_message.h"
#include "snapcache/extend/tier.h"
#include "snapcache/pipeline.h"
#include "snapcache/rank_group.h"

namespace snapcache::agreement {

class GroupAgreement {
 public:
  GroupAgreement(RankGroup& group, LoadReport& report, GroupIdentity identity);

  // This rank's answer from `tier`, or its error. True when every rank served (this one by its own
  // answer), false when some did not (the group goes on to the next tier); an error when any rank
  // failed (its error, named), the ranks asked different tiers, a message is another load's or
  // another step's, this rank's own message came back changed, or the exchange failed.
  Result<bool> agree_on_tier(const std::string& tier, const Result<TierAnswer>& answer);

  // Called when no tier served on every rank: the error every rank returns.
  Status nothing_served() const;

  // Sets report.path and report.reason for the tier every rank took (the `served` answer here):
  // a hit when it came from a cache; otherwise a fallback when any rank had something it could not
  // use, a miss when any rank missed, else ineligible; the reason is the group's decision.
  void decide_path(const TierAnswer& served);

  // After the load, its publication awaited: every rank's outcome. An error when any rank failed;
  // `retry` is set on every rank when a rank's hit failed its checksums while staging (all load
  // again; that rank quarantines its entry).
  Status agree_on_outcome(const Status& local, bool damaged_hit, bool& retry);

  // This rank leaves the load with `why`, which only it can see, telling the others where the
  // channel allows (RankGroup::leave). Returns `why`.
  Status leave(Status why);

 private:
  struct RankAnswer {
    std::string tier;
    std::string outcome;  // a TierOutcome, or "error"
    std::string reason;
    int code = 0;  // the StatusCode of an error
  };
  // Every rank's message of this step, each checked to be this load's and this step's, to be read
  // field by field (a field that is not what a rank sends refuses the message by name); this
  // rank's own is the one it sent (a copy that came back changed is an error, and the rank leaves).
  Result<std::vector<distributed::RankMessage>> exchange(nlohmann::json mine, const std::string& step);
  std::string round_text(const std::vector<RankAnswer>& round) const;

  RankGroup& group_;
  LoadReport& report_;
  GroupIdentity identity_;
  std::vector<std::vector<RankAnswer>> rounds_;  // every tier asked, every rank's answer
};

}  // namespace snapcache::agreement
