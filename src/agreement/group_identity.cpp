#include "agreement/group_identity.h"

#include "load_plan/plan_key.h"
#include "util/fmt.h"
#include "util/hash.h"
#include "snapcache/key.h"
#include "snapcache/rank_group.h"

namespace snapcache::agreement {
namespace {

// A loader's digest reads well in its first 12 digits; a version string is usually short.
std::string clip(const std::string& s, std::size_t n = 24) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

}  // namespace

std::string GroupIdentity::name() const { return fmt::format("{} ({})", id.substr(0, 6), about); }

GroupIdentity group_identity(const LoadPlan& plan, const RankGroup& group) {
  Key key = load_plan::key_with_checkpoint(plan, {});
  key.topology = Topology{0, plan.topology.tp_size, 0, plan.topology.pp_size, {}};
  const std::string nonce = group.start_nonce();
  GroupIdentity identity;
  identity.id = util::xxh3_128(encode_key(key) + '\0' + nonce).hex();
  std::string options;
  for (const auto& [k, v] : key.options) options += fmt::format("{}{}={}", options.empty() ? "" : " ", k, clip(v));
  identity.about = fmt::format("component {}, tp {}, pp {}, dtype {}{}{}, source {}, torch {}{}", clip(key.component, 48),
                               key.topology.tp_size, key.topology.pp_size, clip(key.dtype),
                               key.precision_policy.empty() ? "" : ", precision " + clip(key.precision_policy),
                               options.empty() ? "" : ", options " + clip(options, 96), clip(key.source_identity),
                               key.torch.version, nonce.empty() ? "" : ", started as " + nonce.substr(0, 6));
  return identity;
}

}  // namespace snapcache::agreement
