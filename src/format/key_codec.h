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
// The grammar is Key::fields() (snapcache/key.h), walked in order: after the magic "SNAPKEY", the
// encoding version (u8) and the format version (u32), each field by its type (format/codec.h:
// integers little-endian, strings with their length; an int as u32; a map as its count and its
// sorted pairs; a list of checkpoint files as its count and each file's identity; a record as its
// own fields() in order). key_codec.cpp's Encoder and Decoder are that walk, and nothing else says
// it.
#pragma once

#include <cstdint>
#include <string_view>

#include "snapcache/key.h"

namespace snapcache::format {

inline constexpr std::string_view kKeyMagic = "SNAPKEY";
using snapcache::kKeyEncodingVersion;  // next to Key::fields(), snapcache/key.h

}  // namespace snapcache::format
