// The canonical key encoding; the grammar is in key_codec.h.
#include "format/key_codec.h"

#include "format/codec.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "util/hash.h"

namespace snapcache {
namespace {

using format::kKeyEncodingVersion;
using format::kKeyMagic;

void put_map(format::Writer& w, const std::map<std::string, std::string>& m) {
  w.u32(static_cast<std::uint32_t>(m.size()));
  for (const auto& [k, v] : m) {
    w.str(k);
    w.str(v);
  }
}

std::map<std::string, std::string> get_map(format::Reader& r) {
  std::map<std::string, std::string> m;
  std::uint32_t n = r.count(8);
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
    std::string k = r.str();
    m[k] = r.str();
  }
  return m;
}

}  // namespace

std::string encode_key(const Key& key) {
  format::Writer w;
  w.raw(kKeyMagic.data(), kKeyMagic.size());
  w.u8(kKeyEncodingVersion);
  w.u32(kFormatVersion);
  w.u32(static_cast<std::uint32_t>(key.checkpoint.size()));
  for (const auto& file : key.checkpoint) {
    const CheckpointFile f = checkpoint_identity(file);
    w.str(f.path);
    w.u64(f.size);
    w.i64(f.mtime_ns);
    w.i64(f.ctime_ns);
    w.u64(f.device);
    w.u64(f.inode);
    w.str(f.content_digest);
  }
  w.str(key.source_identity);
  w.str(key.torch.version);
  w.str(key.torch.cuda_version);
  w.str(key.torch.cxx_abi);
  w.str(key.dtype);
  w.str(key.precision_policy);
  w.u32(static_cast<std::uint32_t>(key.topology.tp_rank));
  w.u32(static_cast<std::uint32_t>(key.topology.tp_size));
  w.u32(static_cast<std::uint32_t>(key.topology.pp_rank));
  w.u32(static_cast<std::uint32_t>(key.topology.pp_size));
  put_map(w, key.topology.extra);
  w.str(key.component);
  put_map(w, key.options);
  return std::move(w.bytes());
}

Result<Key> decode_key(std::string_view bytes) {
  format::Reader r(bytes);
  char magic[7] = {};
  r.raw(magic, sizeof magic);
  if (!r.ok() || std::string_view(magic, sizeof magic) != kKeyMagic)
    return Status(StatusCode::foreign, "not a snapcache key");
  std::uint8_t version = r.u8();
  std::uint32_t format_version = r.u32();
  if (version != kKeyEncodingVersion || format_version != kFormatVersion)
    return Status(StatusCode::foreign, "key encoding " + std::to_string(version) + "/format " +
                                           std::to_string(format_version) + " is not readable by this snapcache");
  Key key;
  std::uint32_t files = r.count(60);
  for (std::uint32_t i = 0; i < files && r.ok(); ++i) {
    CheckpointFile f;
    f.path = r.str();
    f.size = r.u64();
    f.mtime_ns = r.i64();
    f.ctime_ns = r.i64();
    f.device = r.u64();
    f.inode = r.u64();
    f.content_digest = r.str();
    if (r.ok() && !(checkpoint_identity(f) == f))
      return Status(StatusCode::foreign,
                    "key of an older snapcache: its content-keyed checkpoint files carry their paths, so no key asks "
                    "for its id any more");
    key.checkpoint.push_back(std::move(f));
  }
  key.source_identity = r.str();
  key.torch.version = r.str();
  key.torch.cuda_version = r.str();
  key.torch.cxx_abi = r.str();
  key.dtype = r.str();
  key.precision_policy = r.str();
  key.topology.tp_rank = static_cast<int>(r.u32());
  key.topology.tp_size = static_cast<int>(r.u32());
  key.topology.pp_rank = static_cast<int>(r.u32());
  key.topology.pp_size = static_cast<int>(r.u32());
  key.topology.extra = get_map(r);
  key.component = r.str();
  key.options = get_map(r);
  if (!r.ok()) return Status(StatusCode::damaged, "key: " + r.error());
  if (r.remaining() != 0) return Status(StatusCode::damaged, "key: trailing bytes");
  return key;
}

std::string key_id(const Key& key) { return util::xxh3_128(encode_key(key)).hex(); }

}  // namespace snapcache
