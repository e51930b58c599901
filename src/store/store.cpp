#include "snapcache/store.h"

#include <algorithm>

#include "util/fmt.h"

#include "format/manifest.h"
#include "snapcache/maintenance.h"
#include "store/layout.h"
#include "util/file_io.h"

namespace snapcache {
namespace store {

std::string data_file_name(std::uint32_t index) { return fmt::format("data-{:04}.bin", index); }

bool is_entry_id(const std::string& name) {
  return name.size() == 32 &&
         std::all_of(name.begin(), name.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string short_id(const std::string& id) { return id.substr(0, 12); }

Result<UniqueFd> take_lease(FileSystem& fs, const std::string& entry_path, LockMode mode) {
  std::string path = entry_path + "/" + kLeaseFile;
  auto fd = open_in_cache(fs, path, OpenMode::read);
  if (!fd) return fd.status();
  Status st = fs.lock(fd->get(), mode, LockWait::no_wait);
  if (!st) return st;
  auto held = fs.fstat(fd->get());
  auto now = fs.stat(path, Follow::no);
  if (!held) return held.status();
  if (!now || now->inode != held->inode || now->device != held->device)
    return Status(StatusCode::not_found, "entry was removed while its lease was being taken");
  return std::move(*fd);
}

}  // namespace store

const char* to_string(PublishResult r) {
  switch (r) {
    case PublishResult::published: return "published";
    case PublishResult::already_present: return "already_present";
    case PublishResult::skipped: return "skipped";
    case PublishResult::failed: return "failed";
  }
  return "?";
}

const char* to_string(LookupResult r) {
  switch (r) {
    case LookupResult::hit: return "hit";
    case LookupResult::miss: return "miss";
    case LookupResult::damaged: return "damaged";
    case LookupResult::fallback: return "fallback";
    case LookupResult::disabled: return "disabled";
  }
  return "?";
}

const char* to_string(EntryState s) {
  switch (s) {
    case EntryState::ok: return "ok";
    case EntryState::damaged: return "damaged";
    case EntryState::unfinished: return "unfinished";
  }
  return "?";
}

Store::Store(Config config, std::shared_ptr<FileSystem> fs) : config_(std::move(config)), fs_(std::move(fs)) {}

Result<std::shared_ptr<Store>> Store::open(Config config, std::shared_ptr<FileSystem> fs) {
  if (config.directory.empty()) config.directory = Config::default_directory();
  while (config.directory.size() > 1 && config.directory.back() == '/') config.directory.pop_back();
  std::shared_ptr<Store> store(new Store(std::move(config), std::move(fs)));
  if (!store->config_.enabled()) return store;  // a disabled cache touches no disk
  FileSystem& f = *store->fs_;
  const std::string& dir = store->config_.directory;
  for (const char* sub : {store::kEntriesDir, store::kTmpDir, store::kTrashDir}) {
    Status st = make_directories(f, dir + "/" + sub);
    if (!st) return st.with_context("cache directory " + dir);
  }
  if (!f.stat(dir + "/" + store::kTagFile)) {
    // Only backup tools read the tag; a cache without it works the same.
    (void)write_file_atomic(f, dir + "/" + store::kTagFile,
                            "Signature: 8a477f597d28d172789f06886806bc55\n"
                            "# This directory is a snapcache cache; see https://bford.info/cachedir/\n");
  }
  return store;
}

DigestMemo Store::digest_memo() const {
  return DigestMemo(fs_, config_.directory + "/" + store::kDigestsFile);
}

std::string Store::entry_path(const std::string& id) const {
  return config_.directory + "/" + store::kEntriesDir + "/" + id;
}

namespace {

// Reads just the key at the front of a manifest: enough to explain a miss, without reading (or
// trusting) the rest. The full manifest is checksummed when the entry is actually loaded.
Result<Key> read_manifest_key(FileSystem& fs, const std::string& manifest_path) {
  auto fd = open_in_cache(fs, manifest_path, OpenMode::read);
  if (!fd) return fd.status();
  std::string head(format::kManifestHeadBytes, '\0');
  SNAPCACHE_RETURN_IF_ERROR(read_all(fs, fd->get(), head.data(), head.size(), 0));
  auto decoded = format::decode_manifest_head(head);
  if (!decoded) return decoded.status();
  std::string key(decoded->key_size, '\0');
  SNAPCACHE_RETURN_IF_ERROR(read_all(fs, fd->get(), key.data(), key.size(), format::kManifestHeadBytes));
  return decode_key(key);
}

}  // namespace

Result<std::vector<std::pair<std::string, Key>>> entry_keys(Store& store) {
  std::vector<std::pair<std::string, Key>> keys;
  auto names = store.fs().list_directory(store.config().directory + "/" + store::kEntriesDir);
  if (!names) return names.status().with_context("list the entries of " + store.config().directory);
  for (const auto& e : *names) {
    if (!store::is_entry_id(e.name)) continue;
    // An unreadable entry has no key to compare with; loads and verify report its damage.
    auto key = read_manifest_key(store.fs(), store.entry_path(e.name) + "/" + store::kManifestFile);
    if (key) keys.emplace_back(e.name, std::move(*key));
  }
  return keys;
}

std::optional<std::pair<std::string, std::vector<KeyDifference>>> nearest_entry(Store& store, const Key& key) {
  // Explaining a miss is best effort: a cache that cannot be listed has nothing to compare with.
  auto keys = entry_keys(store);
  if (!keys) return std::nullopt;
  // Same component first: a miss for "dit" is best explained by the other "dit" entry.
  auto score = [&](const std::vector<KeyDifference>& diffs, const Key& other) {
    return diffs.size() + (other.component == key.component ? 0 : 100);
  };
  std::optional<std::pair<std::string, std::vector<KeyDifference>>> best;
  std::size_t best_score = 0;
  for (auto& [id, k] : *keys) {
    auto diffs = diff_keys(key, k);
    const std::size_t candidate_score = score(diffs, k);
    if (!best || candidate_score < best_score) {
      best = std::make_pair(id, std::move(diffs));
      best_score = candidate_score;
    }
  }
  return best;
}

}  // namespace snapcache
