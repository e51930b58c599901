#include "store/ownership.h"

#include <algorithm>

#include "util/fmt.h"
#include "snapcache/extend/file_system.h"

namespace snapcache::store {
namespace {

// "this user (uid 1000), root (uid 0) or the store's owner (uid 1234)"; a uid named twice is named
// once, by its first name.
std::string describe(const std::vector<TrustedOwner>& trusted) {
  std::vector<std::string> parts;
  std::vector<std::uint32_t> seen;
  for (const TrustedOwner& t : trusted) {
    if (std::find(seen.begin(), seen.end(), t.uid) != seen.end()) continue;
    seen.push_back(t.uid);
    parts.push_back(fmt::format("{} (uid {})", t.who, t.uid));
  }
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " or " : ", ") + parts[i];
  return out;
}

}  // namespace

Status check_writers(const FileIdentity& st, const std::string& label, const std::string& path,
                     const OwnershipRule& rule) {
  const bool trusted_owner = std::any_of(rule.trusted.begin(), rule.trusted.end(),
                                         [&](const TrustedOwner& t) { return t.uid == st.owner; });
  if (!trusted_owner)
    return Status(StatusCode::permission_denied, fmt::format("{} is owned by uid {}, not by {}; {}", label, st.owner,
                                                             describe(rule.trusted), rule.owner_rule));
  if ((st.permissions & 022) != 0)
    return Status(StatusCode::permission_denied,
                  fmt::format("{} is writable by group or others (mode {:04o}): {} (run chmod go-w {})", label,
                              st.permissions, rule.harm, path));
  return Status::ok();
}

}  // namespace snapcache::store
