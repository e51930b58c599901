// The canonical key encoding: Key::fields() walked in order (format/key_codec.h).
#include "format/key_codec.h"

#include "format/codec.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "util/hash.h"

namespace snapcache {
namespace {

using format::kKeyEncodingVersion;
using format::kKeyMagic;

// Writes each field by its type, walking the records' field lists (snapcache/key.h).
struct Encoder {
  format::Writer& w;
  void operator()(const char*, const std::string& s) const { w.str(s); }
  void operator()(const char*, std::uint64_t v) const { w.u64(v); }
  void operator()(const char*, std::int64_t v) const { w.i64(v); }
  void operator()(const char*, int v) const { w.u32(static_cast<std::uint32_t>(v)); }
  void operator()(const char*, const std::map<std::string, std::string>& m) const {
    w.u32(static_cast<std::uint32_t>(m.size()));
    for (const auto& [k, v] : m) {
      w.str(k);
      w.str(v);
    }
  }
  void operator()(const char*, const std::vector<CheckpointFile>& files) const {
    w.u32(static_cast<std::uint32_t>(files.size()));
    for (const auto& file : files) {
      const CheckpointFile identity = checkpoint_identity(file);
      for_each_field(identity, *this);
    }
  }
  template <FieldRecord Record>
  void operator()(const char*, const Record& record) const {
    for_each_field(record, *this);
  }
};

// Reads each field back, in the same walk.
struct Decoder {
  format::Reader& r;
  Status& refused;
  void operator()(const char*, std::string& s) const { s = r.str(); }
  void operator()(const char*, std::uint64_t& v) const { v = r.u64(); }
  void operator()(const char*, std::int64_t& v) const { v = r.i64(); }
  void operator()(const char*, int& v) const { v = static_cast<int>(r.u32()); }
  void operator()(const char*, std::map<std::string, std::string>& m) const {
    const std::uint32_t n = r.count(8);
    for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
      std::string k = r.str();
      m[k] = r.str();
    }
  }
  void operator()(const char*, std::vector<CheckpointFile>& files) const {
    const std::uint32_t n = r.count(60);
    for (std::uint32_t i = 0; i < n && r.ok() && refused.is_ok(); ++i) {
      CheckpointFile f;
      for_each_field(f, *this);
      if (r.ok() && !(checkpoint_identity(f) == f))
        refused = Status(StatusCode::foreign,
                         "key of an older snapcache: its content-keyed checkpoint files carry their paths, so no key "
                         "asks for its id any more");
      files.push_back(std::move(f));
    }
  }
  template <FieldRecord Record>
  void operator()(const char*, Record& record) const {
    for_each_field(record, *this);
  }
};

}  // namespace

std::string encode_key(const Key& key) {
  format::Writer w;
  w.raw(kKeyMagic.data(), kKeyMagic.size());
  w.u8(kKeyEncodingVersion);
  w.u32(kFormatVersion);
  for_each_field(key, Encoder{w});
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
  Status refused;
  for_each_field(key, Decoder{r, refused});
  if (!refused) return refused;
  if (!r.ok()) return Status(StatusCode::damaged, "key: " + r.error());
  if (r.remaining() != 0) return Status(StatusCode::damaged, "key: trailing bytes");
  return key;
}

std::string key_id(const Key& key) { return util::xxh3_128(encode_key(key)).hex(); }

}  // namespace snapcache
