// Archive benchmark: `snapcache export` and `import` throughput and the archive's compression
// ratio on real 16-bit weights, against plain zstd (libzstd, the same level and workers, no byte
// grouping) on the same bytes, side by side in one run; and what signing costs (the same export and
// import of an unsigned archive).
//
//   snapcache_archive_bench --minilm PATH [--demo-mib N] [--level 3] [--threads N] [--dir DIR]
//
// MiniLM (all-MiniLM-L6-v2, fp32 as shipped) is converted to bf16 (round to nearest even), as a
// bf16 deployment holds it; the demo checkpoint (tools/demo's DiT-like model: bf16, fp16, int8 and
// fp8 layers) is written fresh. Each model is published as one entry, one storage per tensor.
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dit_model.h"
#include "snapcache/archive.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "snapcache/safetensors_header.h"
#include "util/fmt.h"
#include "util/parallel.h"

using namespace snapcache;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Model {
  std::string name;
  std::vector<std::vector<std::byte>> storages;
  std::vector<TensorRecord> tensors;
  std::uint64_t bytes = 0;
};

std::uint16_t to_bf16(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

// The tensors of a safetensors file as storages; fp32 ones converted to bf16 when `to_bfloat16`.
Model read_safetensors(const std::string& name, const std::string& path, bool to_bfloat16) {
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < 8) throw std::runtime_error("cannot read " + path);
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), 8);
  const std::string_view header(file.data() + 8, header_size);
  const char* data = file.data() + 8 + header_size;
  auto entries = parse_safetensors_header(header, file.size() - 8 - header_size, nullptr);
  if (!entries) throw std::runtime_error(entries.status().to_string());
  Model m;
  m.name = name;
  for (const auto& e : *entries) {
    std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + e.begin),
                                 reinterpret_cast<const std::byte*>(data + e.end));
    DType dtype = e.dtype;
    if (to_bfloat16 && dtype == DType::float32) {
      std::vector<std::byte> half(bytes.size() / 2);
      for (std::size_t i = 0; i < bytes.size() / 4; ++i) {
        float f = 0;
        std::memcpy(&f, bytes.data() + 4 * i, 4);
        const std::uint16_t h = to_bf16(f);
        std::memcpy(half.data() + 2 * i, &h, 2);
      }
      bytes = std::move(half);
      dtype = DType::bfloat16;
    }
    std::vector<std::int64_t> strides(e.shape.size(), 1);
    for (std::size_t d = e.shape.size(); d-- > 1;) strides[d - 1] = strides[d] * e.shape[d];
    m.tensors.push_back({e.name, dtype, e.shape, strides, static_cast<std::uint32_t>(m.storages.size()), 0});
    m.bytes += bytes.size();
    m.storages.push_back(std::move(bytes));
  }
  return m;
}

struct Row {
  std::string model;
  std::uint64_t bytes = 0;
  std::uint64_t archive = 0, plain = 0;
  double export_s = 0, import_s = 0, zstd_s = 0, unzstd_s = 0;
  double unsigned_export_s = 0, unsigned_import_s = 0;
};

// Exports entry `id` of `source` into memory (signed with `key_file` unless it is empty) and imports
// it into a new cache at `target`; the seconds of each.
std::pair<double, double> export_import(Store& source, const std::string& id, Config target, int level,
                                        std::size_t threads, const std::string& key_file, std::string& archive) {
  archive.clear();
  auto t0 = Clock::now();
  auto exported = export_entries(source, {id}, [&](const void* d, std::size_t n) {
    archive.append(static_cast<const char*>(d), n);
    return Status::ok();
  }, {.level = level, .threads = threads, .signing_key_file = key_file});
  const double export_s = seconds_since(t0);
  if (!exported) throw std::runtime_error(exported.status().to_string());
  auto store = *Store::open(target);
  std::size_t pos = 0;
  t0 = Clock::now();
  ImportSummary imported = import_archive(*store, [&](void* d, std::size_t n) -> Result<std::size_t> {
    const std::size_t k = std::min(n, archive.size() - pos);
    std::memcpy(d, archive.data() + pos, k);
    pos += k;
    return k;
  }, {.trust_unsigned = key_file.empty()});
  const double import_s = seconds_since(t0);
  if (!imported.status || imported.entries.size() != 1 || imported.entries[0].result != ImportResult::imported)
    throw std::runtime_error("import: " + imported.status.to_string());
  return {export_s, import_s};
}

Row measure(const Model& m, const std::string& dir, int level, std::size_t threads) {
  Row row;
  row.model = m.name;
  row.bytes = m.bytes;
  Config config;
  config.directory = dir + "/source";
  config.reserve_free_bytes = 0;
  auto source = *Store::open(config);
  Key key;
  key.component = m.name;
  key.dtype = "bfloat16";
  std::vector<StorageSource> sources;
  for (const auto& s : m.storages) sources.push_back({s.data(), s.size()});
  if (source->publish(key, sources, m.tensors).result != PublishResult::published) throw std::runtime_error("publish");
  const std::string id = key_id(key);

  // Signed, as archives travel: the digest and the signatures are part of what export and import
  // cost; unsigned, for what they add.
  const std::string key_file = dir + "/signing-key";
  auto public_key = make_archive_signing_key(key_file);
  if (!public_key) throw std::runtime_error(public_key.status().to_string());
  std::string archive;
  archive.reserve(m.bytes + (1 << 20));
  Config target = config;
  target.directory = dir + "/unsigned-target";
  std::tie(row.unsigned_export_s, row.unsigned_import_s) =
      export_import(*source, id, target, level, threads, /*key_file=*/"", archive);
  target.directory = dir + "/target";
  target.trusted_archive_keys = {*public_key};
  std::tie(row.export_s, row.import_s) = export_import(*source, id, target, level, threads, key_file, archive);
  row.archive = archive.size();

  // Plain zstd: the same storage bytes, one stream, the same level and workers, no grouping.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, static_cast<int>(threads));
  std::string plain;
  std::vector<char> out(ZSTD_CStreamOutSize());
  auto t0 = Clock::now();
  for (std::size_t i = 0; i <= m.storages.size(); ++i) {
    const bool last = i == m.storages.size();
    ZSTD_inBuffer in{last ? nullptr : m.storages[i].data(), last ? 0 : m.storages[i].size(), 0};
    for (;;) {
      ZSTD_outBuffer o{out.data(), out.size(), 0};
      const std::size_t r = ZSTD_compressStream2(cctx, &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
      plain.append(out.data(), o.pos);
      if (last ? r == 0 : in.pos == in.size) break;
    }
  }
  row.zstd_s = seconds_since(t0);
  ZSTD_freeCCtx(cctx);
  row.plain = plain.size();
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::vector<char> back(1 << 20);
  std::uint64_t total = 0;
  t0 = Clock::now();
  ZSTD_inBuffer in{plain.data(), plain.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{back.data(), back.size(), 0};
    if (ZSTD_isError(ZSTD_decompressStream(dctx, &o, &in))) throw std::runtime_error("zstd");
    total += o.pos;
  }
  row.unzstd_s = seconds_since(t0);
  ZSTD_freeDCtx(dctx);
  if (total != m.bytes) throw std::runtime_error("plain zstd round trip");
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  set_log_level(LogLevel::error);
  std::string minilm, dir = "/tmp/snapcache-archive-bench";
  int level = 3, demo_mib = 256;
  std::size_t threads = util::worker_count();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--minilm") minilm = argv[i + 1];
    else if (a == "--dir") dir = argv[i + 1];
    else if (a == "--level") level = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = static_cast<std::size_t>(std::atoi(argv[i + 1]));
    else if (a == "--demo-mib") demo_mib = std::atoi(argv[i + 1]);
  }
  std::vector<Model> models;
  if (!minilm.empty()) models.push_back(read_safetensors("MiniLM-L6 (bf16)", minilm, true));
  {
    demo::DitConfig config;
    // tools/demo's sizing: hidden grows with the requested size; layers stay 8.
    while (demo::checkpoint_bytes(config) < static_cast<std::uint64_t>(demo_mib) << 20) config.hidden += 256;
    const std::string path = dir + "-demo.safetensors";
    if (Status st = demo::write_checkpoint(config, path); !st) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
    models.push_back(read_safetensors(fmt::format("demo DiT (hidden {}, {} layers)", config.hidden, config.layers), path, false));
    std::remove(path.c_str());
  }
  std::printf("level %d, %zu zstd workers; MB/s of storage bytes (1 MB = 1e6 bytes)\n\n", level, threads);
  std::printf("| model | data | archive ratio | plain zstd ratio | archive / plain | export MB/s | import MB/s | plain zstd compress MB/s | plain zstd decompress MB/s | unsigned export MB/s | unsigned import MB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& m : models) {
    (void)std::system(fmt::format("rm -rf '{}'", dir).c_str());
    Row r = measure(m, dir, level, threads);
    const double mb = static_cast<double>(r.bytes) / 1e6;
    const double ratio = static_cast<double>(r.bytes) / static_cast<double>(r.archive);
    const double plain = static_cast<double>(r.bytes) / static_cast<double>(r.plain);
    std::printf("| %s | %.1f MB | %.3fx | %.3fx | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", r.model.c_str(), mb,
                ratio, plain, ratio / plain, mb / r.export_s, mb / r.import_s, mb / r.zstd_s, mb / r.unzstd_s,
                mb / r.unsigned_export_s, mb / r.unsigned_import_s);
  }
  (void)std::system(fmt::format("rm -rf '{}'", dir).c_str());
  return 0;
}
