// The canonical key encoding (snapcache/key.h: encode_key, decode_key, key_id). Field order and
// tags are fixed and maps are sorted (std::map), so equal keys give equal bytes and thus equal ids:
// id = hex(XXH3-128(encode_key(key))).
//
// What is encoded is the key's identity (key_identity in snapcache/key.h): a checkpoint file keyed
// by content is written with an empty path and zero times, device and inode, so its id depends on
// its bytes (size and digest) alone. A file without a digest is written whole, as it always was, so
// the ids of such keys did not change when content keys stopped naming their paths. Snapcache
// before that wrote content-keyed files with their paths; decode_key refuses those keys (foreign):
// nothing asks for their ids any more, and their entries age out by LRU.
//
// key grammar (integers little-endian; str as in codec.h):
//   key        = "SNAPKEY" encoding_version:u8 format_version:u32 files source torch dtype policy
//                topology component options
//   files      = count:u32 { path:str size:u64 mtime_ns:i64 ctime_ns:i64 device:u64 inode:u64
//                            digest:str }    ; with a digest: path '' and the four stats 0
//   source     = str                 ; caller's loader identity (see digest_source_files)
//   torch      = version:str cuda:str abi:str
//   dtype      = str
//   policy     = str                 ; mixed-precision policy
//   topology   = tp_rank:u32 tp_size:u32 pp_rank:u32 pp_size:u32 extra:map
//   component  = str
//   options    = map
//   map        = count:u32 { name:str value:str }
#pragma once

#include <cstdint>
#include <string_view>

#include "snapcache/key.h"

namespace snapcache::format {

inline constexpr std::string_view kKeyMagic = "SNAPKEY";
using snapcache::kKeyEncodingVersion;  // next to Key::fields(), snapcache/key.h

}  // namespace snapcache::format
