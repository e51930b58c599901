// Checks an entry against the layout the caller expects, before any tensor is handed out.
#include "util/fmt.h"

#include <map>
#include <set>

#include "snapcache/store.h"
#include "snapcache/text.h"

namespace snapcache {
namespace {

Status mismatch(std::string why) { return {StatusCode::mismatch, std::move(why)}; }

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
  std::map<std::string_view, const TensorRecord*> stored;
  for (const auto& t : tensors) stored[t.name] = &t;

  std::set<std::string_view> expected_names;
  std::map<std::string_view, std::uint32_t> group_storage;
  std::map<std::uint32_t, std::string_view> storage_group;
  for (const auto& e : expected) {
    expected_names.insert(e.name);
    auto it = stored.find(e.name);
    if (it == stored.end()) return mismatch(fmt::format("tensor '{}' is missing from {}", e.name, source));
    const TensorRecord& t = *it->second;
    if (t.dtype != e.dtype)
      return mismatch(fmt::format("tensor '{}': dtype {} in {}, {} expected", e.name, dtype_name(t.dtype), source,
                                  dtype_name(e.dtype)));
    if (shapes == ShapeCheck::exact ? t.sizes != e.sizes : element_count(t.sizes) != element_count(e.sizes))
      return mismatch(fmt::format("tensor '{}': shape {} in {}, {} expected", e.name, format_dims(t.sizes), source,
                                  format_dims(e.sizes)));
    if (shapes == ShapeCheck::exact && e.strides && t.strides != *e.strides)
      return mismatch(fmt::format("tensor '{}': strides {} in {}, {} expected", e.name, format_dims(t.strides), source,
                                  format_dims(*e.strides)));
    if (!e.alias_group.empty()) {
      auto [g, new_group] = group_storage.emplace(e.alias_group, t.storage);
      if (!new_group && g->second != t.storage)
        return mismatch(fmt::format("tensor '{}' should share storage with the other tensors of group '{}'",
                                    e.name, e.alias_group));
      auto [s, new_storage] = storage_group.emplace(t.storage, e.alias_group);
      if (!new_storage && s->second != e.alias_group)
        return mismatch(fmt::format("tensor '{}' shares a storage with tensors of group '{}' but should not",
                                    e.name, s->second));
    }
  }
  for (const auto& t : tensors)
    if (!expected_names.count(t.name))
      return mismatch(fmt::format("{} has tensor '{}' which is not expected", source, t.name));
  return Status::ok();
}

}  // namespace snapcache
