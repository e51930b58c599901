#include "distributed/rank_list.h"

#include "util/fmt.h"

namespace snapcache::distributed {

std::string rank_list(const std::vector<int>& ranks, std::size_t max_runs) {
  std::string out;
  std::size_t runs = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    if (runs == max_runs) {
      const std::size_t rest = ranks.size() - i;
      out += fmt::format(", ... and {} more {}", rest, rest == 1 ? "rank" : "ranks");
      break;
    }
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    ++runs;
    i = j + 1;
  }
  return out;
}

}  // namespace snapcache::distributed
