// Encoding and decoding the archive stream (grammar in archive_format.h) over zstd's streaming
// API. The encoder takes entries' storage bytes as they are read and groups 16-bit float blocks,
// and with a signing key seals each entry and the end; the decoder hands the bytes back ungrouped,
// storage by storage, and checks each seal against the signer its head names. Neither knows about
// caches: export and import (transfer.cpp) join them to the store's EntryReader and EntryWriter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "archive/archive_format.h"
#include "archive/signing.h"
#include "snapcache/archive.h"
#include "snapcache/manifest.h"

namespace snapcache::archive {

class Encoder {
 public:
  // Writes the header and the head at once; `threads` zstd workers (0: compress on the calling
  // thread). With `signer` (which must outlive the encoder) every entry and the end are sealed.
  static Result<std::unique_ptr<Encoder>> open(const ArchiveSink& sink, int level, std::size_t threads,
                                               const SigningKey* signer = nullptr);
  ~Encoder();

  // An entry: its id, its manifest bytes and the decoded manifest (for its layout). Then exactly
  // its storages' bytes through data(), in order, then end_entry().
  Status begin_entry(const std::string& id, const std::string& manifest_bytes, const Manifest& manifest);
  Status data(const void* bytes, std::size_t size);
  Status end_entry();
  // The end marker (sealed when signed) and the end of the zstd frame.
  Status finish();
  std::uint64_t bytes_out() const { return bytes_out_; }

 private:
  explicit Encoder(const ArchiveSink& sink) : sink_(sink) {}
  Status compress(const void* bytes, std::size_t size, bool end_frame = false);
  void digest(const std::byte* bytes, std::size_t size);  // into data_digest_, cut into blocks
  Status flush_block();
  Status next_storage();  // skips empty storages; sets the current one

  ArchiveSink sink_;
  void* cctx_ = nullptr;
  std::vector<char> out_;
  std::uint64_t bytes_out_ = 0;
  std::uint64_t entries_ = 0;
  const SigningKey* signer_ = nullptr;
  Nonce nonce_{};
  // The entry being written.
  std::string id_;
  Digest manifest_digest_{};
  std::optional<DataDigest> data_digest_;  // when signed
  std::byte* digest_block_ = nullptr;      // the current data block, being filled
  std::size_t digest_fill_ = 0;            // bytes in it
  const Manifest* manifest_ = nullptr;
  std::vector<std::uint32_t> order_;
  std::size_t next_ = 0;        // into order_: the storage after the current one
  std::uint64_t left_ = 0;      // bytes of the current storage still to come
  bool grouped_ = false;
  std::vector<std::byte> block_, grouped_block_;
};

struct DecodedEntry {
  std::string id;
  Manifest manifest;
};

class Decoder {
 public:
  explicit Decoder(const ArchiveSource& source);
  ~Decoder();

  // The header (magic and version) and, from version 2, the head (who signed it, if anyone).
  Status open();
  std::uint32_t version() const { return version_; }
  // The key the head names as the signer; none for an unsigned archive. Only a claim until a seal
  // holds: each entry's seal() and the end marker are checked against it.
  const std::optional<PublicKey>& signer() const { return signer_; }
  // The next entry's id and manifest (decoded and validated), or nullopt at the end marker. A
  // manifest that cannot be decoded is an error: without its layout the rest cannot be read.
  Result<std::optional<DecodedEntry>> next();
  // The current entry's storage bytes, ungrouped, in file order: `sink(storage, bytes, size)`;
  // with an empty sink they are read and dropped. Must be called once after each next() entry.
  // In a signed archive it also reads the entry's seal (a missing one is damage to the stream).
  using Sink = std::function<Status(std::uint32_t storage, const void* data, std::size_t size)>;
  Status data(const Sink& sink);
  // After data(): whether the entry's seal holds for the signer over its id, manifest and data
  // (damaged, saying so, when it does not); ok in an unsigned archive, which has no seals.
  const Status& seal() const { return seal_; }
  // After the end marker: the zstd frame ended and nothing follows.
  Status close();

  std::uint64_t bytes_in() const { return bytes_in_; }
  std::uint64_t entries() const { return entries_; }

 private:
  Status read_exact(void* dst, std::size_t size, const char* what);
  Result<std::size_t> read_some(void* dst, std::size_t size);

  Status read_seal();

  ArchiveSource source_;
  void* dctx_ = nullptr;
  std::uint32_t version_ = 0;
  std::optional<PublicKey> signer_;
  Nonce nonce_{};
  Digest manifest_digest_{};
  Status seal_;
  std::vector<char> in_;
  std::size_t in_pos_ = 0, in_size_ = 0;
  bool source_ended_ = false;
  bool frame_open_ = false;  // a zstd frame was started and has not ended
  std::uint64_t bytes_in_ = 0;
  std::uint64_t entries_ = 0;
  std::optional<DecodedEntry> current_;
  bool data_pending_ = false;
  std::vector<std::byte> block_, plain_block_;
};

}  // namespace snapcache::archive
