// The bytes of a snapcache archive: entries travelling between caches (`snapcache export`,
// `snapcache import`). Streamed, so it goes through a pipe (export | ssh host import -).
//
// archive grammar (integers little-endian):
//   archive   = magic:"SNAPCACHE-ARCHV\0"(16) version:u32 stream
//   stream    = one or more zstd frames (RFC 8878, content checksum on) whose content is:
//               entry* end
//   entry     = 'E' id:32 bytes manifest_size:u64 manifest:bytes{manifest_size} data
//               ; id: the entry's id (32 lowercase hex digits), key_id of the manifest's key
//               ; manifest: manifest.snap as the exporting cache holds it (src/format/manifest.h):
//               ; the key, the layout and every chunk checksum the importer proves the data by
//   data      = storage_bytes{storage_count}
//               ; the storages in file order (format::storages_in_file_order), padding left out
//   storage_bytes = block*  ; the storage's nbytes, cut into blocks of kGroupBlockBytes from its
//               ; start (the last one shorter). A 16-bit float storage (every tensor on it bfloat16
//               ; or float16, see is_grouped_storage) has each block byte-grouped: the bytes at odd
//               ; offsets of the block (the high byte of each little-endian element), then those
//               ; at even offsets; a block of odd size keeps its last byte last. Other storages go
//               ; as they are.
//   end       = 'Z' entry_count:u64
//
// Why byte grouping: the high bytes of bf16/fp16 weights (sign, exponent) repeat a few values and
// compress well; interleaved with the near-random low bytes they do not (bench/archive_bench.cpp).
// The decoder trusts nothing: the manifest size is bounded (format::kMaxManifestBytes) and read as
// it arrives, the manifest is decoded and validated before its layout decides anything, and every
// chunk is proven against its checksum by the importing store (store/entry_stream.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "snapcache/manifest.h"

namespace snapcache::archive {

inline constexpr std::string_view kArchiveMagic{"SNAPCACHE-ARCHV\0", 16};
inline constexpr std::uint32_t kArchiveVersion = 1;
inline constexpr std::size_t kArchiveHeaderBytes = 16 + 4;
inline constexpr char kEntryTag = 'E';
inline constexpr char kEndTag = 'Z';
inline constexpr std::size_t kIdBytes = 32;
inline constexpr std::size_t kGroupBlockBytes = 1u << 20;
// zstd windows a decoder accepts: 2^27 (128 MiB), zstd's own default limit; an archive asking more
// is refused rather than allocated.
inline constexpr int kMaxWindowLog = 27;

// Whether storage `index`'s bytes are byte-grouped in an archive: it has tensors and all of them
// are bfloat16 or float16.
bool is_grouped_storage(const Manifest& manifest, std::uint32_t index);

// One block, grouped (odd-offset bytes, then even-offset bytes, an odd last byte last) and back.
// `out` holds `size` bytes; `in` and `out` do not overlap.
void group_bytes(const std::byte* in, std::byte* out, std::size_t size);
void ungroup_bytes(const std::byte* in, std::byte* out, std::size_t size);

}  // namespace snapcache::archive
