#include "format/stamp.h"

#include <cstring>

#include "format/codec.h"
#include "snapcache/manifest.h"
#include "util/hash.h"

namespace snapcache::format {
namespace {
constexpr std::string_view kStampMagic{"SNAPCACHE-STAMP\0", 16};
}

std::string encode_stamp(const Stamp& stamp) {
  Writer w;
  w.raw(kStampMagic.data(), kStampMagic.size());
  w.u32(kFormatVersion);
  w.i64(stamp.verified_unix_ns);
  w.u32(static_cast<std::uint32_t>(stamp.identities.size()));
  for (const auto& id : stamp.identities) put_identity(w, id);
  w.u64(util::xxh3_64(w.bytes().data(), w.bytes().size()));
  return std::move(w.bytes());
}

Result<Stamp> decode_stamp(std::string_view bytes) {
  if (bytes.size() < kStampMagic.size() + 8 || bytes.substr(0, kStampMagic.size()) != kStampMagic)
    return Status(StatusCode::damaged, "verification stamp: bad magic");
  std::uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (util::xxh3_64(bytes.data(), bytes.size() - 8) != stored)
    return Status(StatusCode::damaged, "verification stamp: checksum mismatch");
  Reader r(bytes.substr(kStampMagic.size(), bytes.size() - kStampMagic.size() - 8));
  if (r.u32() != kFormatVersion) return Status(StatusCode::foreign, "verification stamp: other format version");
  Stamp stamp;
  stamp.verified_unix_ns = r.i64();
  std::uint32_t n = r.count(kIdentityBytes);
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) stamp.identities.push_back(get_identity(r));
  if (!r.ok() || r.remaining() != 0) return Status(StatusCode::damaged, "verification stamp: malformed");
  return stamp;
}

}  // namespace snapcache::format
