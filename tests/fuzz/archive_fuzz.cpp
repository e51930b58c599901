// libFuzzer target: the archive decoder (snapcache import reads archives from other machines, a
// pipe, stdin: untrusted input). Every entry's manifest is decoded and its data read and dropped,
// up to a budget of decompressed bytes so that a small, highly compressible input cannot keep one
// run busy for long. An input starting with 'C' is the stream's content itself (entries, end
// marker), wrapped here in the header and a zstd frame: mutations then reach the grammar behind
// zstd instead of mostly breaking zstd's checksums (make_seeds writes one of each).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <zstd.h>

#include <string>
#include <vector>

#include "archive/archive_codec.h"
#include "archive/archive_format.h"

using namespace snapcache;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<char> wrapped;
  if (size > 0 && data[0] == 'C') {
    wrapped.assign(archive::kArchiveMagic.begin(), archive::kArchiveMagic.end());
    const std::uint32_t version = archive::kArchiveVersion;
    wrapped.insert(wrapped.end(), reinterpret_cast<const char*>(&version), reinterpret_cast<const char*>(&version) + 4);
    const std::size_t head = wrapped.size();
    wrapped.resize(head + ZSTD_compressBound(size - 1));
    const std::size_t n = ZSTD_compress(wrapped.data() + head, wrapped.size() - head, data + 1, size - 1, 1);
    if (ZSTD_isError(n)) return 0;
    wrapped.resize(head + n);
    data = reinterpret_cast<const std::uint8_t*>(wrapped.data());
    size = wrapped.size();
  }
  std::size_t pos = 0;
  ArchiveSource source = [&](void* out, std::size_t n) -> Result<std::size_t> {
    const std::size_t k = std::min(n, size - pos);
    if (k > 0) std::memcpy(out, data + pos, k);
    pos += k;
    return k;
  };
  archive::Decoder decoder(source);
  if (!decoder.open()) return 0;
  std::uint64_t budget = 64ull << 20;
  for (;;) {
    auto next = decoder.next();
    if (!next || !next->has_value()) break;
    Status st = decoder.data([&](std::uint32_t storage, const void*, std::size_t n) -> Status {
      if (storage >= (*next)->manifest.storages.size()) __builtin_trap();  // only storages it has
      if (n > budget) return Status(StatusCode::invalid_argument, "budget");
      budget -= n;
      return Status::ok();
    });
    if (!st) break;
  }
  (void)decoder.close();
  return 0;
}
