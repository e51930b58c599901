// Checks an entry against the layout the caller expects, before any tensor is handed out.
#include "util/fmt.h"

#include <map>
#include <set>

#include "snapcache/store.h"
#include "snapcache/text.h"

namespace snapcache {
namespace {

Status mismatch(std::string why) { return {StatusCode::mismatch, std::move(why)}; }

}  // namespace

Status check_expected_layout(const Manifest& manifest, const ExpectedLayout& expected) {
  std::map<std::string_view, const TensorRecord*> stored;
  for (const auto& t : manifest.tensors) stored[t.name] = &t;

  std::set<std::string_view> expected_names;
  std::map<std::string_view, std::uint32_t> group_storage;
  std::map<std::uint32_t, std::string_view> storage_group;
  for (const auto& e : expected) {
    expected_names.insert(e.name);
    auto it = stored.find(e.name);
    if (it == stored.end()) return mismatch(fmt::format("tensor '{}' is missing from the entry", e.name));
    const TensorRecord& t = *it->second;
    if (t.dtype != e.dtype)
      return mismatch(fmt::format("tensor '{}': dtype {} in the entry, {} expected", e.name, dtype_name(t.dtype),
                                  dtype_name(e.dtype)));
    if (t.sizes != e.sizes)
      return mismatch(fmt::format("tensor '{}': shape {} in the entry, {} expected", e.name, format_dims(t.sizes),
                                  format_dims(e.sizes)));
    if (e.strides && t.strides != *e.strides)
      return mismatch(fmt::format("tensor '{}': strides {} in the entry, {} expected", e.name, format_dims(t.strides),
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
  for (const auto& t : manifest.tensors)
    if (!expected_names.count(t.name))
      return mismatch(fmt::format("the entry has tensor '{}' which is not expected", t.name));
  return Status::ok();
}

}  // namespace snapcache
