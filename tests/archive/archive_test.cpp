// The verifying entry writer (store/entry_stream.h) and the archive codec (src/archive/): round
// trips through real caches, byte grouping, damage in every section, cut-off streams, foreign ids.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/archive_forgery.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/kill_trials.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

#include "archive/archive_codec.h"
#include "archive/archive_format.h"
#include "format/manifest.h"
#include "snapcache/archive.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "store/entry_stream.h"
#include "util/hash.h"

using namespace snapcache;

namespace {

ArchiveSink string_sink(std::string& out) {
  return [&out](const void* data, std::size_t size) {
    out.append(static_cast<const char*>(data), size);
    return Status::ok();
  };
}

ArchiveSource string_source(const std::string& in, std::size_t piece = 1 << 16) {
  auto pos = std::make_shared<std::size_t>(0);
  return [&in, pos, piece](void* data, std::size_t size) -> Result<std::size_t> {
    const std::size_t n = std::min({size, piece, in.size() - *pos});
    std::memcpy(data, in.data() + *pos, n);
    *pos += n;
    return n;
  };
}

struct Exported {
  test::TempDir dir;
  std::shared_ptr<Store> store;
  std::vector<std::string> ids;
  std::string archive;
};

// A cache with `seeds`' raw models published, and an archive of all of them.
void export_models(Exported& e, const std::vector<int>& seeds, std::size_t mib = 1) {
  e.store = *Store::open(test::test_config(e.dir.path()));
  PublishOptions options;
  options.chunk_size = 256 << 10;  // several chunks per model, storages across chunk boundaries
  for (int seed : seeds) {
    REQUIRE(test::publish_raw(*e.store, test::store_key(seed), test::raw_model(seed, mib), options).result ==
            PublishResult::published);
    e.ids.push_back(key_id(test::store_key(seed)));
  }
  auto summary = export_entries(*e.store, e.ids, string_sink(e.archive), {.level = 3, .threads = 2});
  REQUIRE(summary.is_ok());
  REQUIRE(summary->entries.size() == seeds.size());
}

bool nothing_left(const std::string& cache) {
  return test::count_entries(cache + "/entries") == 0 && test::count_entries(cache + "/tmp") == 0;
}

}  // namespace

TEST_CASE("byte grouping puts high bytes first and is undone exactly, odd sizes included", "[archive]") {
  for (std::size_t size : {0u, 1u, 2u, 3u, 7u, 8u, 4095u, 4096u, 1u << 20}) {
    std::vector<std::byte> in(size), grouped(size), back(size);
    for (std::size_t i = 0; i < size; ++i) in[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
    archive::group_bytes(in.data(), grouped.data(), size);
    for (std::size_t i = 0; i < size / 2; ++i) {
      CHECK(grouped[i] == in[2 * i + 1]);             // high bytes of little-endian elements
      CHECK(grouped[size / 2 + i] == in[2 * i]);      // then the low bytes
    }
    if (size % 2) CHECK(grouped[size - 1] == in[size - 1]);
    archive::ungroup_bytes(grouped.data(), back.data(), size);
    CHECK(back == in);
  }
}

TEST_CASE("only storages whose tensors are all bf16 or fp16 are grouped", "[archive]") {
  Manifest m;
  m.storages = {{0, 0, 8}, {0, 4096, 8}, {0, 8192, 8}, {0, 12288, 8}, {0, 16384, 0}};
  m.tensors = {{"a", DType::bfloat16, {4}, {1}, 0, 0}, {"b", DType::float16, {4}, {1}, 1, 0},
               {"c", DType::float16, {4}, {1}, 2, 0},  {"c8", DType::int8, {8}, {1}, 2, 0},
               {"d", DType::float32, {2}, {1}, 3, 0}};
  CHECK(archive::is_grouped_storage(m, 0));
  CHECK(archive::is_grouped_storage(m, 1));
  CHECK_FALSE(archive::is_grouped_storage(m, 2));  // an int8 view shares it
  CHECK_FALSE(archive::is_grouped_storage(m, 3));
  CHECK_FALSE(archive::is_grouped_storage(m, 4));  // no tensors
}

TEST_CASE("an archive round trip imports whole entries that hit and verify", "[archive]") {
  Exported src;
  export_models(src, {1, 2, 3});
  test::TempDir target;
  auto store = *Store::open(test::test_config(target.path()));
  for (std::size_t piece : {std::size_t{1} << 16, std::size_t{4093}}) {  // odd read sizes too
    ImportSummary summary = import_archive(*store, string_source(src.archive, piece));
    INFO(summary.status.to_string());
    REQUIRE(summary.status.is_ok());
    REQUIRE(summary.entries.size() == 3);
    for (const auto& e : summary.entries)
      CHECK(e.result == (piece == (1 << 16) ? ImportResult::imported : ImportResult::already_present));
  }
  for (int seed : {1, 2, 3}) {
    auto hit = store->lookup(test::store_key(seed), VerifyPolicy::trust_identity);
    REQUIRE(hit.result == LookupResult::hit);
    CHECK_FALSE(hit.rehashed);  // the importer recorded the identities it wrote
    CHECK(test::same_data(*hit.snapshot, test::raw_model(seed)));
    CHECK(verify_entry(*store, key_id(test::store_key(seed))).status.is_ok());
  }
}

TEST_CASE("a damaged byte in any section of an archive is refused with a reason and publishes nothing", "[archive]") {
  Exported src;
  export_models(src, {4});
  const std::size_t body = archive::kArchiveHeaderBytes;
  // Damage the decompressed content: decode, flip, re-encode through zstd would need the codec's
  // insides; flipping compressed bytes must be caught too (zstd's checksum or ours).
  std::mt19937 rng(7);
  std::vector<std::size_t> offsets = {0, 5, 17, body, body + 1, body + 40, src.archive.size() / 2,
                                      src.archive.size() - 5, src.archive.size() - 1};
  for (int i = 0; i < 24; ++i) offsets.push_back(body + rng() % (src.archive.size() - body));
  for (std::size_t offset : offsets) {
    std::string bad = src.archive;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x5a);
    test::TempDir target;
    auto store = *Store::open(test::test_config(target.path()));
    ImportSummary summary = import_archive(*store, string_source(bad));
    INFO("offset " << offset << ": " << summary.status.to_string());
    const bool refused_entry = !summary.entries.empty() && summary.entries[0].result == ImportResult::refused;
    CHECK((!summary.status || refused_entry));
    CHECK((refused_entry || !summary.status.message().empty()));
    CHECK(test::count_entries(target.path() + "/tmp") == 0);
    // The entry is refused, or (damage after its last byte: zstd's own checksum, the end marker)
    // whole and proven; never anything between.
    auto found = store->lookup(test::store_key(4), VerifyPolicy::always_rehash);
    CHECK((found.result == LookupResult::hit || found.result == LookupResult::miss));
    if (found.result == LookupResult::hit) {
      CHECK(test::same_data(*found.snapshot, test::raw_model(4)));
      CHECK((!summary.entries.empty() && summary.entries[0].result == ImportResult::imported));
    }
  }
}

TEST_CASE("a chunk whose bytes differ from its checksum is refused naming the entry, storage and chunk", "[archive]") {
  // The writer itself: a stream with one byte changed in each storage in turn.
  Exported src;
  export_models(src, {5});
  auto reader = store::EntryReader::open(src.store->fs(), src.store->entry_path(src.ids[0]), src.ids[0],
                                         store::ReaderLease::shared);
  REQUIRE(reader.is_ok());
  std::string stream;
  REQUIRE(reader->read([&](std::uint32_t, const void* d, std::size_t n) {
    stream.append(static_cast<const char*>(d), n);
    return Status::ok();
  }).is_ok());
  const Manifest manifest = reader->manifest();
  REQUIRE(stream.size() == store::stream_bytes(manifest));
  std::uint64_t start = 0;
  for (std::uint32_t s : format::storages_in_file_order(manifest)) {
    const std::uint64_t n = manifest.storages[s].nbytes;
    if (n == 0) continue;
    std::string bad = stream;
    bad[start + n / 2] = static_cast<char>(bad[start + n / 2] ^ 1);
    start += n;
    test::TempDir target;
    auto store = *Store::open(test::test_config(target.path()));
    auto begun = store::EntryWriter::begin(*store, manifest, src.ids[0]);
    REQUIRE(begun.writer);
    // A damaged last chunk is found when the stream ends: by finish(), not write().
    (void)begun.writer->write(bad.data(), bad.size());
    PublishOutcome out = begun.writer->finish();
    CHECK(out.result == PublishResult::failed);
    CHECK(out.status.code() == StatusCode::damaged);
    const std::string& why = out.status.message();
    INFO(why);
    CHECK(why.starts_with("entry " + src.ids[0].substr(0, 12) + ", storage"));
    CHECK((why.find(" " + std::to_string(s) + ":") != std::string::npos ||
           why.find(" " + std::to_string(s) + ",") != std::string::npos));
    CHECK(why.find("chunk") != std::string::npos);
    CHECK(why.find("failed its checksum") != std::string::npos);
    begun.writer.reset();
    CHECK(nothing_left(target.path()));
  }
}

TEST_CASE("a stream cut off anywhere publishes nothing", "[archive]") {
  Exported src;
  export_models(src, {6, 7});
  std::mt19937 rng(11);
  std::vector<std::size_t> cuts = {0, 3, archive::kArchiveHeaderBytes, archive::kArchiveHeaderBytes + 1,
                                   src.archive.size() - 1};
  for (int i = 0; i < 16; ++i) cuts.push_back(rng() % src.archive.size());
  for (std::size_t cut : cuts) {
    const std::string part = src.archive.substr(0, cut);
    test::TempDir target;
    auto store = *Store::open(test::test_config(target.path()));
    ImportSummary summary = import_archive(*store, string_source(part));
    INFO("cut at " << cut << ": " << summary.status.to_string());
    CHECK_FALSE(summary.status.is_ok());
    // Entries whose every byte came before the cut may stand (each whole); the one cut off never.
    std::size_t imported = 0;
    for (const auto& e : summary.entries) imported += e.result == ImportResult::imported;
    CHECK(test::count_entries(target.path() + "/entries") == imported);
    CHECK(test::count_entries(target.path() + "/tmp") == 0);
    for (int seed : {6, 7}) {
      auto found = store->lookup(test::store_key(seed), VerifyPolicy::always_rehash);
      CHECK((found.result == LookupResult::hit || found.result == LookupResult::miss));
      if (found.result == LookupResult::hit) CHECK(test::same_data(*found.snapshot, test::raw_model(seed)));
    }
  }
  // The writer, given fewer bytes than the entry holds, publishes nothing either.
  auto reader = store::EntryReader::open(src.store->fs(), src.store->entry_path(src.ids[0]), src.ids[0],
                                         store::ReaderLease::shared);
  REQUIRE(reader.is_ok());
  test::TempDir target;
  auto store = *Store::open(test::test_config(target.path()));
  auto begun = store::EntryWriter::begin(*store, reader->manifest(), src.ids[0]);
  REQUIRE(begun.writer);
  std::vector<char> part(1000, 0);
  (void)begun.writer->write(part.data(), part.size());
  PublishOutcome out = begun.writer->finish();
  CHECK(out.result == PublishResult::failed);
  CHECK(out.status.message().find("the stream ended after") != std::string::npos);
  CHECK(nothing_left(target.path()));
}

TEST_CASE("an entry whose key does not hash to its id is refused", "[archive]") {
  Exported src;
  export_models(src, {8});
  auto info = entry_info(*src.store, src.ids[0]);
  REQUIRE(info.is_ok());
  test::TempDir target;
  auto store = *Store::open(test::test_config(target.path()));
  const std::string other = key_id(test::store_key(9));
  auto begun = store::EntryWriter::begin(*store, *info->manifest, other);
  CHECK_FALSE(begun.writer);
  CHECK(begun.outcome.result == PublishResult::failed);
  CHECK(begun.outcome.status.code() == StatusCode::mismatch);
  CHECK(begun.outcome.status.message().find(other) != std::string::npos);
  // In an archive: the id field rewritten. The id sits inside the compressed stream, so build
  // one by hand from the exported archive's decoded content is not needed: the archive's own
  // id check is the writer's, exercised above; here a damaged data file name is refused too.
  Manifest renamed = *info->manifest;
  renamed.files[0].name = "../escape.bin";
  auto escaped = store::EntryWriter::begin(*store, renamed, src.ids[0]);
  CHECK_FALSE(escaped.writer);
  CHECK(escaped.outcome.status.code() == StatusCode::damaged);
  CHECK(nothing_left(target.path()));
}

TEST_CASE("an entry already present, or without room, is not written", "[archive]") {
  Exported src;
  export_models(src, {10});
  auto info = entry_info(*src.store, src.ids[0]);
  REQUIRE(info.is_ok());
  auto present = store::EntryWriter::begin(*src.store, *info->manifest, src.ids[0]);
  CHECK_FALSE(present.writer);
  CHECK(present.outcome.result == PublishResult::already_present);
  test::TempDir target;
  Config tight = test::test_config(target.path());
  tight.capacity_bytes = 4096;
  auto store = *Store::open(tight);
  auto full = store::EntryWriter::begin(*store, *info->manifest, src.ids[0]);
  CHECK_FALSE(full.writer);
  CHECK(full.outcome.result == PublishResult::skipped);
  CHECK(full.outcome.status.code() == StatusCode::no_space);
}

TEST_CASE("an archive declaring a data file far larger than its storages is refused before anything is written "
          "or evicted",
          "[archive][hostile]") {
  // A cache with one unrelated entry, and room for it or for 16 MiB more, not for both.
  test::TempDir target;
  Config config = test::test_config(target.path());
  config.capacity_bytes = (16ull << 20) + (256 << 10);
  auto store = *Store::open(config);
  REQUIRE(test::publish_raw(*store, test::store_key(20), test::raw_model(20)).result == PublishResult::published);

  // The crafted entry: one 4 KiB storage in a 16 MiB data file, every chunk checksum right (the
  // rest is zeros), so that only its size is wrong: all but 4 KiB of the file would be padding.
  constexpr std::uint64_t kChunk = 4ull << 20;
  Manifest m;
  m.key = key_identity(test::store_key(21));
  m.creation = {1, "0.0.0", "crafted", 1};
  DataFile f;
  f.name = "data-0000.bin";
  f.size = 16ull << 20;
  f.chunk_size = kChunk;
  f.identity.size = f.size;
  const std::string storage(4096, 'w');
  std::string chunk(kChunk, '\0');
  chunk.replace(0, storage.size(), storage);
  f.chunk_hashes.push_back(util::xxh3_64(chunk.data(), chunk.size()));
  const std::string zeros(kChunk, '\0');
  while (f.chunk_hashes.size() < f.size / kChunk) f.chunk_hashes.push_back(util::xxh3_64(zeros.data(), zeros.size()));
  m.files.push_back(f);
  m.storages = {{0, 0, storage.size()}};
  m.tensors = {{"w", DType::uint8, {4096}, {1}, 0, 0}};
  std::string archive_bytes;
  {
    auto encoder = archive::Encoder::open(string_sink(archive_bytes), 3, 0);
    REQUIRE(encoder.is_ok());
    const std::string id = key_id(m.key);
    REQUIRE((*encoder)->begin_entry(id, format::encode_manifest(m), m).is_ok());
    REQUIRE((*encoder)->data(storage.data(), storage.size()).is_ok());
    REQUIRE((*encoder)->end_entry().is_ok());
    REQUIRE((*encoder)->finish().is_ok());
  }
  CHECK(archive_bytes.size() < 1024);

  ImportSummary summary = import_archive(*store, string_source(archive_bytes));
  INFO(summary.status.to_string());
  CHECK(summary.status.code() == StatusCode::damaged);
  CHECK(summary.status.message().find("data file 'data-0000.bin' is 16.0 MiB (16777216 bytes) but its storages with "
                                      "their alignment padding fill at most 4096 bytes") != std::string::npos);
  CHECK(summary.entries.empty());  // decided before its entry began: nothing was reserved or written
  CHECK(summary.data_bytes == 0);
  CHECK(test::count_entries(target.path() + "/tmp") == 0);
  CHECK(test::count_entries(target.path() + "/entries") == 1);
  CHECK(store->lookup(test::store_key(20)).result == LookupResult::hit);  // not evicted for it
  CHECK(store->lookup(test::store_key(21)).result == LookupResult::miss);
}

// The campaign's forgery (issue 47, item 10), through the library: rank 1's entry re-keyed as rank
// 0, every checksum still right. Before archives were signed it imported, and rank 0's next
// lookup was a hit with rank 1's weights.
TEST_CASE("an unsigned archive is refused by default, such as rank 1's entry re-keyed as rank 0", "[archive][trust]") {
  test::TempDir source_dir;
  auto source = *Store::open(test::test_config(source_dir.path()));
  Key rank1 = test::store_key(30);
  rank1.topology = {1, 2, 0, 1, {}};
  Key rank0 = rank1;
  rank0.topology.tp_rank = 0;
  REQUIRE(test::publish_raw(*source, rank1, test::raw_model(31)).result == PublishResult::published);
  std::string archive_bytes;
  REQUIRE(export_entries(*source, {key_id(rank1)}, string_sink(archive_bytes)).is_ok());
  const std::string forged = test::rekey_archive(archive_bytes, [](Key& k) { k.topology.tp_rank = 0; });

  test::TempDir target;
  auto store = *Store::open(test::test_config(target.path()));
  ImportSummary summary = import_archive(*store, string_source(forged));
  INFO(summary.status.to_string());
  CHECK(summary.status.code() == StatusCode::permission_denied);
  CHECK(summary.entries.empty());
  CHECK(nothing_left(target.path()));
  CHECK(store->lookup(rank0).result == LookupResult::miss);
}

TEST_CASE("an export skips a busy entry and refuses to carry a damaged one", "[archive]") {
  Exported src;
  export_models(src, {12});
  // Damage a data byte: the export stops with the damage named, before anything of it goes out
  // unproven.
  const std::string data = src.store->entry_path(src.ids[0]) + "/data-0000.bin";
  ::chmod(data.c_str(), 0644);
  test::flip_byte(data, 100);
  std::string out;
  auto summary = export_entries(*src.store, src.ids, string_sink(out));
  REQUIRE_FALSE(summary.is_ok());
  CHECK(summary.status().code() == StatusCode::damaged);
  CHECK(summary.status().message().find("chunk 0") != std::string::npos);
  CHECK(summary.status().message().find(src.ids[0]) != std::string::npos);
}

TEST_CASE("an importer killed at any moment leaves no entry or a whole one, and gc removes its leftovers",
          "[archive][process]") {
  test::TempDir source;
  REQUIRE(test::run_helper(test::kStoreHelper, {"publish", source.path(), "41", "16"}) == 0);
  const std::string archive = source / "archive.snapcache";
  REQUIRE(test::run_helper(test::kStoreHelper, {"export", source.path(), "41", archive}) == 0);
  // The publication kill trials' harness, with an importer as the writer. CI kills 30;
  // SNAPCACHE_KILL_TRIALS=1000 is the long run (docs/reliability.md).
  test::KillTrials trials;
  trials.writer = [&](const std::string& cache) { return std::vector<std::string>{"import", cache, "41", archive}; };
  trials.seed = 41;
  trials.mib = 16;
  trials.rounds = 30;
  trials.rng_seed = 2027;
  const test::KillCounts counts = test::run_kill_trials(trials);
  WARN(counts.whole + counts.none << " importers killed: " << counts.whole << " left a whole entry, " << counts.none
                                  << " none");
}
