// The manifest of a snapshot entry: everything needed to map the data files back into tensors
// and to prove the bytes are the ones that were published.
//
// An entry is a directory <cache>/entries/<id>/ holding:
//   manifest.snap   this format, written last, before the directory is renamed into place
//   data-NNNN.bin   raw storage bytes, each storage at a 4096-byte aligned offset, zero padded
//   lease           empty; readers hold flock(LOCK_SH) on it while any tensor lives
//   verified.snap   optional: data-file identities re-proven by a full rehash (see stamp.h)
//
// manifest.snap grammar (integers little-endian; str and identity as in codec.h):
//   manifest    = header body trailer
//   header      = magic:"SNAPCACHE-MANIF\0"(16) format_version:u32 flags:u32 body_size:u64
//   body        = key creation files storages tensors
//   key         = len:u32 bytes           ; encode_key() bytes (src/format/key_codec.h): the full
//                                         ; key, kept for "why"
//   creation    = created_unix_ns:i64 snapcache_version:str host:str pid:u32
//   files       = count:u32 file{count}
//   file        = name:str size:u64 chunk_size:u64 chunk_count:u32 chunk_hash:u64{chunk_count}
//                 identity
//   identity    = see src/format/codec.h
//                 ; the file as published; a load that sees the same identity trusts the hashes
//   storages    = count:u32 storage{count}
//   storage     = file:u32 offset:u64 nbytes:u64  ; offset % 4096 == 0
//   tensors     = count:u32 tensor{count}
//   tensor      = name:str dtype:u8 ndim:u8 size:i64{ndim} stride:i64{ndim} storage:u32
//                 storage_offset:i64             ; in elements, as torch counts them
//   trailer     = checksum:u64                   ; XXH3-64 of header and body
//
// chunk_hash[i] is XXH3-64 of bytes [i*chunk_size, min((i+1)*chunk_size, size)) of the file, so
// hashing runs in parallel and a damaged chunk can be named (and with it, the tensors it holds).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "snapcache/manifest.h"
#include "snapcache/status.h"

namespace snapcache::format {

inline constexpr std::string_view kManifestMagic{"SNAPCACHE-MANIF\0", 16};
// The largest manifest read into memory (or written): far above a real one (a thousand-GiB model
// in 4 MiB chunks has 2 MiB of chunk hashes), far below what would exhaust a loader's memory.
inline constexpr std::size_t kMaxManifestBytes = 256ull << 20;
inline constexpr std::size_t kMaxDims = 64;

// The fixed-size start of a manifest: its header and the length of the key that follows. Enough
// to read just the key (to explain a miss) without reading or trusting the rest; the whole
// manifest is checksummed when the entry is loaded.
inline constexpr std::size_t kManifestHeaderBytes = 16 + 4 + 4 + 8;
inline constexpr std::size_t kManifestHeadBytes = kManifestHeaderBytes + 4;
struct ManifestHead {
  std::uint32_t format_version = 0;
  std::uint32_t flags = 0;
  std::uint64_t body_size = 0;
  std::uint32_t key_size = 0;  // the key's bytes start at kManifestHeadBytes
};
// Checks magic, version and the key length against the body size; `prefix` holds at least
// kManifestHeadBytes bytes of the file.
Result<ManifestHead> decode_manifest_head(std::string_view prefix);

std::string encode_manifest(const Manifest& manifest);
// Checks magic, version, checksum and every structural rule (validate_layout) before returning.
Result<Manifest> decode_manifest(std::string_view bytes);

// Bytes a tensor reaches in its storage: (storage_offset + max index + 1) * element size, or 0
// for a tensor with no elements. Fails on negative sizes/strides or overflow.
Result<std::uint64_t> tensor_extent_bytes(const TensorRecord& tensor);

// Every storage lies inside its file, storages are aligned and do not overlap, a file is no larger
// than its storages with their alignment padding, every tensor lies inside its storage, chunk
// tables cover their files. Used on decode (a load, an archive, a secondary store) and before
// publication and import.
Status validate_layout(const Manifest& manifest);

// Storage indices by file, then by offset: the order their bytes lie on disk, and the order an
// archive carries them in (src/archive/archive_format.h).
std::vector<std::uint32_t> storages_in_file_order(const Manifest& manifest);

// Which tensors have bytes in [offset, offset+size) of file `file`: to name damage.
std::vector<std::string> tensors_in_range(const Manifest& manifest, std::uint32_t file,
                                          std::uint64_t offset, std::uint64_t size);

}  // namespace snapcache::format
