#include "support/archive_forgery.h"

#include <zstd.h>

#include <cstring>
#include <stdexcept>

#include "format/manifest.h"
#include "snapcache/manifest.h"

namespace snapcache::test {
namespace {

// The header: magic (16 bytes) and version (4), as src/archive/archive_format.h has it.
constexpr std::size_t kHeaderBytes = 20;
constexpr std::size_t kIdBytes = 32;
constexpr std::size_t kSealBytes = 1 + 64;  // 'S' and an Ed25519 signature

std::uint64_t u64_at(const std::string& s, std::size_t pos) {
  if (pos + 8 > s.size()) throw std::runtime_error("archive content ends early");
  std::uint64_t v = 0;
  std::memcpy(&v, s.data() + pos, 8);
  return v;
}

std::string decompress(const std::string& archive) {
  if (archive.size() < kHeaderBytes) throw std::runtime_error("not an archive");
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::string out;
  std::string buffer(ZSTD_DStreamOutSize(), '\0');
  ZSTD_inBuffer in{archive.data() + kHeaderBytes, archive.size() - kHeaderBytes, 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
    const std::size_t r = ZSTD_decompressStream(dctx, &o, &in);
    if (ZSTD_isError(r)) {
      ZSTD_freeDCtx(dctx);
      throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(r));
    }
    out.append(buffer.data(), o.pos);
  }
  ZSTD_freeDCtx(dctx);
  return out;
}

// An entry's manifest, decoded, and where its bytes lie in `entry` (its 'E' first).
Manifest entry_manifest(const std::string& entry, std::size_t& manifest_at, std::uint64_t& manifest_size) {
  manifest_size = u64_at(entry, 1 + kIdBytes);
  manifest_at = 1 + kIdBytes + 8;
  auto manifest = format::decode_manifest(std::string_view(entry).substr(manifest_at, manifest_size));
  if (!manifest) throw std::runtime_error("archive manifest: " + manifest.status().to_string());
  return std::move(*manifest);
}

}  // namespace

ArchiveParts split_archive(const std::string& archive) {
  const std::string content = decompress(archive);
  ArchiveParts parts;
  std::size_t pos = 0;
  // The head: 'H', nonce (16), signer kind (1), and its public key (32) when signed.
  if (!content.empty() && content[0] == 'H') {
    if (content.size() < 18) throw std::runtime_error("archive head ends early");
    pos = 18 + (content[17] == 1 ? 32 : 0);
    parts.head = content.substr(0, pos);
  }
  while (pos < content.size() && content[pos] == 'E') {
    const std::size_t start = pos;
    std::size_t manifest_at = 0;
    std::uint64_t manifest_size = 0;
    const Manifest m = entry_manifest(content.substr(pos, 1 + kIdBytes + 8 + u64_at(content, pos + 1 + kIdBytes)),
                                      manifest_at, manifest_size);
    std::uint64_t data = 0;
    for (const auto& s : m.storages) data += s.nbytes;
    pos += manifest_at + manifest_size + data;
    if (pos < content.size() && content[pos] == 'S') pos += kSealBytes;
    if (pos > content.size()) throw std::runtime_error("archive entry ends early");
    parts.entries.push_back(content.substr(start, pos - start));
  }
  parts.end = content.substr(pos);
  return parts;
}

std::string join_archive(const std::string& header, const ArchiveParts& parts) {
  std::string content = parts.head;
  for (const auto& e : parts.entries) content += e;
  content += parts.end;
  std::string out = header.substr(0, kHeaderBytes);
  std::string frame(ZSTD_compressBound(content.size()), '\0');
  const std::size_t n = ZSTD_compress(frame.data(), frame.size(), content.data(), content.size(), 3);
  if (ZSTD_isError(n)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(n));
  out.append(frame.data(), n);
  return out;
}

std::string rekey_archive(const std::string& archive, const std::function<void(Key&)>& rekey) {
  ArchiveParts parts = split_archive(archive);
  for (std::string& entry : parts.entries) {
    std::size_t manifest_at = 0;
    std::uint64_t manifest_size = 0;
    Manifest m = entry_manifest(entry, manifest_at, manifest_size);
    rekey(m.key);
    const std::string bytes = format::encode_manifest(m);
    const std::uint64_t size = bytes.size();
    std::string forged(1, 'E');
    forged += key_id(m.key);
    forged.append(reinterpret_cast<const char*>(&size), 8);
    forged += bytes;
    forged += entry.substr(manifest_at + manifest_size);  // the data, and the seal as the signer made it
    entry = std::move(forged);
  }
  return join_archive(archive, parts);
}

}  // namespace snapcache::test
