#include "archive/archive_format.h"

#include "snapcache/manifest.h"
#include "util/parallel.h"

namespace snapcache::archive {

bool is_grouped_storage(const Manifest& manifest, std::uint32_t index) {
  bool any = false;
  for (const auto& t : manifest.tensors) {
    if (t.storage != index) continue;
    if (t.dtype != DType::bfloat16 && t.dtype != DType::float16) return false;
    any = true;
  }
  return any;
}

void group_bytes(const std::byte* in, std::byte* out, std::size_t size) {
  const std::size_t pairs = size / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    out[i] = in[2 * i + 1];
    out[pairs + i] = in[2 * i];
  }
  if (size % 2 != 0) out[size - 1] = in[size - 1];
}

void ungroup_bytes(const std::byte* in, std::byte* out, std::size_t size) {
  const std::size_t pairs = size / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    out[2 * i + 1] = in[i];
    out[2 * i] = in[pairs + i];
  }
  if (size % 2 != 0) out[size - 1] = in[size - 1];
}

namespace {

void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

DataDigest::DataDigest(std::size_t threads)
    : threads_(threads), batch_(std::make_unique_for_overwrite<std::byte[]>(kBatchBlocks * kGroupBlockBytes)) {}

std::byte* DataDigest::block() {
  if (hashed_) {
    sizes_.clear();
    hashed_ = false;
  }
  return batch_.get() + sizes_.size() * kGroupBlockBytes;
}

void DataDigest::end_block(std::size_t size) {
  sizes_.push_back(size);
  if (sizes_.size() == kBatchBlocks) hash_batch();
}

void DataDigest::hash_batch() {
  std::vector<Digest> digests(sizes_.size());
  // Hashing cannot fail, so neither can the loop.
  (void)util::parallel_for(sizes_.size(), threads_, [&](std::size_t i) {
    digests[i] = digest_of(std::string_view(reinterpret_cast<const char*>(batch_.get() + i * kGroupBlockBytes), sizes_[i]));
    return Status::ok();
  });
  for (const Digest& d : digests) outer_.update(d.data(), d.size());
  hashed_ = true;
}

Digest DataDigest::finish() {
  if (!hashed_ && !sizes_.empty()) hash_batch();
  return outer_.finish();
}

std::string entry_statement(const Nonce& nonce, std::uint64_t index, std::string_view id, const Digest& manifest_digest,
                            const Digest& data_digest) {
  std::string out(kEntryStatementContext);
  out.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  put_u64(out, index);
  out.append(id);
  out.append(reinterpret_cast<const char*>(manifest_digest.data()), manifest_digest.size());
  out.append(reinterpret_cast<const char*>(data_digest.data()), data_digest.size());
  return out;
}

std::string end_statement(const Nonce& nonce, std::uint64_t entry_count) {
  std::string out(kEndStatementContext);
  out.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  put_u64(out, entry_count);
  return out;
}

}  // namespace snapcache::archive
