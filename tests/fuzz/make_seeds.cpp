// Seeds for the fuzz targets, from real files: publishes a small entry in a fresh cache, looks it
// up (which writes the stamp), and copies its manifest, stamp, key and an archive of it into one
// corpus directory per target; the safetensors target gets a header as the Python package writes one.
//   make_seeds OUT_DIR
#include <zstd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "snapcache/archive.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"

using namespace snapcache;
namespace fsys = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fsys::path out = argv[1];
  const fsys::path cache = out / "cache";
  fsys::remove_all(cache);
  Config config;
  config.directory = cache.string();
  config.reserve_free_bytes = 0;
  auto store = Store::open(config);
  if (!store) return std::fprintf(stderr, "%s\n", store.status().to_string().c_str()), 1;
  Key key;
  key.checkpoint = {{"/models/dit/model.safetensors", 1234, 1, 2, 3, 4, ""}};
  key.source_identity = "loader-v1";
  key.torch = {"2.11.0+cu130", "13.0", "cxx11"};
  key.dtype = "bfloat16";
  key.component = "dit";
  std::vector<std::uint16_t> weight(64 * 32, 7), bias(32, 1);
  std::vector<StorageSource> storages = {{weight.data(), weight.size() * 2}, {bias.data(), bias.size() * 2}};
  std::vector<TensorRecord> tensors = {{"layer.weight", DType::bfloat16, {64, 32}, {32, 1}, 0, 0},
                                       {"layer.weight_t", DType::bfloat16, {32, 64}, {1, 32}, 0, 0},
                                       {"layer.bias", DType::bfloat16, {32}, {1}, 1, 0}};
  PublishOptions options;
  options.chunk_size = 1024;
  auto published = (*store)->publish(key, storages, tensors, options);
  if (published.result != PublishResult::published)
    return std::fprintf(stderr, "%s\n", published.status.to_string().c_str()), 1;
  if ((*store)->lookup(key, VerifyPolicy::always_rehash).result != LookupResult::hit) return 1;
  const fsys::path entry = (*store)->entry_path(key_id(key));
  for (const auto& [name, file] : {std::pair{"manifest", "manifest.snap"}, std::pair{"stamp", "verified.snap"}}) {
    fsys::create_directories(out / name);
    fsys::copy_file(entry / file, out / name / file, fsys::copy_options::overwrite_existing);
  }
  // An archive of the entry, as `snapcache export` writes it.
  std::string archive;
  auto exported = export_entries(**store, {key_id(key)}, [&](const void* data, std::size_t size) {
    archive.append(static_cast<const char*>(data), size);
    return Status::ok();
  }, {.level = 3, .threads = 0});
  if (!exported) return std::fprintf(stderr, "%s\n", exported.status().to_string().c_str()), 1;
  fsys::create_directories(out / "archive");
  std::ofstream(out / "archive" / "archive.bin", std::ios::binary) << archive;
  // The same archive's content, for the target's 'C' mode (see archive_fuzz.cpp).
  std::string content(archive.size() * 64 + 4096, '\0');
  const std::size_t archive_header = 20;  // magic and version (src/archive/archive_format.h)
  const std::size_t n = ZSTD_decompress(content.data(), content.size(), archive.data() + archive_header, archive.size() - archive_header);
  if (ZSTD_isError(n)) return std::fprintf(stderr, "zstd: %s\n", ZSTD_getErrorName(n)), 1;
  content.resize(n);
  std::ofstream(out / "archive" / "content.bin", std::ios::binary) << 'C' << content;
  fsys::create_directories(out / "key");
  std::ofstream(out / "key" / "key.bin", std::ios::binary) << encode_key(key);
  // A header as the Python package writes one, after the data section's size (8 bytes).
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a.bias":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
      R"("a.weight":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[8,14]},"b":{"dtype":"F32","shape":[0],"data_offsets":[14,14]}})";
  const std::uint64_t data_bytes = 14;
  fsys::create_directories(out / "safetensors");
  std::ofstream seed(out / "safetensors" / "header.bin", std::ios::binary);
  seed.write(reinterpret_cast<const char*>(&data_bytes), 8);
  seed << header;
  return 0;
}
