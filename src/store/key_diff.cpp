// Key diffs: which fields of two keys differ, and what changed in words a person reads. Both walk
// the records' field lists (snapcache/key.h): a field's name and its rule for words are there.
#include "util/fmt.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

#include "snapcache/key.h"
#include "snapcache/text.h"

namespace snapcache {
namespace {

std::string text(const std::string& v) { return v; }
template <class Number>
  requires std::is_arithmetic_v<Number>
std::string text(Number v) {
  return std::to_string(v);
}

std::string shown(const std::string& v) { return v.empty() ? "''" : v; }

// A value longer than this (a framework's config field holding a list: 36 layer types are 600
// characters) is shown around where it changed; shorter ones whole.
constexpr std::size_t kWholeValue = 48;
constexpr std::size_t kAroundChange = 20;  // characters shown on each side of the change

// The start of the UTF-8 character `at` falls in, so that a cut never splits one.
std::size_t character_start(const std::string& s, std::size_t at) {
  while (at > 0 && at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  return at;
}

// (found, wanted) as a difference's words show them: whole when both are short; else each from a
// little before the first character that differs to a little after the last (at most a few dozen
// characters of a long change), "..." marking what is left out.
std::pair<std::string, std::string> around_change(const std::string& found, const std::string& wanted) {
  if (found.size() <= kWholeValue && wanted.size() <= kWholeValue) return {shown(found), shown(wanted)};
  std::size_t prefix = 0;
  while (prefix < found.size() && prefix < wanted.size() && found[prefix] == wanted[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < found.size() - prefix && suffix < wanted.size() - prefix &&
         found[found.size() - 1 - suffix] == wanted[wanted.size() - 1 - suffix])
    ++suffix;
  auto cut = [&](const std::string& v) {
    const std::size_t from = prefix > kAroundChange ? character_start(v, prefix - kAroundChange) : 0;
    const std::size_t change_end = std::min(v.size() - suffix, prefix + 2 * kAroundChange);
    const std::size_t to = character_start(v, std::min(v.size(), change_end + kAroundChange));
    return fmt::format("{}{}{}", from > 0 ? "..." : "", v.substr(from, to - from), to < v.size() ? "..." : "");
  };
  return {shown(cut(found)), shown(cut(wanted))};
}

// "<who> <found> -> <wanted>", each value around its change.
std::string changed_from(const std::string& who, const std::string& found, const std::string& wanted) {
  const auto [was, is] = around_change(found, wanted);
  return fmt::format("{} {} -> {}", who, was, is);
}

// The last part of a path: what a person calls a checkpoint file ("model-00002.safetensors").
std::string file_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos || slash + 1 == path.size() ? path : path.substr(slash + 1);
}

// The one rule for a field's words (Field::says): `subject` names what the field belongs to
// ("checkpoint model.safetensors"), `noun` the field as a person calls it.
template <class T>
std::string words_for(Says says, const std::string& subject, const std::string& noun, const T& wanted, const T& found) {
  const std::string who = subject.empty() ? noun : subject + " " + noun;
  switch (says) {
    case Says::changed: return who + " changed";
    case Says::bytes:
      if constexpr (std::is_arithmetic_v<T>)
        return fmt::format("{} {} -> {}", who, format_size(static_cast<std::uint64_t>(found)),
                           format_size(static_cast<std::uint64_t>(wanted)));
      break;
    case Says::time:
      if constexpr (std::is_arithmetic_v<T>) {
        // Wanted is the file now, found the file as the entry was made from it.
        const double seconds = (static_cast<double>(wanted) - static_cast<double>(found)) / 1e9;
        const double span = std::fabs(seconds);
        // As ages are written ("3m", "2d"), and finer below a minute ("20.0 ms", "1.50 s").
        const std::string how_long = span >= 60 ? format_age(static_cast<std::int64_t>(span)) : format_duration(span);
        return fmt::format("{} {} {} the version the entry was made from", who, how_long, seconds >= 0 ? "after" : "before");
      }
      break;
    case Says::values: break;
  }
  return changed_from(who, text(found), text(wanted));
}

struct Differ {
  std::vector<KeyDifference>& out;
  std::string prefix;   // the field's path in the key: "torch.", "topology."
  std::string subject;  // what a person calls the record the fields belong to ("checkpoint x")

  void add(std::string field, std::string wanted, std::string found, std::string words) const {
    if (wanted != found) out.push_back({std::move(field), std::move(wanted), std::move(found), std::move(words)});
  }

  template <class Record, class T>
    requires(std::is_arithmetic_v<T> || std::is_same_v<T, std::string>)
  void operator()(const Field<Record, T>& field, const T& w, const T& f) const {
    if (w != f) add(prefix + field.name, text(w), text(f), words_for(field.says, subject, field.spoken(), w, f));
  }

  template <class Record>
  void operator()(const Field<Record, std::map<std::string, std::string>>& field,
                  const std::map<std::string, std::string>& wanted,
                  const std::map<std::string, std::string>& found) const {
    if (wanted == found) return;
    // A map's entries are named under the map's owner: "options.adapter", "topology.ep".
    const std::string owner = prefix.empty() ? std::string(field.name) : prefix.substr(0, prefix.size() - 1);
    auto one = [&](const std::string& k, const std::string& w, const std::string& f) {
      add(owner + "." + k, w, f, changed_from(fmt::format("{} {}", field.spoken(), k), f, w));
    };
    for (const auto& [k, v] : wanted) {
      auto it = found.find(k);
      one(k, v, it == found.end() ? "(absent)" : it->second);
    }
    for (const auto& [k, v] : found)
      if (!wanted.count(k)) one(k, "(absent)", v);
  }

  template <class Record, FieldRecord Inner>
  void operator()(const Field<Record, Inner>& field, const Inner& w, const Inner& f) const {
    for_each_field(w, f, Differ{out, prefix + field.name + ".", subject});
  }

  // One file's identities (the rule of the id): a file keyed by content has no path to differ
  // in; one keyed by its place is named by its path, and its stats are named under it.
  void file(const std::string& index, const std::string& label, const CheckpointFile& w,
            const CheckpointFile& f) const {
    if (w.keyed_by_content() != f.keyed_by_content()) {
      auto how = [](const CheckpointFile& c) {
        return c.keyed_by_content() ? "content (size, digest)" : "path and stat (" + c.path + ")";
      };
      add(index + ".keyed_by", how(w), how(f),
          fmt::format("{} keyed by {} -> by {}", label, f.keyed_by_content() ? "content" : "path and stat",
                      w.keyed_by_content() ? "content" : "path and stat"));
      return;
    }
    const std::string where = w.keyed_by_content() ? index + "." : "checkpoint[" + w.path + "].";
    const Differ stats{out, where, label};
    for_each_field(w, f, [&](const auto& field, const auto& a, const auto& b) {
      const std::string_view n = field.name;
      if (w.keyed_by_content() && n != "size" && n != "content_digest") return;
      if (!w.keyed_by_content() && n == "content_digest") return;
      if constexpr (std::is_same_v<std::decay_t<decltype(a)>, std::string>) {
        if (n == "path") {
          if (a != b) add(index + ".path", a, b, fmt::format("checkpoint file {} -> {}", shown(b), shown(a)));
          return;
        }
      }
      stats(field, a, b);
    });
  }

  template <class Record>
  void operator()(const Field<Record, std::vector<CheckpointFile>>&, const std::vector<CheckpointFile>& wanted_files,
                  const std::vector<CheckpointFile>& found_files) const {
    std::vector<CheckpointFile> wanted, found;  // identities only (the rule of the id)
    for (const auto& c : wanted_files) wanted.push_back(checkpoint_identity(c));
    for (const auto& c : found_files) found.push_back(checkpoint_identity(c));
    auto by_place = [](const std::vector<CheckpointFile>& files) {
      return std::none_of(files.begin(), files.end(), [](const CheckpointFile& c) { return c.keyed_by_content(); });
    };
    if (!by_place(wanted) || !by_place(found)) {
      // Content has no place: files are compared in order.
      if (wanted.size() != found.size())
        add("checkpoint.files", std::to_string(wanted.size()) + " files", std::to_string(found.size()) + " files",
            fmt::format("checkpoint files {} -> {}", found.size(), wanted.size()));
      for (std::size_t i = 0; i < std::min(wanted.size(), found.size()); ++i)
        file("checkpoint[" + std::to_string(i) + "]", fmt::format("checkpoint file {}", i), wanted[i], found[i]);
      return;
    }
    // Files at a place are matched by path: a shard added or dropped is named, not every file
    // after it shifted by one.
    std::set<std::string> wanted_paths, found_paths;
    for (const auto& c : wanted) wanted_paths.insert(c.path);
    for (const auto& c : found) found_paths.insert(c.path);
    // A file is called by its name, unless another path of either list has that name too (the
    // same checkpoint copied to another directory): then by its path.
    std::map<std::string, std::set<std::string>> paths_named;
    for (const auto* paths : {&wanted_paths, &found_paths})
      for (const auto& path : *paths) paths_named[file_name(path)].insert(path);
    auto label = [&](const std::string& path) {
      return paths_named[file_name(path)].size() > 1 ? path : file_name(path);
    };
    for (const auto& w : wanted) {
      auto it = std::find_if(found.begin(), found.end(), [&](const CheckpointFile& c) { return c.path == w.path; });
      if (it == found.end())
        add("checkpoint[" + w.path + "]", "present", "(absent)", fmt::format("checkpoint file {} is new", label(w.path)));
      else
        file("checkpoint[" + w.path + "]", "checkpoint " + label(w.path), w, *it);
    }
    for (const auto& f : found)
      if (!wanted_paths.count(f.path))
        add("checkpoint[" + f.path + "]", "(absent)", "present",
            fmt::format("checkpoint file {} is no longer part of the checkpoint", label(f.path)));
    if (wanted_paths != found_paths) return;
    // The same files, listed another way, are another key too (the list is encoded as it is).
    if (wanted.size() != found.size()) {
      add("checkpoint.files", std::to_string(wanted.size()) + " files", std::to_string(found.size()) + " files",
          fmt::format("checkpoint files {} -> {} (a file listed twice)", found.size(), wanted.size()));
      return;
    }
    bool same_order = true;
    for (std::size_t i = 0; i < wanted.size(); ++i) same_order &= wanted[i].path == found[i].path;
    if (!same_order) add("checkpoint.order", "as asked", "another", "checkpoint files listed in another order");
  }
};

// What names each checkpoint file to a person: its path, or its bytes.
std::vector<std::string> checkpoint_places(const Key& key) {
  std::vector<std::string> out;
  for (const auto& c : key.checkpoint) out.push_back(c.keyed_by_content() ? "content:" + c.content_digest : c.path);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<KeyDifference> diff_keys(const Key& wanted, const Key& found) {
  std::vector<KeyDifference> out;
  const Differ differ{out, "", ""};
  // The component first: it is what tells two models apart at a glance.
  std::apply([&](auto... field) {
    auto component_first = [&](const auto& f, bool first) {
      if ((std::string_view(f.name) == "component") == first) differ(f, wanted.*(f.member), found.*(f.member));
    };
    (component_first(field, true), ...);
    (component_first(field, false), ...);
  }, Key::fields());
  return out;
}

bool same_checkpoint(const Key& a, const Key& b) { return checkpoint_places(a) == checkpoint_places(b); }

std::string describe_differences(const std::vector<KeyDifference>& diffs, std::size_t max) {
  std::string s;
  for (std::size_t i = 0; i < diffs.size() && i < max; ++i) {
    if (i) s += ", ";
    const KeyDifference& d = diffs[i];
    s += !d.words.empty() ? d.words : fmt::format("{} {} != {}", d.field, shown(d.wanted), shown(d.found));
  }
  if (diffs.size() > max) s += fmt::format(" (and {} more; `snapcache why` lists each)", diffs.size() - max);
  return s;
}

}  // namespace snapcache
