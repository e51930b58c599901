// The corruption harness (issue 10): every region of an entry damaged in turn (each byte of the
// manifest, a byte in each data chunk, each chunk checksum, sizes, the lease and the stamp), and
// the load and `verify` must agree: damage that changes what would be served is refused by both
// before any byte is handed out; damage to what only speeds a load up (the stamp) costs a rehash,
// never a wrong answer. CI flips every 7th manifest byte; SNAPCACHE_CORRUPTION=long flips all.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

using namespace snapcache;
namespace fsys = std::filesystem;

namespace {

std::uint64_t manifest_stride() {
  const char* mode = std::getenv("SNAPCACHE_CORRUPTION");
  return mode != nullptr && std::string(mode) == "long" ? 1 : 7;
}

std::string read_all(const fsys::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fsys::path& p, const std::string& bytes) {
  fsys::permissions(p, fsys::perms::owner_write, fsys::perm_options::add);  // entry files are 0444
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void flip(const fsys::path& p, std::uint64_t at) {
  std::string bytes = read_all(p);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
  write_all(p, bytes);
}

// One published entry, kept pristine; each trial damages a fresh copy of it.
struct Pristine {
  test::TempDir dir;
  test::RawModel model = test::raw_model(81, 1);
  Key key = test::store_key(81);
  std::string id = key_id(key);
  fsys::path copy = fsys::path(dir.path()) / "pristine";
  Pristine() {
    auto store = *Store::open(test::test_config(dir / "cache"));
    PublishOptions options;
    options.chunk_size = 128 * 1024;  // several chunks to damage
    REQUIRE(test::publish_raw(*store, key, model, options).result == PublishResult::published);
    REQUIRE(store->lookup(key, VerifyPolicy::always_rehash).result == LookupResult::hit);  // writes the stamp
    fsys::copy(store->entry_path(id), copy, fsys::copy_options::recursive);
  }
};

enum class Expect { refused, served_intact };

struct Outcome {
  bool load_refused = false;
  bool verify_refused = false;
};

// Puts a damaged copy in a fresh cache and asks a load, then (on another damaged copy) verify.
Outcome try_damage(const Pristine& p, const std::function<void(const fsys::path& entry)>& damage) {
  Outcome out;
  for (int pass = 0; pass < 2; ++pass) {
    test::TempDir dir;
    auto store = *Store::open(test::test_config(dir / "cache"));
    const fsys::path entry = store->entry_path(p.id);
    fsys::copy(p.copy, entry, fsys::copy_options::recursive);
    damage(entry);
    if (pass == 0) {
      LookupOutcome lk = store->lookup(p.key);
      if (lk.result == LookupResult::hit) CHECK(test::same_data(*lk.snapshot, p.model));  // never other bytes
      out.load_refused = lk.result != LookupResult::hit;
    } else {
      out.verify_refused = !verify_entry(*store, p.id).status.is_ok();
    }
  }
  return out;
}

void require(const Outcome& o, Expect expect) {
  CHECK(o.load_refused == o.verify_refused);  // the load and verify agree
  CHECK(o.load_refused == (expect == Expect::refused));
}

}  // namespace

TEST_CASE("every damaged region of an entry is refused by the load and by verify alike", "[store][corruption]") {
  Pristine p;
  const std::string manifest_name = "manifest.snap", data_name = "data-0000.bin", stamp_name = "verified.snap";
  const std::uint64_t manifest_size = fsys::file_size(p.copy / manifest_name);
  const std::uint64_t data_size = fsys::file_size(p.copy / data_name);
  std::uint64_t trials = 0;

  SECTION("each manifest byte") {
    for (std::uint64_t at = 0; at < manifest_size; at += manifest_stride()) {
      INFO("manifest byte " << at << " of " << manifest_size);
      require(try_damage(p, [&](const fsys::path& e) { flip(e / manifest_name, at); }), Expect::refused);
      ++trials;
    }
  }
  SECTION("a byte in each data chunk, and data bytes past the storages") {
    for (std::uint64_t at = 17; at < data_size; at += 128 * 1024) {
      INFO("data byte " << at << " of " << data_size);
      require(try_damage(p, [&](const fsys::path& e) { flip(e / data_name, at); }), Expect::refused);
      ++trials;
    }
    INFO("the last data byte");
    require(try_damage(p, [&](const fsys::path& e) { flip(e / data_name, data_size - 1); }), Expect::refused);
  }
  SECTION("sizes") {
    INFO("data file one byte shorter");
    require(try_damage(p, [&](const fsys::path& e) { fsys::resize_file(e / data_name, data_size - 1); }),
            Expect::refused);
    INFO("data file one byte longer");
    require(try_damage(p, [&](const fsys::path& e) { fsys::resize_file(e / data_name, data_size + 1); }),
            Expect::refused);
    INFO("data file empty");
    require(try_damage(p, [&](const fsys::path& e) { fsys::resize_file(e / data_name, 0); }), Expect::refused);
    INFO("manifest cut in half");
    require(try_damage(p, [&](const fsys::path& e) { fsys::resize_file(e / manifest_name, manifest_size / 2); }),
            Expect::refused);
    INFO("data file missing");
    require(try_damage(p, [&](const fsys::path& e) { fsys::remove(e / data_name); }), Expect::refused);
    trials += 5;
  }
  SECTION("the lease") {
    INFO("lease missing");
    require(try_damage(p, [&](const fsys::path& e) { fsys::remove(e / "lease"); }), Expect::refused);
    INFO("lease a directory");
    require(try_damage(p, [&](const fsys::path& e) {
              fsys::remove(e / "lease");
              fsys::create_directory(e / "lease");
            }),
            Expect::refused);
    trials += 2;
  }
  SECTION("the stamp only speeds a load up: damaged, it costs a rehash and the bytes are served intact") {
    REQUIRE(fsys::exists(p.copy / stamp_name));
    {
      const std::uint64_t stamp_size = fsys::file_size(p.copy / stamp_name);
      for (std::uint64_t at = 0; at < stamp_size; ++at) {
        INFO("stamp byte " << at << " of " << stamp_size);
        require(try_damage(p, [&](const fsys::path& e) { flip(e / stamp_name, at); }), Expect::served_intact);
        ++trials;
      }
      require(try_damage(p, [&](const fsys::path& e) { fsys::resize_file(e / stamp_name, 3); }), Expect::served_intact);
      require(try_damage(p, [&](const fsys::path& e) { fsys::remove(e / stamp_name); }), Expect::served_intact);
      trials += 2;
    }
  }
  WARN(trials << " damaged copies, each tried by a load and by verify");
}
