// Ranks as a person reads them: "0-2, 4, 6-7". Every message that names ranks (the group's
// decision, its publication, the ranks that did not answer) compacts them here, so a group of a
// million ranks still gives one short line.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace snapcache::distributed {

// Ascending ranks as runs: "0-2, 4, 6-7". Past `max_runs` runs the rest is counted instead of
// listed: "0, 2, 4, ... and 499997 more ranks".
std::string rank_list(const std::vector<int>& ranks, std::size_t max_runs = 16);

}  // namespace snapcache::distributed
