// The index of entries by component and checkpoint, so that a miss names the nearest entry after
// reading a few manifests instead of every one (a cache of 100k entries read 100k on each miss):
//
//   <dir>/index/<component hash>/<checkpoint hash>/<id>     one empty file per entry
//
// It only ever chooses which manifests a miss reads to explain itself; the explanation compares
// the keys in those manifests. So it is kept like misses/ and stats.json: through the store's
// FileSystem, best effort (publication adds a record, removal drops it, a failure loses nothing but a
// better explanation), and untrusted: names are read and checked, never a record's bytes; no
// symlink is followed or created in; a damaged part is ignored, and gc removes what does not
// belong and adds the records of entries that lack one.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"

namespace snapcache::store {

inline constexpr const char* kIndexDir = "index";

// Records entry `id` (of `key`) under its component and checkpoint. Best effort.
void index_entry(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id);
// Drops the record of the entry whose manifest is at `manifest_path` (read to learn its key;
// the entry may already be in trash/). Best effort: a record left behind names an entry that is
// gone, which a miss skips and gc removes.
void unindex_entry(FileSystem& fs, const std::string& cache_directory, const std::string& manifest_path,
                   const std::string& id);

// Up to `max` ids of entries to compare a missed key with, by the index alone (names, no
// manifest): those of the key's component and checkpoint; when there are none, one of each other
// checkpoint of its component in turn (its files as they were before a change have another name
// here); none for a component with no entry. Only the keys read tell which are the same model on
// the same files, the only entries that explain a miss (nearest_entry). It lists a few small
// directories, never the whole cache. May name entries that are gone. nullopt when the cache has
// no index at all.
std::optional<std::vector<std::string>> index_candidates(FileSystem& fs, const std::string& cache_directory,
                                                         const Key& key, std::size_t max);

// Up to `max` ids of the entries of the key's component and checkpoint, by the index alone: the
// entries that may hold the same bytes (store/shared_data.h). May name entries that are gone.
std::vector<std::string> index_siblings(FileSystem& fs, const std::string& cache_directory, const Key& key,
                                        std::size_t max);

// What gc checks the index against (garbage.cpp): the name of a component's or a checkpoint's
// directory (16 hex digits), and where the record of entry `id` of `key` is.
bool is_index_hash_name(const std::string& name);
std::string index_record_path(const std::string& cache_directory, const Key& key, const std::string& id);

}  // namespace snapcache::store
