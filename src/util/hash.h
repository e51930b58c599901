// XXH3 wrappers: snapcache's only hash, for ids, manifests and data chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace snapcache::util {

struct Hash128 {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  bool operator==(const Hash128&) const = default;
  std::string hex() const;  // 32 lowercase hex digits, high word first
};

std::uint64_t xxh3_64(const void* data, std::size_t size);
Hash128 xxh3_128(const void* data, std::size_t size);
inline Hash128 xxh3_128(std::string_view s) { return xxh3_128(s.data(), s.size()); }

// Streaming XXH3-64, for data that arrives in pieces (a chunk that spans storages).
class Hasher64 {
 public:
  Hasher64();
  ~Hasher64();
  Hasher64(const Hasher64&) = delete;
  Hasher64& operator=(const Hasher64&) = delete;
  void update(const void* data, std::size_t size);
  std::uint64_t digest() const;

 private:
  void* state_;
};

// Streaming XXH3-128, for digests of whole files.
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void update(const void* data, std::size_t size);
  Hash128 digest() const;

 private:
  void* state_;
};

}  // namespace snapcache::util
