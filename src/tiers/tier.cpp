#include "snapcache/extend/tier.h"

namespace snapcache {

Tier::~Tier() = default;
TensorSink::~TensorSink() = default;

Kept Tier::keep(LoadContext&, const NamedTensors&) { return {}; }
std::string Tier::damaged(LoadContext&, const std::string&, const Status&) { return {}; }
void Tier::load_failed(LoadContext&, const Status&) {}

TierAnswer TierAnswer::served(NamedTensors tensors, Residence residence, Provenance provenance, std::string reason,
                              std::string entry_id) {
  TierAnswer a;
  a.outcome = TierOutcome::served;
  a.reason = std::move(reason);
  a.entry_id = std::move(entry_id);
  a.tensors = std::move(tensors);
  a.residence = residence;
  a.provenance = provenance;
  return a;
}

namespace {
TierAnswer not_served(TierOutcome outcome, std::string reason, std::string entry_id) {
  TierAnswer a;
  a.outcome = outcome;
  a.reason = std::move(reason);
  a.entry_id = std::move(entry_id);
  return a;
}
}  // namespace

TierAnswer TierAnswer::missed(std::string reason, std::string entry_id) {
  return not_served(TierOutcome::missed, std::move(reason), std::move(entry_id));
}
TierAnswer TierAnswer::unusable(std::string reason, std::string entry_id) {
  return not_served(TierOutcome::unusable, std::move(reason), std::move(entry_id));
}
TierAnswer TierAnswer::skipped(std::string reason) { return not_served(TierOutcome::skipped, std::move(reason), {}); }

std::vector<std::shared_ptr<Tier>> default_tiers() { return {snapshot_tier(), ordinary_tier()}; }

}  // namespace snapcache
