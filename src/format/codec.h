// Little-endian encoding primitives for the manifest, the stamp and the key. The Reader
// bounds-checks every read and turns a short or malformed buffer into an error, never a crash.
//
// Shared grammar (integers little-endian):
//   str      = len:u32 bytes
//   identity = device:u64 inode:u64 size:u64 mtime_ns:i64 ctime_ns:i64    ; a FileIdentity
//              ; is_directory is not stored
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "snapcache/extend/file_system.h"

namespace snapcache::format {

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void i64(std::int64_t v) { raw(&v, sizeof v); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;  // x86-64 and aarch64 are little-endian; static_assert below guards it
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  std::size_t remaining() const { return in_.size() - pos_; }
  std::size_t position() const { return pos_; }
  // The first thing that went wrong, for the error message.
  const std::string& error() const { return error_; }
  void fail(std::string why) {
    if (ok_) error_ = std::move(why) + " at byte " + std::to_string(pos_);
    ok_ = false;
  }

  std::uint8_t u8() { std::uint8_t v = 0; raw(&v, 1); return v; }
  std::uint32_t u32() { std::uint32_t v = 0; raw(&v, 4); return v; }
  std::uint64_t u64() { std::uint64_t v = 0; raw(&v, 8); return v; }
  std::int64_t i64() { std::int64_t v = 0; raw(&v, 8); return v; }
  std::string str(std::size_t limit = 1u << 20) {
    std::uint32_t n = u32();
    if (!ok_) return {};
    if (n > limit || n > remaining()) {
      fail("string length " + std::to_string(n) + " out of bounds");
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A count of items each at least `min_item_bytes` long: rejects counts the buffer cannot hold,
  // so a damaged count never makes us allocate gigabytes.
  std::uint32_t count(std::size_t min_item_bytes) {
    std::uint32_t n = u32();
    if (ok_ && min_item_bytes > 0 && n > remaining() / min_item_bytes) {
      fail("count " + std::to_string(n) + " exceeds the remaining bytes");
      return 0;
    }
    return ok_ ? n : 0;
  }
  void raw(void* p, std::size_t n) {
    if (!ok_ || n > remaining()) {
      fail("unexpected end of data");
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
};

// A FileIdentity: what identifies a file's bytes without reading them.
inline constexpr std::size_t kIdentityBytes = 5 * 8;
inline void put_identity(Writer& w, const FileIdentity& id) {
  w.u64(id.device);
  w.u64(id.inode);
  w.u64(id.size);
  w.i64(id.mtime_ns);
  w.i64(id.ctime_ns);
}
inline FileIdentity get_identity(Reader& r) {
  FileIdentity id;
  id.device = r.u64();
  id.inode = r.u64();
  id.size = r.u64();
  id.mtime_ns = r.i64();
  id.ctime_ns = r.i64();
  return id;
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "snapcache's format is little-endian");

}  // namespace snapcache::format
