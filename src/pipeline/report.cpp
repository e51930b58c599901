#include "snapcache/pipeline.h"
#include "util/fmt.h"
#include "snapcache/text.h"

namespace snapcache {

const char* to_string(LoadPath path) {
  switch (path) {
    case LoadPath::hit: return "hit";
    case LoadPath::miss: return "miss";
    case LoadPath::fallback: return "fallback";
    case LoadPath::ineligible: return "ineligible";
  }
  return "?";
}

std::string LoadReport::summary() const {
  std::string stages_text;
  for (const auto& s : stages) {
    if (!stages_text.empty()) stages_text += ", ";
    stages_text += fmt::format("{} {:.0f} ms", s.stage, s.seconds * 1e3);
  }
  return fmt::format("{} in {:.2f} s ({}){}{}", to_string(path), seconds, stages_text, reason.empty() ? "" : ": ",
                     reason);
}

std::string LoadReport::table() const {
  std::string out = fmt::format("  {:<14} {:>10} {:>12} {:>10}\n", "stage", "ms", "bytes", "GB/s");
  for (const auto& s : stages) {
    double rate = s.seconds > 0 && s.bytes > 0 ? static_cast<double>(s.bytes) / s.seconds / 1e9 : 0.0;
    out += fmt::format("  {:<14} {:>10.1f} {:>12} {:>10}\n", s.stage, s.seconds * 1e3,
                       s.bytes ? format_size(s.bytes) : "", rate > 0 ? fmt::format("{:.2f}", rate) : "");
  }
  out += fmt::format("  {:<14} {:>10.1f}\n", "total", seconds * 1e3);
  return out;
}

}  // namespace snapcache
