// The verification stamp: data-file identities proven by a full rehash after publication (the
// files were copied, restored from backup, or touched). A later load that sees one of these
// identities trusts the manifest's chunk hashes without reading the data again.
//
// verified.snap grammar (little-endian; identity as in codec.h):
//   stamp    = magic:"SNAPCACHE-STAMP\0"(16) format_version:u32 verified_unix_ns:i64
//              count:u32 identity{count} checksum:u64   ; XXH3-64 of everything before it
//              ; one identity per data file, in the manifest's file order
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/status.h"

namespace snapcache::format {

struct Stamp {
  std::int64_t verified_unix_ns = 0;
  std::vector<FileIdentity> identities;  // in the manifest's file order
};

// The largest stamp read into memory: ~40 bytes per data file, and entries have a handful.
inline constexpr std::size_t kMaxStampBytes = 1u << 20;

std::string encode_stamp(const Stamp& stamp);
Result<Stamp> decode_stamp(std::string_view bytes);

}  // namespace snapcache::format
