// Cache directories filled by the library for the CLI tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "snapcache/extend/store_access.h"
#include "snapcache/maintenance.h"
#include "util/file_io.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

namespace snapcache::test {

// A cache in a fresh temporary directory, with a store open on it.
struct Cache {
  TempDir dir;
  std::shared_ptr<Store> store;
  Cache();
  const std::string& path() const { return dir.path(); }
  // Publishes raw_model(seed, mib) under store_key(seed) in 1 MiB chunks; returns the id. The
  // key's checkpoint names a path where no file is, so `ls` shows the entry stale and `gc --grace
  // 0` removes it: use publish_reachable for an entry a gc must keep.
  std::string publish(int seed, std::size_t mib = 1);
  // store_key(seed) keyed by a real checkpoint file, written next to the cache
  // (checkpoint_file(seed)), as a loader keys it: its entry is stale only once that file changes
  // or goes.
  Key reachable_key(int seed);
  std::string checkpoint_file(int seed) const;
  // Publishes raw_model(seed, mib) under `key`; returns the id.
  std::string publish(const Key& key, int seed, std::size_t mib = 1);
  std::string lease_path(const std::string& id) const { return store->entry_path(id) + "/lease"; }
  std::string data_path(const std::string& id) const { return store->entry_path(id) + "/data-0000.bin"; }
};

// "--dir", path: the arguments every command gets in these tests.
std::vector<std::string> with_dir(const Cache& cache, std::vector<std::string> args);

// Every path below `dir` with its size and mtime: equal snapshots mean nothing changed.
std::string tree_snapshot(const std::string& dir);
bool contains(const std::string& text, const std::string& part);

}  // namespace snapcache::test
