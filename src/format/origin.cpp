#include "format/origin.h"

#include <cstring>

#include "util/fmt.h"

#include "format/codec.h"
#include "snapcache/manifest.h"
#include "util/hash.h"

namespace snapcache::format {
namespace {

constexpr std::string_view kOriginMagic{"SNAPCACHE-ORIGN\0", 16};
// Enough for a key, far below the record's limit: a longer string is not one this code wrote.
constexpr std::size_t kMaxOriginString = 16u << 10;

Status damaged(std::string why) { return {StatusCode::damaged, "origin record: " + std::move(why)}; }

}  // namespace

std::string encode_origin(const EntryOrigin& origin) {
  Writer w;
  w.raw(kOriginMagic.data(), kOriginMagic.size());
  w.u32(kOriginVersion);
  w.u8(static_cast<std::uint8_t>(origin.kind));
  w.i64(origin.recorded_unix_ns);
  w.str(origin.signer);
  w.str(origin.source);
  w.u64(util::xxh3_64(w.bytes().data(), w.bytes().size()));
  return std::move(w.bytes());
}

Result<EntryOrigin> decode_origin(std::string_view bytes) {
  if (bytes.size() < kOriginMagic.size() + 8 || bytes.substr(0, kOriginMagic.size()) != kOriginMagic)
    return damaged("bad magic");
  std::uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (util::xxh3_64(bytes.data(), bytes.size() - 8) != stored) return damaged("checksum mismatch");
  Reader r(bytes.substr(kOriginMagic.size(), bytes.size() - kOriginMagic.size() - 8));
  const std::uint32_t version = r.u32();
  if (r.ok() && version != kOriginVersion)
    return Status(StatusCode::foreign, fmt::format("origin record: version {} (this snapcache reads {})", version,
                                                   kOriginVersion));
  EntryOrigin origin;
  const std::uint8_t kind = r.u8();
  origin.recorded_unix_ns = r.i64();
  origin.signer = r.str(kMaxOriginString);
  origin.source = r.str(kMaxOriginString);
  if (!r.ok() || r.remaining() != 0) return damaged("malformed");
  switch (static_cast<EntryOriginKind>(kind)) {
    case EntryOriginKind::published:
    case EntryOriginKind::imported_signed:
    case EntryOriginKind::imported_unproven:
    case EntryOriginKind::secondary:
      origin.kind = static_cast<EntryOriginKind>(kind);
      return origin;
    case EntryOriginKind::unrecorded: break;
  }
  return damaged(fmt::format("unknown kind {}", kind));
}

}  // namespace snapcache::format

namespace snapcache {

const char* to_string(EntryOriginKind kind) {
  switch (kind) {
    case EntryOriginKind::unrecorded: return "unrecorded";
    case EntryOriginKind::published: return "published";
    case EntryOriginKind::imported_signed: return "imported_signed";
    case EntryOriginKind::imported_unproven: return "imported_unproven";
    case EntryOriginKind::secondary: return "secondary";
  }
  return "?";
}

std::string describe_origin(const EntryOrigin& origin) {
  switch (origin.kind) {
    case EntryOriginKind::unrecorded:
      return "origin not recorded (made before snapcache recorded where entries come from)";
    case EntryOriginKind::published: return "published in this cache";
    case EntryOriginKind::imported_signed:
      return fmt::format("imported from an archive signed by {}, a trusted key", origin.signer);
    case EntryOriginKind::imported_unproven:
      return origin.signer.empty()
                 ? std::string("imported from an unsigned archive with --trust-unsigned: its authorship is unproven")
                 : fmt::format("imported from an archive signed by {}, a key not trusted here, with --trust-unsigned: "
                               "its authorship is unproven",
                               origin.signer);
    case EntryOriginKind::secondary: return "copied from the secondary store " + origin.source;
  }
  return "?";
}

}  // namespace snapcache
