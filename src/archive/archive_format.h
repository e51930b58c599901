// The bytes of a snapcache archive: entries travelling between caches (`snapcache export`,
// `snapcache import`). Streamed, so it goes through a pipe (export | ssh host import -).
//
// archive grammar, version 2 (integers little-endian):
//   archive   = magic:"SNAPCACHE-ARCHV\0"(16) version:u32 stream
//   stream    = one or more zstd frames (RFC 8878, content checksum on) whose content is:
//               head entry* end
//   head      = 'H' nonce:16 signer
//               ; nonce: random, made by the exporter: what makes this archive's signatures its own
//   signer    = 0x00                        ; unsigned
//             | 0x01 public_key:32          ; signed: an Ed25519 key (format/public_key.h)
//   entry     = 'E' id:32 manifest_size:u64 manifest:bytes{manifest_size} data seal
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
//   seal      = ""                          ; in an unsigned archive
//             | 'S' signature:64            ; in a signed one: the signer's, over entry_statement
//   end       = 'Z' entry_count:u64 end_seal
//   end_seal  = "" | signature:64           ; signed: the signer's, over end_statement
//
// What is signed (Ed25519, libsodium's crypto_sign_detached; digests BLAKE2b-256):
//   entry_statement = "snapcache archive entry\0" nonce index:u64 id:32 manifest_digest:32
//                     data_digest:32
//               ; index: the entry's place in the archive, from 0; manifest_digest: of the manifest
//               ; bytes as carried; data_digest: of the digests of the entry's data blocks, each
//               ; block as the grammar cuts a storage (kGroupBlockBytes from its start, the last
//               ; shorter) and as plain bytes (ungrouped), in the order the grammar carries them:
//               ; blocks digest apart, so they can be hashed on several threads
//   end_statement   = "snapcache archive end\0" nonce entry_count:u64
// So a signature covers everything that decides the bytes a load of the entry gets: the key (a
// re-keyed entry fails it), the layout and dtypes (the manifest), and the data itself by a digest
// no one can make other bytes match (the XXH3 chunk checksums find damage, they prove nothing
// against someone who makes bytes to match them). The nonce and the index tie each entry to its
// place in this archive (entries cannot be swapped, dropped from the middle or spliced in from
// another archive of the same signer), and the signed end to the count (an archive cut short
// after an entry fails at its end; the entries before it, each proven, stand).
//
// Version 1, read still: no head and no seals (an unsigned archive, from before archives were
// signed): stream = entry* end, entry = 'E' id manifest_size manifest data, end = 'Z'
// entry_count. Its authorship can never be proven, so an import takes it only when told to trust
// unsigned archives (ImportOptions::trust_unsigned).
//
// Why byte grouping: the high bytes of bf16/fp16 weights (sign, exponent) repeat a few values and
// compress well; interleaved with the near-random low bytes they do not (bench/archive_bench.cpp).
// The decoder trusts nothing: the manifest size is bounded (format::kMaxManifestBytes) and read as
// it arrives, the manifest is decoded and validated before its layout decides anything, every
// chunk is proven against its checksum by the importing store (store/entry_stream.h), and in a
// signed archive every entry's seal is checked before the entry is committed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "archive/signing.h"
#include "snapcache/manifest.h"

namespace snapcache::archive {

inline constexpr std::string_view kArchiveMagic{"SNAPCACHE-ARCHV\0", 16};
inline constexpr std::uint32_t kArchiveVersion = 2;
// The version before signatures; read as an unsigned archive.
inline constexpr std::uint32_t kUnsignedArchiveVersion = 1;
inline constexpr std::size_t kArchiveHeaderBytes = 16 + 4;
inline constexpr char kHeadTag = 'H';
inline constexpr char kEntryTag = 'E';
inline constexpr char kSealTag = 'S';
inline constexpr char kEndTag = 'Z';
enum class SignerKind : std::uint8_t { none = 0, ed25519 = 1 };
inline constexpr std::string_view kEntryStatementContext{"snapcache archive entry\0", 24};
inline constexpr std::string_view kEndStatementContext{"snapcache archive end\0", 22};
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

// data_digest (see the grammar): BLAKE2b-256 over the BLAKE2b-256 of each data block, in order.
// Blocks are kept in a batch and hashed a batch at a time on several threads: BLAKE2b on one
// thread (0.4-0.8 GB/s here) would bound export and import at its rate.
class DataDigest {
 public:
  explicit DataDigest(std::size_t threads);
  // Room for the next block (kGroupBlockBytes): fill it, then end_block(size). It stays as
  // written until the next block() call, so the caller may still read it after end_block().
  std::byte* block();
  void end_block(std::size_t size);
  Digest finish();

 private:
  static constexpr std::size_t kBatchBlocks = 16;
  void hash_batch();

  std::size_t threads_;
  std::unique_ptr<std::byte[]> batch_;  // kBatchBlocks slots of kGroupBlockBytes
  std::vector<std::size_t> sizes_;      // of the ended blocks in the batch, in order
  bool hashed_ = false;                 // the batch was hashed: block() starts a new one
  DigestStream outer_;
};

// The messages a signed archive's seals sign (see the grammar above), built in one place for the
// exporter that signs them and the importer that checks them.
std::string entry_statement(const Nonce& nonce, std::uint64_t index, std::string_view id, const Digest& manifest_digest,
                            const Digest& data_digest);
std::string end_statement(const Nonce& nonce, std::uint64_t entry_count);

}  // namespace snapcache::archive
