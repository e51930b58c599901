// The one check of tensors against the layout a caller declares, before any tensor is handed out:
// a cold load's output (the ordinary loader's), a warm load's entry and a donor's prepared weights
// all pass through it, so the rules (names, dtypes, shapes, strides, storage sharing) cannot
// drift apart between the paths. Every problem is collected, so one run names them all.
#include "util/fmt.h"

#include <unordered_map>
#include <unordered_set>

#include "snapcache/extend/store_access.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"

namespace snapcache {
namespace {

// Problems named in one message; the rest are counted.
constexpr std::size_t kNamedProblems = 8;

std::int64_t element_count(const std::vector<std::int64_t>& sizes) {
  std::int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

}  // namespace

Status check_expected_layout(const Manifest& manifest, const ExpectedLayout& expected) {
  return check_expected_layout(manifest.tensors, expected, "the entry");
}

Status check_expected_layout(const std::vector<TensorRecord>& tensors, const ExpectedLayout& expected,
                             std::string_view source, ShapeCheck shapes) {
  std::vector<std::string> problems;
  // Hashed, not ordered: a load checks thousands of names, twice (the entry, then its tensors), and
  // problems are reported in the order of the lists, never of these indexes.
  std::unordered_map<std::string_view, const TensorRecord*> stored;
  stored.reserve(tensors.size());
  for (const auto& t : tensors)
    if (!stored.emplace(t.name, &t).second) problems.push_back(fmt::format("tensor '{}' appears twice in {}", t.name, source));

  std::unordered_set<std::string_view> expected_names;
  expected_names.reserve(expected.size());
  std::unordered_map<std::string_view, std::uint32_t> group_storage;
  std::unordered_map<std::uint32_t, std::string_view> storage_group;
  for (const auto& e : expected) {
    expected_names.insert(e.name);
    auto it = stored.find(e.name);
    if (it == stored.end()) {
      problems.push_back(fmt::format("tensor '{}' is missing from {}", e.name, source));
      continue;
    }
    const TensorRecord& t = *it->second;
    if (t.dtype != e.dtype)
      problems.push_back(fmt::format("tensor '{}': dtype {} in {}, {} expected", e.name, dtype_name(t.dtype), source,
                                     dtype_name(e.dtype)));
    if (shapes == ShapeCheck::exact ? t.sizes != e.sizes : element_count(t.sizes) != element_count(e.sizes))
      problems.push_back(fmt::format("tensor '{}': shape {} in {}, {} expected", e.name, format_dims(t.sizes), source,
                                     format_dims(e.sizes)));
    else if (shapes == ShapeCheck::exact && e.strides && t.strides != *e.strides)
      problems.push_back(fmt::format("tensor '{}': strides {} in {}, {} expected", e.name, format_dims(t.strides),
                                     source, format_dims(*e.strides)));
    if (!e.alias_group.empty()) {
      auto [g, new_group] = group_storage.emplace(e.alias_group, t.storage);
      if (!new_group && g->second != t.storage)
        problems.push_back(fmt::format("tensor '{}' should share storage with the other tensors of group '{}' in {}",
                                       e.name, e.alias_group, source));
      auto [s, new_storage] = storage_group.emplace(t.storage, e.alias_group);
      if (!new_storage && s->second != e.alias_group)
        problems.push_back(fmt::format("tensor '{}' shares a storage with tensors of group '{}' in {} but should not",
                                       e.name, s->second, source));
    }
  }
  for (const auto& t : tensors)
    if (!expected_names.count(t.name)) problems.push_back(fmt::format("{} has tensor '{}', which is not expected", source, t.name));

  if (problems.empty()) return Status::ok();
  if (problems.size() == 1) return Status(StatusCode::mismatch, problems.front());
  std::vector<std::string> named(problems.begin(), problems.begin() + std::min(problems.size(), kNamedProblems));
  return Status(StatusCode::mismatch,
                fmt::format("{} problems with the layout of {}: {}{}", problems.size(), source, fmt::join(named, "; "),
                            problems.size() > kNamedProblems
                                ? fmt::format("; and {} more", problems.size() - kNamedProblems)
                                : ""));
}

}  // namespace snapcache
