// A stored file as read after bit rot under an unchanged identity: one byte reads flipped, through
// read() and map() alike, while the checksums it is checked against stay those of the good bytes.
// The real check (the store's StoredFile::check) then has to find it.
#pragma once

#include <sys/mman.h>

#include <cstring>
#include <memory>

#include "snapcache/extend/stored_file.h"

namespace snapcache::test {

class RottenFile final : public StoredFile {
 public:
  RottenFile(std::shared_ptr<const StoredFile> good, std::uint64_t flipped_byte)
      : good_(std::move(good)), flipped_(flipped_byte) {}

  std::string name() const override { return good_->name(); }
  std::uint64_t size() const override { return good_->size(); }
  std::uint64_t chunk_bytes() const override { return good_->chunk_bytes(); }
  Status check(std::uint64_t begin, std::uint64_t end, const std::byte* bytes) const override {
    return good_->check(begin, end, bytes);
  }
  Status read(std::byte* out, std::uint64_t offset, std::uint64_t bytes) const override {
    Status st = good_->read(out, offset, bytes);
    if (st && flipped_ >= offset && flipped_ < offset + bytes) out[flipped_ - offset] ^= std::byte{1};
    return st;
  }
  // A private anonymous copy of the good mapping, the byte flipped in it.
  Result<MappedRegion> map() const override {
    auto good = good_->map();
    if (!good) return good.status();
    void* copy = ::mmap(nullptr, good->size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) return Status(StatusCode::io_error, "mmap of a rotten file's copy failed");
    std::memcpy(copy, good->data(), good->size());
    static_cast<std::byte*>(copy)[flipped_] ^= std::byte{1};
    return MappedRegion(copy, good->size());
  }

 private:
  std::shared_ptr<const StoredFile> good_;
  std::uint64_t flipped_;
};

}  // namespace snapcache::test
