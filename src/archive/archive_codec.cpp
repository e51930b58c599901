#include "archive/archive_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "util/fmt.h"

#include "archive/archive_format.h"
#include "archive/signing.h"
#include "format/manifest.h"
#include "format/public_key.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "util/parallel.h"

namespace snapcache::archive {
namespace {

ZSTD_CCtx* cctx_of(void* p) { return static_cast<ZSTD_CCtx*>(p); }
ZSTD_DCtx* dctx_of(void* p) { return static_cast<ZSTD_DCtx*>(p); }

Status zstd_error(std::size_t code, const char* what) {
  return Status(StatusCode::damaged, fmt::format("{}: {}", what, ZSTD_getErrorName(code)));
}

void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

// --- encoder -------------------------------------------------------------------------------------

Result<std::unique_ptr<Encoder>> Encoder::open(const ArchiveSink& sink, int level, std::size_t threads,
                                               const SigningKey* signer) {
  if (level < 1 || level > ZSTD_maxCLevel())
    return Status(StatusCode::invalid_argument, fmt::format("zstd level {} is not in 1..{}", level, ZSTD_maxCLevel()));
  std::unique_ptr<Encoder> e(new Encoder(sink));
  e->cctx_ = ZSTD_createCCtx();
  if (e->cctx_ == nullptr) return Status(StatusCode::io_error, "zstd: out of memory");
  ZSTD_CCtx_setParameter(cctx_of(e->cctx_), ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx_of(e->cctx_), ZSTD_c_checksumFlag, 1);
  // A libzstd built without threads refuses workers; it then compresses on this thread.
  if (threads > 0) (void)ZSTD_CCtx_setParameter(cctx_of(e->cctx_), ZSTD_c_nbWorkers, static_cast<int>(threads));
  e->out_.resize(ZSTD_CStreamOutSize());
  e->block_.resize(kGroupBlockBytes);
  e->grouped_block_.resize(kGroupBlockBytes);
  std::string header(kArchiveMagic);
  const std::uint32_t version = kArchiveVersion;
  header.append(reinterpret_cast<const char*>(&version), 4);
  SNAPCACHE_RETURN_IF_ERROR(e->sink_(header.data(), header.size()));
  e->bytes_out_ += header.size();
  e->signer_ = signer;
  e->nonce_ = random_nonce();
  std::string head(1, kHeadTag);
  head.append(reinterpret_cast<const char*>(e->nonce_.data()), e->nonce_.size());
  head += static_cast<char>(signer != nullptr ? SignerKind::ed25519 : SignerKind::none);
  if (signer != nullptr) head.append(reinterpret_cast<const char*>(signer->public_key().data()), format::kPublicKeyBytes);
  SNAPCACHE_RETURN_IF_ERROR(e->compress(head.data(), head.size()));
  return e;
}

Encoder::~Encoder() { ZSTD_freeCCtx(cctx_of(cctx_)); }

Status Encoder::compress(const void* bytes, std::size_t size, bool end_frame) {
  ZSTD_inBuffer in{bytes, size, 0};
  // ZSTD_e_continue is done once the input is taken; ZSTD_e_end once zstd has nothing left (0).
  for (;;) {
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    const std::size_t r = ZSTD_compressStream2(cctx_of(cctx_), &out, &in, end_frame ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(r)) return zstd_error(r, "zstd");
    if (out.pos > 0) {
      SNAPCACHE_RETURN_IF_ERROR(sink_(out_.data(), out.pos));
      bytes_out_ += out.pos;
    }
    if (end_frame ? r == 0 : in.pos == in.size) return Status::ok();
  }
}

Status Encoder::next_storage() {
  while (next_ < order_.size() && manifest_->storages[order_[next_]].nbytes == 0) ++next_;
  if (next_ == order_.size()) {
    left_ = 0;
    return Status::ok();
  }
  left_ = manifest_->storages[order_[next_]].nbytes;
  grouped_ = is_grouped_storage(*manifest_, order_[next_]);
  ++next_;
  block_.clear();
  return Status::ok();
}

Status Encoder::begin_entry(const std::string& id, const std::string& manifest_bytes, const Manifest& manifest) {
  if (id.size() != kIdBytes) return Status(StatusCode::invalid_argument, "entry id '" + id + "' is not 32 digits");
  std::string head(1, kEntryTag);
  head += id;
  put_u64(head, manifest_bytes.size());
  SNAPCACHE_RETURN_IF_ERROR(compress(head.data(), head.size()));
  SNAPCACHE_RETURN_IF_ERROR(compress(manifest_bytes.data(), manifest_bytes.size()));
  id_ = id;
  if (signer_ != nullptr) {
    manifest_digest_ = digest_of(manifest_bytes);
    data_digest_.emplace(util::worker_count());
    digest_fill_ = 0;
  }
  manifest_ = &manifest;
  order_ = format::storages_in_file_order(manifest);
  next_ = 0;
  return next_storage();
}

void Encoder::digest(const std::byte* bytes, std::size_t size) {
  // Blocks start at the storage's start, as the grammar cuts them, whatever pieces the bytes come in.
  while (size > 0) {
    if (digest_fill_ == 0) digest_block_ = data_digest_->block();
    const std::size_t take = std::min(size, kGroupBlockBytes - digest_fill_);
    std::memcpy(digest_block_ + digest_fill_, bytes, take);
    bytes += take;
    size -= take;
    digest_fill_ += take;
    if (digest_fill_ == kGroupBlockBytes) {
      data_digest_->end_block(digest_fill_);
      digest_fill_ = 0;
    }
  }
}

Status Encoder::flush_block() {
  if (block_.empty()) return Status::ok();
  group_bytes(block_.data(), grouped_block_.data(), block_.size());
  Status st = compress(grouped_block_.data(), block_.size());
  block_.clear();
  return st;
}

Status Encoder::data(const void* bytes, std::size_t size) {
  const auto* p = static_cast<const std::byte*>(bytes);
  while (size > 0) {
    if (left_ == 0) return Status(StatusCode::invalid_argument, "more bytes than the entry's storages hold");
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(size, left_));
    // The digest takes the plain bytes, whatever goes into the stream, each byte once.
    if (!grouped_) {
      if (data_digest_) digest(p, n);
      SNAPCACHE_RETURN_IF_ERROR(compress(p, n));
      p += n;
      size -= n;
      left_ -= n;
    } else {
      // Blocks start at the storage's start, whatever pieces the bytes come in.
      const std::size_t take = std::min(n, kGroupBlockBytes - block_.size());
      if (data_digest_) digest(p, take);
      block_.insert(block_.end(), p, p + take);
      p += take;
      size -= take;
      left_ -= take;
      if (block_.size() == kGroupBlockBytes || left_ == 0) SNAPCACHE_RETURN_IF_ERROR(flush_block());
    }
    if (left_ == 0) {
      // The storage's last block, when shorter than a whole one.
      if (data_digest_ && digest_fill_ > 0) {
        data_digest_->end_block(digest_fill_);
        digest_fill_ = 0;
      }
      SNAPCACHE_RETURN_IF_ERROR(next_storage());
    }
  }
  return Status::ok();
}

Status Encoder::end_entry() {
  if (left_ != 0 || next_ != order_.size())
    return Status(StatusCode::invalid_argument, "the entry's storages were not all written");
  manifest_ = nullptr;
  if (signer_ != nullptr) {
    const Signature signature =
        signer_->sign(entry_statement(nonce_, entries_, id_, manifest_digest_, data_digest_->finish()));
    data_digest_.reset();
    std::string seal(1, kSealTag);
    seal.append(reinterpret_cast<const char*>(signature.data()), signature.size());
    SNAPCACHE_RETURN_IF_ERROR(compress(seal.data(), seal.size()));
  }
  ++entries_;
  return Status::ok();
}

Status Encoder::finish() {
  std::string end(1, kEndTag);
  put_u64(end, entries_);
  if (signer_ != nullptr) {
    const Signature signature = signer_->sign(end_statement(nonce_, entries_));
    end.append(reinterpret_cast<const char*>(signature.data()), signature.size());
  }
  return compress(end.data(), end.size(), /*end_frame=*/true);
}

// --- decoder -------------------------------------------------------------------------------------

Decoder::Decoder(const ArchiveSource& source) : source_(source) {
  dctx_ = ZSTD_createDCtx();
  // The window a frame may ask for is bounded: a hostile header must not make us allocate more.
  if (dctx_ != nullptr) ZSTD_DCtx_setParameter(dctx_of(dctx_), ZSTD_d_windowLogMax, kMaxWindowLog);
  in_.resize(ZSTD_DStreamInSize());
}

Decoder::~Decoder() { ZSTD_freeDCtx(dctx_of(dctx_)); }

Status Decoder::open() {
  if (dctx_ == nullptr) return Status(StatusCode::io_error, "zstd: out of memory");
  char header[kArchiveHeaderBytes];
  std::size_t got = 0;
  while (got < sizeof header) {
    auto n = source_(header + got, sizeof header - got);
    if (!n) return n.status();
    if (*n == 0) break;
    got += *n;
  }
  bytes_in_ += got;
  if (got < sizeof header || std::string_view(header, kArchiveMagic.size()) != kArchiveMagic)
    return Status(StatusCode::foreign, "not a snapcache archive (no SNAPCACHE-ARCHV header)");
  std::memcpy(&version_, header + kArchiveMagic.size(), 4);
  if (version_ == kUnsignedArchiveVersion) return Status::ok();  // no head: unsigned
  if (version_ != kArchiveVersion)
    return Status(StatusCode::foreign, fmt::format("archive version {}; this snapcache reads versions {} and {}",
                                                   version_, kUnsignedArchiveVersion, kArchiveVersion));
  char tag = 0;
  SNAPCACHE_RETURN_IF_ERROR(read_exact(&tag, 1, "the archive's head"));
  if (tag != kHeadTag)
    return Status(StatusCode::damaged, fmt::format("the archive's head is missing (found byte {})",
                                                   static_cast<int>(static_cast<unsigned char>(tag))));
  SNAPCACHE_RETURN_IF_ERROR(read_exact(nonce_.data(), nonce_.size(), "the archive's head"));
  std::uint8_t kind = 0;
  SNAPCACHE_RETURN_IF_ERROR(read_exact(&kind, 1, "the archive's head"));
  switch (static_cast<SignerKind>(kind)) {
    case SignerKind::none: return Status::ok();
    case SignerKind::ed25519: {
      PublicKey key{};
      SNAPCACHE_RETURN_IF_ERROR(read_exact(key.data(), key.size(), "the archive's signer"));
      signer_ = key;
      return Status::ok();
    }
  }
  return Status(StatusCode::damaged, fmt::format("the archive's head names an unknown kind of signer ({})", kind));
}

Result<std::size_t> Decoder::read_some(void* dst, std::size_t size) {
  ZSTD_outBuffer out{dst, size, 0};
  for (;;) {
    // zstd may hold output from input it already took: ask it before reading more.
    ZSTD_inBuffer in{in_.data(), in_size_, in_pos_};
    const std::size_t r = ZSTD_decompressStream(dctx_of(dctx_), &out, &in);
    if (ZSTD_isError(r)) return zstd_error(r, "the archive's compressed stream is damaged");
    // A call that moved nothing says nothing about the frame (after its end, zstd asks for the
    // next frame's header).
    if (in.pos != in_pos_ || out.pos > 0) frame_open_ = r != 0;
    in_pos_ = in.pos;
    if (out.pos > 0) return out.pos;
    if (in_pos_ < in_size_) continue;
    if (source_ended_) return std::size_t{0};
    auto n = source_(in_.data(), in_.size());
    if (!n) return n.status();
    bytes_in_ += *n;
    in_pos_ = 0;
    in_size_ = *n;
    if (*n == 0) source_ended_ = true;
  }
}

Status Decoder::read_exact(void* dst, std::size_t size, const char* what) {
  auto* p = static_cast<char*>(dst);
  while (size > 0) {
    auto n = read_some(p, size);
    if (!n) return n.status();
    if (*n == 0)
      return Status(StatusCode::damaged, fmt::format("the archive ends early (in {}): it was cut off", what));
    p += *n;
    size -= *n;
  }
  return Status::ok();
}

Result<std::optional<DecodedEntry>> Decoder::next() {
  if (data_pending_) return Status(StatusCode::invalid_argument, "the previous entry's data was not read");
  char tag = 0;
  SNAPCACHE_RETURN_IF_ERROR(read_exact(&tag, 1, "an entry's header"));
  if (tag == kEndTag) {
    std::uint64_t count = 0;
    SNAPCACHE_RETURN_IF_ERROR(read_exact(&count, 8, "the end marker"));
    if (count != entries_)
      return Status(StatusCode::damaged, fmt::format("the archive's end marker counts {} entries; it held {}", count,
                                                     entries_));
    if (signer_) {
      Signature signature{};
      SNAPCACHE_RETURN_IF_ERROR(read_exact(signature.data(), signature.size(), "the signature of the end marker"));
      if (!signature_holds(*signer_, end_statement(nonce_, count), signature))
        return Status(StatusCode::damaged,
                      fmt::format("the archive's end is not signed by its signer {}: it was changed after it was "
                                  "signed (entries dropped from its end, say); the entries before it were each proven",
                                  format::public_key_text(*signer_)));
    }
    current_.reset();
    return std::optional<DecodedEntry>();
  }
  const std::string where = fmt::format("entry {} of the archive", entries_ + 1);
  if (tag != kEntryTag)
    return Status(StatusCode::damaged, fmt::format("{}: expected an entry or the end, found byte {}", where,
                                                   static_cast<int>(static_cast<unsigned char>(tag))));
  DecodedEntry e;
  e.id.resize(kIdBytes);
  SNAPCACHE_RETURN_IF_ERROR(read_exact(e.id.data(), kIdBytes, "an entry's id"));
  if (e.id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return Status(StatusCode::damaged, where + ": its id is not 32 lowercase hex digits");
  std::uint64_t size = 0;
  SNAPCACHE_RETURN_IF_ERROR(read_exact(&size, 8, "an entry's manifest size"));
  if (size > format::kMaxManifestBytes)
    return Status(StatusCode::damaged, fmt::format("{} ({}): its manifest would be {}, more than the {} allowed", where,
                                                   e.id, format_size(size), format_size(format::kMaxManifestBytes)));
  // Read as it arrives: a size that lies runs into the end of the stream, not into an allocation.
  std::string bytes;
  while (bytes.size() < size) {
    const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(size - bytes.size(), 1u << 20));
    const std::size_t old = bytes.size();
    bytes.resize(old + piece);
    SNAPCACHE_RETURN_IF_ERROR(read_exact(bytes.data() + old, piece, "an entry's manifest"));
  }
  auto manifest = format::decode_manifest(bytes);
  if (!manifest)
    return Status(StatusCode::damaged, fmt::format("{} ({}): its manifest is damaged ({}); the rest of the archive "
                                                   "cannot be read",
                                                   where, e.id, manifest.status().message()));
  e.manifest = std::move(*manifest);
  if (signer_) manifest_digest_ = digest_of(bytes);
  current_ = e;
  data_pending_ = true;
  ++entries_;
  return std::optional<DecodedEntry>(std::move(e));
}

Status Decoder::data(const Sink& sink) {
  if (!data_pending_ || !current_) return Status(StatusCode::invalid_argument, "no entry to read data of");
  data_pending_ = false;
  seal_ = Status(StatusCode::damaged, "the entry's data and seal were not read to their end");
  const Manifest& m = current_->manifest;
  // In a signed archive each block's plain bytes land in the digest's batch (the grammar's blocks
  // are the digest's), and the sink reads them there.
  std::optional<DataDigest> digest;
  if (signer_) digest.emplace(util::worker_count());
  block_.resize(kGroupBlockBytes);
  plain_block_.resize(kGroupBlockBytes);
  for (std::uint32_t index : format::storages_in_file_order(m)) {
    const bool grouped = is_grouped_storage(m, index);
    std::uint64_t left = m.storages[index].nbytes;
    while (left > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, kGroupBlockBytes));
      std::byte* plain = digest ? digest->block() : grouped ? plain_block_.data() : block_.data();
      if (grouped) {
        SNAPCACHE_RETURN_IF_ERROR(read_exact(block_.data(), n, "an entry's data"));
        ungroup_bytes(block_.data(), plain, n);
      } else {
        SNAPCACHE_RETURN_IF_ERROR(read_exact(plain, n, "an entry's data"));
      }
      if (digest) digest->end_block(n);
      if (sink) SNAPCACHE_RETURN_IF_ERROR(sink(index, plain, n));
      left -= n;
    }
  }
  seal_ = Status::ok();
  if (!signer_) return Status::ok();
  const std::string& id = current_->id;
  char tag = 0;
  SNAPCACHE_RETURN_IF_ERROR(read_exact(&tag, 1, "an entry's seal"));
  if (tag != kSealTag)
    return Status(StatusCode::damaged, fmt::format("entry {} of the archive ({}) carries no signature, though the "
                                                   "archive is signed by {}",
                                                   entries_, id, format::public_key_text(*signer_)));
  Signature signature{};
  SNAPCACHE_RETURN_IF_ERROR(read_exact(signature.data(), signature.size(), "an entry's seal"));
  if (!signature_holds(*signer_, entry_statement(nonce_, entries_ - 1, id, manifest_digest_, digest->finish()),
                       signature))
    seal_ = Status(StatusCode::damaged,
                   fmt::format("its signature does not hold for the archive's signer {}: the entry (its key, manifest "
                               "or data) or its place in the archive was changed after the archive was signed",
                               format::public_key_text(*signer_)));
  return Status::ok();
}

Status Decoder::close() {
  char extra = 0;
  auto n = read_some(&extra, 1);
  if (!n) return n.status();
  if (*n != 0) return Status(StatusCode::damaged, "bytes follow the archive's end marker");
  if (frame_open_) return Status(StatusCode::damaged, "the archive's compressed stream ends in the middle of a frame");
  return Status::ok();
}

}  // namespace snapcache::archive
