// The one answer to "is this entry sound, and which of its data files can be trusted without
// reading them". Lookup, verify and entry_info all ask here, so they never disagree about an
// entry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/manifest.h"
#include "snapcache/status.h"

namespace snapcache::store {

struct EntryCheck {
  // ok, or the first problem: damage (see is_damage) with a reason a person can act on, or the
  // I/O failure that stopped the check (not_found when the entry directory is gone).
  Status status;
  std::optional<Manifest> manifest;  // once decoded, even when a later check failed
  std::vector<UniqueFd> data_files;  // open for reading, in the manifest's order (when sound)
  std::vector<FileIdentity> identities;  // of the data files as they are now
  // Data files whose identity is neither the one published nor one a later rehash proved (the
  // stamp): their chunk hashes must be checked again before the bytes are trusted.
  std::vector<std::uint32_t> untrusted_files;
  std::optional<std::int64_t> verified_unix_ns;  // from a sound verification stamp
};

// Checks, in order: the manifest is present and passes its own checks; its key hashes to `id`;
// the lease file is present; every data file is present with the size the manifest gives. Reads
// no data (see rehash_files for that). Damage is only ever concluded about the entry directory
// that is still at `entry_path` when the check ends: an entry evicted or replaced while it was
// checked (a file missing because the whole entry went) is not_found, never damage.
EntryCheck check_entry(FileSystem& fs, const std::string& entry_path, const std::string& id);

// The shared lease a reader (a load, verify) holds while it checks and uses an entry, so that no
// evictor removes it meanwhile. Not an entry's lease but an answer when it cannot be taken: busy
// (the entry is being published or evicted), not_found (it went meanwhile), or the entry check's
// damage when the entry is there without a lease file.
Result<UniqueFd> take_reader_lease(FileSystem& fs, const std::string& entry_path, const std::string& id);

// The stamp of a rehash that proved these identities (see format/stamp.h). Best effort: without
// it the next load rehashes again, nothing worse.
void record_proven_identities(FileSystem& fs, const std::string& entry_path,
                              const std::vector<FileIdentity>& identities);

}  // namespace snapcache::store
