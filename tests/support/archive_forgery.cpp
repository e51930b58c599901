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

std::uint64_t u64_at(const std::string& s, std::size_t pos) {
  if (pos + 8 > s.size()) throw std::runtime_error("archive content ends early");
  std::uint64_t v = 0;
  std::memcpy(&v, s.data() + pos, 8);
  return v;
}

}  // namespace

std::string archive_content(const std::string& archive) {
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

std::string repack_archive(const std::string& archive, const std::string& content) {
  std::string out = archive.substr(0, kHeaderBytes);
  std::string frame(ZSTD_compressBound(content.size()), '\0');
  const std::size_t n = ZSTD_compress(frame.data(), frame.size(), content.data(), content.size(), 3);
  if (ZSTD_isError(n)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(n));
  out.append(frame.data(), n);
  return out;
}

std::string rekey_archive(const std::string& archive, const std::function<void(Key&)>& rekey) {
  const std::string content = archive_content(archive);
  std::string out;
  std::size_t pos = 0;
  // A signed archive's head: 'H', nonce (16), signer kind (1), and its public key (32) when signed.
  if (!content.empty() && content[0] == 'H') {
    if (content.size() < 18) throw std::runtime_error("archive head ends early");
    const std::size_t head = 18 + (content[17] == 1 ? 32 : 0);
    out.append(content, 0, head);
    pos = head;
  }
  while (pos < content.size() && content[pos] == 'E') {
    const std::uint64_t manifest_size = u64_at(content, pos + 1 + 32);
    const std::size_t manifest_at = pos + 1 + 32 + 8;
    auto manifest = format::decode_manifest(std::string_view(content).substr(manifest_at, manifest_size));
    if (!manifest) throw std::runtime_error("archive manifest: " + manifest.status().to_string());
    rekey(manifest->key);
    const std::string bytes = format::encode_manifest(*manifest);
    std::uint64_t data = 0;
    for (const auto& s : manifest->storages) data += s.nbytes;
    out += 'E';
    out += key_id(manifest->key);
    const std::uint64_t size = bytes.size();
    out.append(reinterpret_cast<const char*>(&size), 8);
    out += bytes;
    pos = manifest_at + manifest_size;
    out.append(content, pos, data);
    pos += data;
    // A signed entry's seal ('S' and a 64-byte signature) stays as the signer made it.
    if (pos < content.size() && content[pos] == 'S') {
      out.append(content, pos, 65);
      pos += 65;
    }
  }
  out.append(content, pos, std::string::npos);  // the end marker (and its signature)
  return repack_archive(archive, out);
}

}  // namespace snapcache::test
