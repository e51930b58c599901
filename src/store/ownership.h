// Who may write what the store relies on. A directory the store deletes from or maps out of (the
// cache), or copies entries from (a secondary store), and the files it takes from there, must be
// writable by no user the loading process does not trust: whoever can write them chooses what a
// load serves, or what a root process deletes. Owner and mode decide; one rule, phrased for each
// place it guards (store.cpp for the cache, secondary.cpp for a secondary store).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "snapcache/extend/file_system.h"

namespace snapcache::store {

// A user whose files are trusted, as a refusal names it: "this user", "root", "the store's owner".
struct TrustedOwner {
  std::uint32_t uid = 0;
  std::string who;
};

// What a refusal says besides the facts: what another writer could do, and what an owner that is
// not trusted means for the user.
struct OwnershipRule {
  std::vector<TrustedOwner> trusted;
  std::string_view harm;        // "another user could make the store delete or serve their files"
  std::string_view owner_rule;  // "a cache is used only by its owner (set SNAPCACHE_DIR ...)"
};

// permission_denied, naming `label` (how the message names the file), when `st` is writable by
// group or others ("(run chmod go-w PATH)"), or owned by none of `rule.trusted`; ok otherwise.
Status check_writers(const FileIdentity& st, const std::string& label, const std::string& path,
                     const OwnershipRule& rule);

}  // namespace snapcache::store
