#include "archive/archive_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "util/fmt.h"

#include "archive/archive_format.h"
#include "format/manifest.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"

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

Result<std::unique_ptr<Encoder>> Encoder::open(const ArchiveSink& sink, int level, std::size_t threads) {
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
  manifest_ = &manifest;
  order_ = format::storages_in_file_order(manifest);
  next_ = 0;
  return next_storage();
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
    if (!grouped_) {
      SNAPCACHE_RETURN_IF_ERROR(compress(p, n));
      p += n;
      size -= n;
      left_ -= n;
    } else {
      // Blocks start at the storage's start, whatever pieces the bytes come in.
      const std::size_t take = std::min(n, kGroupBlockBytes - block_.size());
      block_.insert(block_.end(), p, p + take);
      p += take;
      size -= take;
      left_ -= take;
      if (block_.size() == kGroupBlockBytes || left_ == 0) SNAPCACHE_RETURN_IF_ERROR(flush_block());
    }
    if (left_ == 0) SNAPCACHE_RETURN_IF_ERROR(next_storage());
  }
  return Status::ok();
}

Status Encoder::end_entry() {
  if (left_ != 0 || next_ != order_.size())
    return Status(StatusCode::invalid_argument, "the entry's storages were not all written");
  manifest_ = nullptr;
  ++entries_;
  return Status::ok();
}

Status Encoder::finish() {
  std::string end(1, kEndTag);
  put_u64(end, entries_);
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
  std::uint32_t version = 0;
  std::memcpy(&version, header + kArchiveMagic.size(), 4);
  if (version != kArchiveVersion)
    return Status(StatusCode::foreign, fmt::format("archive version {}; this snapcache reads version {}", version,
                                                   kArchiveVersion));
  return Status::ok();
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
  current_ = e;
  data_pending_ = true;
  ++entries_;
  return std::optional<DecodedEntry>(std::move(e));
}

Status Decoder::data(const Sink& sink) {
  if (!data_pending_ || !current_) return Status(StatusCode::invalid_argument, "no entry to read data of");
  data_pending_ = false;
  const Manifest& m = current_->manifest;
  block_.resize(kGroupBlockBytes);
  plain_block_.resize(kGroupBlockBytes);
  for (std::uint32_t index : format::storages_in_file_order(m)) {
    const bool grouped = is_grouped_storage(m, index);
    std::uint64_t left = m.storages[index].nbytes;
    while (left > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, kGroupBlockBytes));
      SNAPCACHE_RETURN_IF_ERROR(read_exact(block_.data(), n, "an entry's data"));
      const std::byte* plain = block_.data();
      if (grouped) {
        ungroup_bytes(block_.data(), plain_block_.data(), n);
        plain = plain_block_.data();
      }
      if (sink) SNAPCACHE_RETURN_IF_ERROR(sink(index, plain, n));
      left -= n;
    }
  }
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
