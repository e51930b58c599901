#include "util/fmt.h"

#include <type_traits>

#include "snapcache/key.h"

namespace snapcache {
namespace {

void add(std::vector<KeyDifference>& out, std::string field, const std::string& wanted,
         const std::string& found) {
  if (wanted != found) out.push_back({std::move(field), wanted, found});
}

void add_map(std::vector<KeyDifference>& out, const std::string& field,
             const std::map<std::string, std::string>& wanted,
             const std::map<std::string, std::string>& found) {
  if (wanted == found) return;
  for (const auto& [k, v] : wanted) {
    auto it = found.find(k);
    add(out, field + "." + k, v, it == found.end() ? "(absent)" : it->second);
  }
  for (const auto& [k, v] : found)
    if (!wanted.count(k)) add(out, field + "." + k, "(absent)", v);
}

}  // namespace

namespace {

std::string text(const std::string& v) { return v; }
template <class Number>
  requires std::is_arithmetic_v<Number>
std::string text(Number v) {
  return std::to_string(v);
}

// Walks two keys' field lists (snapcache/key.h) together, naming each field by its path in the
// key ("torch.version", "topology.tp_rank", "options.adapter").
struct Differ {
  std::vector<KeyDifference>& out;
  std::string prefix;

  std::string name(const char* field) const { return prefix + field; }
  void operator()(const char* field, const std::string& w, const std::string& f) const { add(out, name(field), w, f); }
  template <class Number>
    requires std::is_arithmetic_v<Number>
  void operator()(const char* field, Number w, Number f) const {
    add(out, name(field), text(w), text(f));
  }
  void operator()(const char* field, const std::map<std::string, std::string>& w,
                  const std::map<std::string, std::string>& f) const {
    // A map's entries are named under the map's owner: "options.adapter", "topology.ep".
    add_map(out, prefix.empty() ? field : prefix.substr(0, prefix.size() - 1), w, f);
  }
  void operator()(const char*, const std::vector<CheckpointFile>& wanted, const std::vector<CheckpointFile>& found) const {
    if (wanted.size() != found.size())
      add(out, "checkpoint.files", std::to_string(wanted.size()) + " files", std::to_string(found.size()) + " files");
    for (std::size_t i = 0; i < std::min(wanted.size(), found.size()); ++i) {
      // Identities only (the rule of the id): a file keyed by content has no path to differ in.
      const CheckpointFile w = checkpoint_identity(wanted[i]);
      const CheckpointFile f = checkpoint_identity(found[i]);
      const std::string index = "checkpoint[" + std::to_string(i) + "]";
      if (w.keyed_by_content() != f.keyed_by_content()) {
        auto how = [](const CheckpointFile& c) {
          return c.keyed_by_content() ? "content (size, digest)" : "path and stat (" + c.path + ")";
        };
        add(out, index + ".keyed_by", how(w), how(f));
        continue;
      }
      // A file keyed by content differs only in what identifies its bytes; one keyed by its place
      // is named by its path, and its stats are named under it.
      for_each_field(w, f, [&](const char* field, const auto& a, const auto& b) {
        const std::string_view n = field;
        if (w.keyed_by_content() && n != "size" && n != "content_digest") return;
        if (!w.keyed_by_content() && n == "content_digest") return;
        const std::string where = w.keyed_by_content() || n == "path" ? index + "." : "checkpoint[" + w.path + "].";
        add(out, where + field, text(a), text(b));
      });
    }
  }
  template <FieldRecord Record>
  void operator()(const char* field, const Record& w, const Record& f) const {
    for_each_field(w, f, Differ{out, prefix + field + "."});
  }
};

}  // namespace

std::vector<KeyDifference> diff_keys(const Key& wanted, const Key& found) {
  std::vector<KeyDifference> out;
  // The component first: it is what tells two models apart at a glance.
  add(out, "component", wanted.component, found.component);
  for_each_field(wanted, found, [&](const char* field, const auto& w, const auto& f) {
    if (std::string_view(field) != "component") Differ{out, ""}(field, w, f);
  });
  return out;
}

std::string describe_differences(const std::vector<KeyDifference>& diffs, std::size_t max) {
  std::string s;
  for (std::size_t i = 0; i < diffs.size() && i < max; ++i) {
    if (i) s += ", ";
    s += fmt::format("{} {} != {}", diffs[i].field, diffs[i].wanted.empty() ? "''" : diffs[i].wanted,
                     diffs[i].found.empty() ? "''" : diffs[i].found);
  }
  if (diffs.size() > max) s += fmt::format(" (and {} more)", diffs.size() - max);
  return s;
}

}  // namespace snapcache
