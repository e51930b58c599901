#include "snapcache/store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <thread>

#include "util/fmt.h"

#include "format/manifest.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "store/entry_index.h"
#include "store/layout.h"
#include "store/ownership.h"
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

bool own_directory(FileSystem& fs, const std::string& path, bool create) {
  if (create) {
    if (Status made = fs.make_directory(path); !made && made.sys_errno() != EEXIST) return false;
  }
  auto st = fs.stat(path, Follow::no);
  return st && st->is_directory && !st->is_symlink;
}

Status lock_within(FileSystem& fs, int fd, std::chrono::microseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  auto pause = std::chrono::microseconds(250);
  for (;;) {
    Status st = fs.lock(fd, LockMode::exclusive, LockWait::no_wait);
    if (st || st.code() != StatusCode::busy || std::chrono::steady_clock::now() >= deadline) return st;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

void mark_used(FileSystem& fs, int lease_fd) {
  if (auto lease = fs.fstat(lease_fd); lease && lease->links <= 1) (void)fs.touch(lease_fd);
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

std::string describe_evictions(const std::vector<EvictedEntry>& evicted) {
  if (evicted.empty()) return {};
  std::uint64_t total = 0;
  std::vector<std::string> each;
  for (const EvictedEntry& e : evicted) {
    total += e.bytes;
    each.push_back(fmt::format("{} ({}, {})", store::short_id(e.id), e.component.empty() ? "?" : e.component,
                               format_size(e.bytes)));
  }
  return fmt::format("evicted {} {} ({}) to make room: {}", evicted.size(), evicted.size() == 1 ? "entry" : "entries",
                     format_size(total), fmt::join(each, ", "));
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

// A null file system is the POSIX one (store.h's default, which names FileSystem only by a
// forward declaration so that a loader's surface does not reach the seam).
Store::Store(Config config, std::shared_ptr<FileSystem> fs)
    : config_(std::move(config)), fs_(fs != nullptr ? std::move(fs) : posix_file_system()) {}

namespace {

// The tag every cache snapcache creates has carried since the first release: the cachedir
// standard's signature (for backup tools), then snapcache's own line. The second line is what
// makes a directory a snapcache cache; another program's cache has the signature alone.
constexpr std::string_view kTagSignature = "Signature: 8a477f597d28d172789f06886806bc55\n";
constexpr std::string_view kTagOwnLine = "# This directory is a snapcache cache";
constexpr std::string_view kTagContents =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This directory is a snapcache cache; see https://bford.info/cachedir/\n";

bool has_snapcache_tag(FileSystem& fs, const std::string& dir) {
  auto text = read_file(fs, dir + "/" + store::kTagFile, 4096, Follow::no);
  return text && text->starts_with(kTagSignature) && text->find(kTagOwnLine) != std::string::npos;
}

// What a process that is creating the cache right now has made so far: the tag being written
// (its temporary file) and the empty subdirectories. Adopting that removes nothing of anyone's.
bool being_initialised(FileSystem& fs, const std::string& dir, const std::vector<DirEntry>& names) {
  const std::string tag_temp = std::string(store::kTagFile) + ".tmp.";
  for (const auto& e : names) {
    if (e.name.starts_with(tag_temp)) continue;
    bool sub = e.name == store::kEntriesDir || e.name == store::kTmpDir || e.name == store::kTrashDir;
    if (!sub) return false;
    auto inside = fs.list_directory(dir + "/" + e.name);
    if (!inside || !inside->empty()) return false;
  }
  return true;
}

// The cache directory and its subdirectories belong to the user who runs the store and only that
// user may write them: the store deletes what it finds in tmp/ and trash/ and maps what it finds
// in entries/, so whoever else can write there could make it delete or serve their files.
// `follow`: the cache path itself may be a link the user made; its subdirectories may not.
Status check_owned(FileSystem& fs, const std::string& path, Follow follow) {
  auto st = fs.stat(path, follow);
  if (!st) return st.status();
  if (st->is_symlink)
    return Status(StatusCode::foreign, path + " is a symbolic link; the store does not follow links inside its cache "
                                              "(remove it, the store recreates the directory)");
  if (!st->is_directory) return Status(StatusCode::foreign, path + " is not a directory");
  const store::OwnershipRule rule{
      {{static_cast<std::uint32_t>(::geteuid()), "this user"}},
      "another user could make the store delete or serve their files",
      "a cache is used only by its owner (set SNAPCACHE_DIR to a directory of your own)"};
  return store::check_writers(*st, path, path, rule);
}

// Refuses a directory that is not a snapcache cache (see docs/reliability.md): pointing the store
// at $HOME must not make it clean ~/tmp. An absent or empty directory becomes a new cache.
Status prepare_cache_directory(FileSystem& fs, const std::string& dir) {
  auto st = fs.stat(dir);  // the cache path itself may be a link the user made
  if (!st && st.status().code() == StatusCode::not_found) {
    SNAPCACHE_RETURN_IF_ERROR(make_directories(fs, dir));
    st = fs.stat(dir);
  }
  if (!st) return st.status();
  if (!st->is_directory) return Status(StatusCode::invalid_argument, dir + " is not a directory");
  auto names = fs.list_directory(dir);
  if (!names) return names.status();
  const bool ours = has_snapcache_tag(fs, dir);
  if (!ours && !being_initialised(fs, dir, *names))
    return Status(StatusCode::foreign,
                  dir + " is not empty and is not a snapcache cache (it has no CACHEDIR.TAG written by snapcache); "
                        "the store will not adopt it, since it empties the tmp/ and trash/ of its cache. "
                        "Use a new or empty directory");
  SNAPCACHE_RETURN_IF_ERROR(check_owned(fs, dir, Follow::yes));
  // The tag first: from then on, the directory is recognised as a cache whatever else it holds.
  if (!ours) SNAPCACHE_RETURN_IF_ERROR(write_file_atomic(fs, dir + "/" + store::kTagFile, std::string(kTagContents)));
  for (const char* sub : {store::kEntriesDir, store::kTmpDir, store::kTrashDir}) {
    const std::string path = dir + "/" + sub;
    if (Status made = fs.make_directory(path); !made && made.sys_errno() != EEXIST) return made;
    SNAPCACHE_RETURN_IF_ERROR(check_owned(fs, path, Follow::no));
  }
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<Store>> Store::open(Config config, std::shared_ptr<FileSystem> fs) {
  if (config.directory.empty()) config.directory = Config::default_directory();
  // No usable home, and nothing named one: there is no cache anywhere to fall back to. Refused
  // even when disabled, so that nothing (a digest memo, a counter) is ever written beside "/".
  if (config.directory.empty()) return Config::missing_directory();
  while (config.directory.size() > 1 && config.directory.back() == '/') config.directory.pop_back();
  std::shared_ptr<Store> store(new Store(std::move(config), std::move(fs)));
  if (!store->config_.enabled()) return store;  // a disabled cache touches no disk
  const std::string& dir = store->config_.directory;
  if (Status st = prepare_cache_directory(*store->fs_, dir); !st) return st.with_context("cache directory " + dir);
  return store;
}

std::shared_ptr<Store> Store::open_for_loading(const Result<Config>& config, std::shared_ptr<FileSystem> fs) {
  Status why;
  if (config) {
    auto store = open(*config, fs);
    if (store) return std::move(*store);
    why = store.status();
  } else {
    why = config.status().with_context("cache settings");
  }
  // Unavailable: it answers every lookup and publication with the reason, and touches no disk, so
  // the load takes the ordinary path instead of failing over the cache.
  std::shared_ptr<Store> store(new Store(config ? *config : Config{}, std::move(fs)));
  store->unavailable_ = Status(why.code(), "the cache cannot be used: " + why.message(), why.sys_errno());
  return store;
}

Status Store::usable() const {
  if (!config_.enabled()) return Status(StatusCode::disabled, "the cache is disabled by configuration");
  return unavailable_;
}

DigestMemo Store::digest_memo() const {
  return DigestMemo(fs_, config_.directory + "/" + store::kDigestsFile);
}

std::string Store::entry_path(const std::string& id) const {
  return config_.directory + "/" + store::kEntriesDir + "/" + id;
}

namespace store {

// The full manifest is checksummed when the entry is actually loaded.
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

}  // namespace store

Result<std::vector<std::pair<std::string, Key>>> entry_keys(Store& store) {
  std::vector<std::pair<std::string, Key>> keys;
  auto names = store.fs().list_directory(store.config().directory + "/" + store::kEntriesDir);
  if (!names) return names.status().with_context("list the entries of " + store.config().directory);
  for (const auto& e : *names) {
    if (!store::is_entry_id(e.name)) continue;
    // An unreadable entry has no key to compare with; loads and verify report its damage.
    auto key = store::read_manifest_key(store.fs(), store.entry_path(e.name) + "/" + store::kManifestFile);
    if (key) keys.emplace_back(e.name, std::move(*key));
  }
  return keys;
}

namespace {

// Manifests a miss reads to name the nearest entry: enough for the entries of one checkpoint (a
// node's ranks, dtypes, torch versions), never the whole cache.
constexpr std::size_t kNearestCandidates = 16;

}  // namespace

std::optional<NearestEntry> nearest_entry(Store& store, const Key& key) {
  const std::string& dir = store.config().directory;
  // The index chooses which manifests to read (store/entry_index.h); their keys decide.
  std::optional<std::vector<std::string>> ids = store::index_candidates(store.fs(), dir, key, kNearestCandidates);
  if (!ids) {
    // No index (a cache from before it, until gc makes its records): the first entries listed.
    // Explaining a miss is best effort: a cache that cannot be listed has nothing to compare with.
    ids.emplace();
    if (auto names = store.fs().list_directory(dir + "/" + store::kEntriesDir)) {
      for (const auto& e : *names) {
        if (ids->size() >= kNearestCandidates) break;
        if (store::is_entry_id(e.name) && std::find(ids->begin(), ids->end(), e.name) == ids->end())
          ids->push_back(e.name);
      }
    }
  }
  std::optional<NearestEntry> best;
  for (const std::string& id : *ids) {
    // An unreadable entry has no key to compare with (one the index names may be gone); loads
    // and verify report damage.
    auto k = store::read_manifest_key(store.fs(), store.entry_path(id) + "/" + store::kManifestFile);
    // Only the same model on the same files explains a miss: rank 3 of a model by rank 2 of it,
    // or by rank 3 before its checkpoint changed; never another model, nor this one elsewhere.
    if (!k || k->component != key.component || !same_checkpoint(*k, key)) continue;
    NearestEntry candidate{id, diff_keys(key, *k)};
    if (!best || candidate.differences.size() < best->differences.size()) best = std::move(candidate);
  }
  return best;
}

std::string first_load_reason(const Key& key) {
  return fmt::format("no entry of component '{}' for this checkpoint yet: this model's first load",
                     key.component);
}

}  // namespace snapcache
