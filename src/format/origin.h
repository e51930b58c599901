// origin.snap: where an entry came from (snapcache/manifest.h, EntryOrigin), written by the cache
// that made the entry, into the pending entry before its commit. It is never taken from what the
// entry came in (an archive, another cache): an archive cannot say that it was signed by a trusted
// key; the importer checked the signature and writes down whose it was.
//
// origin.snap grammar (little-endian; str as in codec.h):
//   origin = magic:"SNAPCACHE-ORIGN\0"(16) version:u32 kind:u8 recorded_unix_ns:i64 signer:str
//            source:str checksum:u64        ; XXH3-64 of everything before it
//            ; kind: 1 published, 2 imported_signed, 3 imported_unproven, 4 secondary
//            ; signer: "ed25519:<64 hex>" (format/public_key.h) or empty; source: a directory or empty
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "snapcache/manifest.h"
#include "snapcache/status.h"

namespace snapcache::format {

inline constexpr std::uint32_t kOriginVersion = 1;
// The largest origin record read: a kind, a key and a path.
inline constexpr std::size_t kMaxOriginBytes = 64u << 10;

std::string encode_origin(const EntryOrigin& origin);
// A record that is not one (torn, another version, an unknown kind) is an error; the caller then
// says the origin is not known, never guesses one.
Result<EntryOrigin> decode_origin(std::string_view bytes);

}  // namespace snapcache::format
