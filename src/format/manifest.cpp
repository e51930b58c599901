#include "format/manifest.h"

#include "format/chunk_layout.h"

#include "util/fmt.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "format/codec.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "util/hash.h"

namespace snapcache::format {
namespace {

constexpr std::size_t kHeaderBytes = kManifestHeaderBytes;
constexpr std::size_t kTrailerBytes = 8;

Status damaged(std::string why) { return {StatusCode::damaged, "manifest: " + std::move(why)}; }

}  // namespace

std::string encode_manifest(const Manifest& m) {
  Writer body;
  std::string key = encode_key(m.key);
  body.str(key);
  body.i64(m.creation.created_unix_ns);
  body.str(m.creation.snapcache_version);
  body.str(m.creation.host);
  body.u32(m.creation.pid);
  body.u32(static_cast<std::uint32_t>(m.files.size()));
  for (const auto& f : m.files) {
    body.str(f.name);
    body.u64(f.size);
    body.u64(f.chunk_size);
    body.u32(static_cast<std::uint32_t>(f.chunk_hashes.size()));
    for (std::uint64_t h : f.chunk_hashes) body.u64(h);
    put_identity(body, f.identity);
  }
  body.u32(static_cast<std::uint32_t>(m.storages.size()));
  for (const auto& s : m.storages) {
    body.u32(s.file);
    body.u64(s.offset);
    body.u64(s.nbytes);
  }
  body.u32(static_cast<std::uint32_t>(m.tensors.size()));
  for (const auto& t : m.tensors) {
    body.str(t.name);
    body.u8(static_cast<std::uint8_t>(t.dtype));
    body.u8(static_cast<std::uint8_t>(t.sizes.size()));
    for (auto v : t.sizes) body.i64(v);
    for (auto v : t.strides) body.i64(v);
    body.u32(t.storage);
    body.i64(t.storage_offset);
  }

  Writer out;
  out.raw(kManifestMagic.data(), kManifestMagic.size());
  out.u32(kFormatVersion);
  out.u32(0);
  out.u64(body.bytes().size());
  out.raw(body.bytes().data(), body.bytes().size());
  out.u64(util::xxh3_64(out.bytes().data(), out.bytes().size()));
  return std::move(out.bytes());
}

Result<Manifest> decode_manifest(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes) return damaged("too short");
  if (bytes.substr(0, kManifestMagic.size()) != kManifestMagic)
    return Status(StatusCode::foreign, "not a snapcache manifest (bad magic)");
  Reader header(bytes.substr(kManifestMagic.size(), kHeaderBytes - kManifestMagic.size()));
  std::uint32_t version = header.u32();
  std::uint32_t flags = header.u32();
  std::uint64_t body_size = header.u64();
  if (body_size != bytes.size() - kHeaderBytes - kTrailerBytes)
    return damaged(fmt::format("body size {} does not match file size {}", body_size, bytes.size()));
  std::uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - kTrailerBytes, 8);
  if (util::xxh3_64(bytes.data(), bytes.size() - kTrailerBytes) != stored)
    return damaged("checksum mismatch");
  // Version and flags are checked after the checksum, so damage is reported as damage.
  if (version != kFormatVersion)
    return Status(StatusCode::foreign, fmt::format("manifest format version {} (this snapcache reads {})",
                                                   version, kFormatVersion));
  if (flags != 0) return Status(StatusCode::foreign, fmt::format("unknown manifest flags {:#x}", flags));

  Reader r(bytes.substr(kHeaderBytes, body_size));
  Manifest m;
  std::string key_bytes = r.str(kMaxManifestBytes);
  m.creation.created_unix_ns = r.i64();
  m.creation.snapcache_version = r.str();
  m.creation.host = r.str();
  m.creation.pid = r.u32();
  std::uint32_t nfiles = r.count(4 + 8 + 8 + 4 + kIdentityBytes);
  for (std::uint32_t i = 0; i < nfiles && r.ok(); ++i) {
    DataFile f;
    f.name = r.str(4096);
    f.size = r.u64();
    f.chunk_size = r.u64();
    std::uint32_t nchunks = r.count(8);
    f.chunk_hashes.resize(nchunks);
    for (auto& h : f.chunk_hashes) h = r.u64();
    f.identity = get_identity(r);
    m.files.push_back(std::move(f));
  }
  std::uint32_t nstorages = r.count(20);
  m.storages.resize(nstorages);
  for (auto& s : m.storages) {
    s.file = r.u32();
    s.offset = r.u64();
    s.nbytes = r.u64();
  }
  std::uint32_t ntensors = r.count(4 + 1 + 1 + 4 + 8);
  m.tensors.reserve(ntensors);
  for (std::uint32_t i = 0; i < ntensors && r.ok(); ++i) {
    TensorRecord t;
    t.name = r.str(65536);
    std::uint8_t code = r.u8();
    auto dtype = dtype_from_code(code);
    if (r.ok() && !dtype) return damaged(fmt::format("tensor '{}': unknown dtype code {}", t.name, code));
    t.dtype = dtype.value_or(DType::uint8);
    std::uint8_t ndim = r.u8();
    if (ndim > kMaxDims) return damaged(fmt::format("tensor '{}': {} dimensions", t.name, ndim));
    t.sizes.resize(ndim);
    t.strides.resize(ndim);
    for (auto& v : t.sizes) v = r.i64();
    for (auto& v : t.strides) v = r.i64();
    t.storage = r.u32();
    t.storage_offset = r.i64();
    m.tensors.push_back(std::move(t));
  }
  if (!r.ok()) return damaged(r.error());
  if (r.remaining() != 0) return damaged("trailing bytes in body");
  auto key = decode_key(key_bytes);
  if (!key) return key.status();
  m.key = std::move(*key);
  SNAPCACHE_RETURN_IF_ERROR(validate_layout(m));
  return m;
}

Result<ManifestHead> decode_manifest_head(std::string_view prefix) {
  if (prefix.size() < kManifestHeadBytes || prefix.substr(0, kManifestMagic.size()) != kManifestMagic)
    return Status(StatusCode::foreign, "not a snapcache manifest");
  Reader r(prefix.substr(kManifestMagic.size(), kManifestHeadBytes - kManifestMagic.size()));
  ManifestHead head;
  head.format_version = r.u32();
  head.flags = r.u32();
  head.body_size = r.u64();
  head.key_size = r.u32();
  if (head.format_version != kFormatVersion)
    return Status(StatusCode::foreign, fmt::format("manifest format version {} (this snapcache reads {})",
                                                   head.format_version, kFormatVersion));
  if (head.key_size > head.body_size || head.key_size > kMaxManifestBytes)
    return damaged("key length out of range");
  return head;
}

Result<std::uint64_t> tensor_extent_bytes(const TensorRecord& t) {
  if (t.sizes.size() != t.strides.size())
    return damaged(fmt::format("tensor '{}': {} sizes but {} strides", t.name, t.sizes.size(), t.strides.size()));
  if (t.storage_offset < 0) return damaged(fmt::format("tensor '{}': negative storage offset", t.name));
  std::uint64_t max_index = 0;
  for (std::size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0)
      return damaged(fmt::format("tensor '{}': negative size or stride in dimension {}", t.name, d));
    if (t.sizes[d] == 0) return std::uint64_t{0};
  }
  for (std::size_t d = 0; d < t.sizes.size(); ++d) {
    std::uint64_t term = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(t.sizes[d] - 1),
                               static_cast<std::uint64_t>(t.strides[d]), &term) ||
        __builtin_add_overflow(max_index, term, &max_index))
      return damaged(fmt::format("tensor '{}': extent overflows", t.name));
  }
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
  if (__builtin_add_overflow(max_index, static_cast<std::uint64_t>(t.storage_offset) + 1, &elements) ||
      __builtin_mul_overflow(elements, std::uint64_t{element_size(t.dtype)}, &bytes))
    return damaged(fmt::format("tensor '{}': extent overflows", t.name));
  return bytes;
}

Status validate_layout(const Manifest& m) {
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." || f.name == "..")
      return damaged(fmt::format("data file {} has an unsafe name '{}'", i, f.name));
    if (f.chunk_size == 0) return damaged(fmt::format("data file '{}': zero chunk size", f.name));
    const std::uint64_t expected_chunks = chunk_count(f);
    if (f.chunk_hashes.size() != expected_chunks)
      return damaged(fmt::format("data file '{}': {} chunk hashes for {} chunks", f.name,
                                 f.chunk_hashes.size(), expected_chunks));
    if (f.identity.size != f.size) return damaged(fmt::format("data file '{}': identity size differs", f.name));
  }
  // Storages: inside their file, aligned, not overlapping each other.
  for (std::size_t i = 0; i < m.storages.size(); ++i) {
    const auto& s = m.storages[i];
    if (s.file >= m.files.size()) return damaged(fmt::format("storage {} names missing file {}", i, s.file));
    if (s.offset % kStorageAlignment != 0) return damaged(fmt::format("storage {} is not aligned", i));
    std::uint64_t end = 0;
    if (__builtin_add_overflow(s.offset, s.nbytes, &end) || end > m.files[s.file].size)
      return damaged(fmt::format("storage {} [{}, +{}) lies outside '{}' ({} bytes)", i, s.offset, s.nbytes,
                                 m.files[s.file].name, m.files[s.file].size));
  }
  const std::vector<std::uint32_t> order = storages_in_file_order(m);
  for (std::size_t k = 1; k < order.size(); ++k) {
    const auto& prev = m.storages[order[k - 1]];
    const auto& cur = m.storages[order[k]];
    if (prev.file == cur.file && prev.nbytes > 0 && prev.offset + prev.nbytes > cur.offset)
      return damaged(fmt::format("storages {} and {} overlap", order[k - 1], order[k]));
  }
  // A data file holds its storages and the zeros that align them, nothing more: at most the sum of
  // its storages' sizes, each rounded up to the alignment. Otherwise a manifest of a few hundred
  // bytes could declare a file of any size around one small storage, and an import would write
  // (and evict entries to make room for) every byte of its padding.
  std::vector<std::uint64_t> room(m.files.size(), 0);
  for (const auto& s : m.storages) {
    const std::uint64_t tail = s.nbytes % kStorageAlignment;
    std::uint64_t aligned = 0;
    if (__builtin_add_overflow(s.nbytes, tail == 0 ? 0 : kStorageAlignment - tail, &aligned) ||
        __builtin_add_overflow(room[s.file], aligned, &room[s.file]))
      room[s.file] = std::numeric_limits<std::uint64_t>::max();
  }
  for (std::size_t i = 0; i < m.files.size(); ++i)
    if (m.files[i].size > room[i])
      return damaged(fmt::format("data file '{}' is {} ({} bytes) but its storages with their alignment padding fill "
                                 "at most {} bytes: a data file holds nothing but its storages",
                                 m.files[i].name, format_size(m.files[i].size), m.files[i].size, room[i]));
  std::unordered_set<std::string_view> names;
  for (const auto& t : m.tensors) {
    if (!names.insert(t.name).second) return damaged(fmt::format("tensor name '{}' appears twice", t.name));
    if (t.storage >= m.storages.size())
      return damaged(fmt::format("tensor '{}' names missing storage {}", t.name, t.storage));
    auto extent = tensor_extent_bytes(t);
    if (!extent) return extent.status();
    if (*extent > m.storages[t.storage].nbytes)
      return damaged(fmt::format("tensor '{}' needs {} bytes of storage {} which holds {}", t.name, *extent,
                                 t.storage, m.storages[t.storage].nbytes));
  }
  return Status::ok();
}

std::vector<std::uint32_t> storages_in_file_order(const Manifest& m) {
  std::vector<std::uint32_t> order(m.storages.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const auto& x = m.storages[a];
    const auto& y = m.storages[b];
    return x.file != y.file ? x.file < y.file : x.offset < y.offset;
  });
  return order;
}

std::vector<std::string> tensors_in_range(const Manifest& m, std::uint32_t file, std::uint64_t offset,
                                          std::uint64_t size) {
  std::vector<std::string> names;
  for (const auto& t : m.tensors) {
    const auto& s = m.storages[t.storage];
    if (s.file != file) continue;
    auto extent = tensor_extent_bytes(t);
    if (!extent || *extent == 0) continue;
    std::uint64_t begin = s.offset + static_cast<std::uint64_t>(t.storage_offset) * element_size(t.dtype);
    std::uint64_t end = s.offset + *extent;
    if (begin < offset + size && offset < end) names.push_back(t.name);
  }
  return names;
}

}  // namespace snapcache::format

namespace snapcache {
std::uint64_t Manifest::data_bytes() const {
  std::uint64_t total = 0;
  for (const auto& f : files) total += f.size;
  return total;
}
}  // namespace snapcache
