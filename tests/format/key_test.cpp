#include <algorithm>
#include <functional>
#include <set>

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/store.h"
#include "snapcache/text.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "support/fault_injection.h"

using namespace snapcache;

TEST_CASE("the key encoding round-trips and the id is 32 hex digits", "[key]") {
  Key key = test::store_key(1);
  key.options["quant"] = "fp8";
  key.topology.extra["ep_rank"] = "3";
  auto decoded = decode_key(encode_key(key));
  REQUIRE(decoded.is_ok());
  CHECK(*decoded == key);
  std::string id = key_id(key);
  CHECK(id.size() == 32);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(key_id(*decoded) == id);
}

TEST_CASE("every key field changes the id and is named by the diff", "[key]") {
  const Key base = test::store_key(1);
  std::vector<std::pair<std::string, std::function<void(Key&)>>> changes = {
      {"model-1.safetensorsx]", [](Key& k) { k.checkpoint[0].path += "x"; }},
      {"size", [](Key& k) { k.checkpoint[0].size++; }},
      {"mtime_ns", [](Key& k) { k.checkpoint[0].mtime_ns++; }},
      {"ctime_ns", [](Key& k) { k.checkpoint[0].ctime_ns++; }},
      {"device", [](Key& k) { k.checkpoint[0].device++; }},
      {"inode", [](Key& k) { k.checkpoint[0].inode++; }},
      {"checkpoint[0].keyed_by", [](Key& k) { k.checkpoint[0].content_digest = "ab"; }},
      {"checkpoint.files", [](Key& k) { k.checkpoint.push_back(k.checkpoint[0]); }},
      {"source_identity", [](Key& k) { k.source_identity = "v2"; }},
      {"torch.version", [](Key& k) { k.torch.version = "2.10.0"; }},
      {"torch.cuda_version", [](Key& k) { k.torch.cuda_version = "12.8"; }},
      {"torch.cxx_abi", [](Key& k) { k.torch.cxx_abi = "pre-cxx11"; }},
      {"dtype", [](Key& k) { k.dtype = "float16"; }},
      {"precision_policy", [](Key& k) { k.precision_policy = "fp8"; }},
      {"topology.tp_rank", [](Key& k) { k.topology.tp_rank = 1; }},
      {"topology.tp_size", [](Key& k) { k.topology.tp_size = 2; }},
      {"topology.pp_rank", [](Key& k) { k.topology.pp_rank = 1; }},
      {"topology.pp_size", [](Key& k) { k.topology.pp_size = 4; }},
      {"topology.ep_size", [](Key& k) { k.topology.extra["ep_size"] = "8"; }},
      {"component", [](Key& k) { k.component = "h3_encoder"; }},
      {"options.lora", [](Key& k) { k.options["lora"] = "none"; }},
  };
  std::set<std::string> ids{key_id(base)};
  for (auto& [field, change] : changes) {
    Key k = base;
    change(k);
    INFO(field);
    CHECK(ids.insert(key_id(k)).second);
    auto diffs = diff_keys(k, base);
    REQUIRE(diffs.size() >= 1);
    CHECK(std::any_of(diffs.begin(), diffs.end(), [&](const KeyDifference& d) { return d.field.find(field) != std::string::npos; }));
    // Every field has words a person reads, by its rule in the field table.
    for (const auto& d : diffs) CHECK_FALSE(d.words.empty());
  }
  CHECK(diff_keys(base, base).empty());
  Key other = base;
  other.torch.version = "2.10.0";
  CHECK(describe_differences(diff_keys(base, other)) == "torch 2.10.0 -> " + base.torch.version);
}

TEST_CASE("a key difference is said in words a person reads, not raw values", "[key]") {
  Key entry = test::store_key(1);
  entry.checkpoint.push_back(entry.checkpoint[0]);
  entry.checkpoint[0].path = "/ckpt/model-00001.safetensors";
  entry.checkpoint[1].path = "/ckpt/model-00002.safetensors";
  entry.checkpoint[1].inode++;
  auto words = [&](const Key& wanted) { return describe_differences(diff_keys(wanted, entry), 16); };

  Key modified = entry;
  modified.checkpoint[1].mtime_ns += 180'000'000'000;  // three minutes later
  modified.checkpoint[1].size += 1 << 20;
  CHECK(words(modified) == "checkpoint model-00002.safetensors size " + format_size(entry.checkpoint[1].size) + " -> " +
                               format_size(modified.checkpoint[1].size) +
                               ", checkpoint model-00002.safetensors modified 3m after the version the entry was made from");
  Key sources = entry;
  sources.source_identity = "another digest";
  sources.torch.version = "2.14.0";
  CHECK(words(sources) == "loader source changed, torch " + entry.torch.version + " -> 2.14.0");

  // A shard added and one dropped are named as such, not every file after them as changed.
  Key reshaped = entry;
  reshaped.checkpoint.erase(reshaped.checkpoint.begin());
  reshaped.checkpoint.push_back(entry.checkpoint[1]);
  reshaped.checkpoint.back().path = "/ckpt/model-00003.safetensors";
  CHECK(words(reshaped) == "checkpoint file model-00003.safetensors is new, checkpoint file model-00001.safetensors is "
                           "no longer part of the checkpoint");
  // The same name in another directory: each called by its path.
  Key moved = entry;
  moved.checkpoint[0].path = "/elsewhere/model-00001.safetensors";
  CHECK(words(moved) == "checkpoint file /elsewhere/model-00001.safetensors is new, checkpoint file "
                        "/ckpt/model-00001.safetensors is no longer part of the checkpoint");
  Key reordered = entry;
  std::swap(reordered.checkpoint[0], reordered.checkpoint[1]);
  CHECK(words(reordered) == "checkpoint files listed in another order");

  Key ranked = entry;
  ranked.topology.tp_rank = 1;
  ranked.topology.tp_size = 2;
  ranked.options["adapter"] = "lora";
  CHECK(words(ranked) == "TP rank 0 -> 1, TP size 1 -> 2, option adapter (absent) -> lora");
  // The values stay in the fields, for --json and tools.
  auto diffs = diff_keys(ranked, entry);
  REQUIRE(diffs.size() == 3);
  CHECK(diffs[0].field == "topology.tp_rank");
  CHECK(diffs[0].wanted == "1");
  CHECK(diffs[0].found == "0");
  CHECK(same_checkpoint(modified, entry));
  CHECK_FALSE(same_checkpoint(reshaped, entry));
}

TEST_CASE("keys without content digests keep the ids they had before content keys dropped paths", "[key]") {
  // Computed by snapcache before the change (main at 458c114): entries already in caches still hit.
  CHECK(key_id(test::store_key(1)) == "9c42ce895ffa12938ee1c5a7a69e01f4");
  CHECK(key_identity(test::store_key(1)) == test::store_key(1));
}

TEST_CASE("a file keyed by content is identified by its size and digest alone", "[key]") {
  Key here = test::store_key(1);
  here.checkpoint[0].content_digest = std::string(32, 'a');
  // The same bytes copied elsewhere: another path, device, inode and times.
  Key copy = here;
  copy.checkpoint[0].path = "/other/node/model.safetensors";
  copy.checkpoint[0].device = 77;
  copy.checkpoint[0].inode = 99;
  copy.checkpoint[0].mtime_ns = 5;
  copy.checkpoint[0].ctime_ns = 6;
  CHECK(key_id(copy) == key_id(here));
  CHECK(encode_key(copy) == encode_key(here));
  CHECK(key_identity(copy) == key_identity(here));
  CHECK(diff_keys(copy, here).empty());
  // What is stored is the identity: no path, no stat.
  auto decoded = decode_key(encode_key(here));
  REQUIRE(decoded.is_ok());
  CHECK(decoded->checkpoint[0] == checkpoint_identity(here.checkpoint[0]));
  CHECK(decoded->checkpoint[0].path.empty());
  CHECK(decoded->checkpoint[0].size == here.checkpoint[0].size);
  CHECK(key_id(*decoded) == key_id(here));

  // Other bytes: the diff names the digest (and the size when it differs), never a path.
  Key other = copy;
  other.checkpoint[0].content_digest = std::string(32, 'b');
  CHECK(key_id(other) != key_id(here));
  auto digest = diff_keys(other, here);
  REQUIRE(digest.size() == 1);
  CHECK(digest[0].field == "checkpoint[0].content_digest");
  CHECK(digest[0].wanted == std::string(32, 'b'));
  CHECK(digest[0].found == std::string(32, 'a'));
  CHECK(describe_differences(digest) == "checkpoint file 0 content changed");
  other.checkpoint[0].size++;
  CHECK(describe_differences(diff_keys(other, here)).starts_with("checkpoint file 0 size 1001 B -> 1002 B, "));
  // Keyed by content on one side only: named as such, not as a path difference.
  auto keyed = diff_keys(test::store_key(1), here);
  REQUIRE(keyed.size() == 1);
  CHECK(keyed[0].field == "checkpoint[0].keyed_by");
  CHECK(keyed[0].wanted == "path and stat (/checkpoints/model-1.safetensors)");
  CHECK(describe_differences(keyed) == "checkpoint file 0 keyed by content -> by path and stat");
}

TEST_CASE("a key of an older snapcache, content-keyed with its path, is foreign", "[key]") {
  // The older encoding wrote the stat identity and the digest of a content-keyed file: take a key
  // without a digest and fill in its empty digest string (the file record's last field).
  const Key key = test::store_key(1);
  std::string bytes = encode_key(key);
  const std::size_t digest_at = 7 + 1 + 4 + 4 + 4 + key.checkpoint[0].path.size() + 5 * 8;
  REQUIRE(bytes.substr(digest_at, 4) == std::string(4, '\0'));
  const std::string digest(32, 'c');
  bytes.replace(digest_at, 4, std::string("\x20\0\0\0", 4) + digest);
  auto decoded = decode_key(bytes);
  CHECK(decoded.status().code() == StatusCode::foreign);
  CHECK(decoded.status().message().find("older snapcache") != std::string::npos);
  // The same file without its place decodes.
  Key content = key;
  content.checkpoint[0].content_digest = digest;
  CHECK(decode_key(encode_key(content)).is_ok());
}

TEST_CASE("malformed key bytes are rejected and never crash", "[key]") {
  std::string bytes = encode_key(test::store_key(3));
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) CHECK_FALSE(decode_key(bytes.substr(0, cut)).is_ok());
  CHECK(decode_key("garbage").status().code() == StatusCode::foreign);
}

TEST_CASE("the digest memo hashes changed files only", "[key]") {
  test::TempDir dir;
  test::write_bytes(dir / "a.bin", std::string(100000, 'a'));
  test::write_bytes(dir / "b.bin", std::string(50000, 'b'));
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto files = describe_checkpoint(*fs, {dir / "a.bin", dir / "b.bin"});
  REQUIRE(files.is_ok());
  auto store = *Store::open(test::test_config(dir / "cache"), fs);
  DigestMemo memo = store->digest_memo();
  REQUIRE(memo.fill_digests(*files).is_ok());
  CHECK(memo.bytes_hashed() == 150000);
  const std::string digest_a = (*files)[0].content_digest;
  CHECK(digest_a.size() == 32);

  DigestMemo again = store->digest_memo();
  auto same = describe_checkpoint(*fs, {dir / "a.bin", dir / "b.bin"});
  REQUIRE(again.fill_digests(*same).is_ok());
  CHECK(again.bytes_hashed() == 0);
  CHECK((*same)[0].content_digest == digest_a);

  test::write_bytes(dir / "a.bin", std::string(100000, 'c'));  // new bytes, new mtime/ctime
  auto changed = describe_checkpoint(*fs, {dir / "a.bin", dir / "b.bin"});
  DigestMemo third = store->digest_memo();
  REQUIRE(third.fill_digests(*changed).is_ok());
  CHECK(third.bytes_hashed() == 100000);
  CHECK((*changed)[0].content_digest != digest_a);
  CHECK((*changed)[1].content_digest == (*same)[1].content_digest);
}

TEST_CASE("source digests cover file contents and snapcache's format version", "[key]") {
  test::TempDir dir;
  test::write_bytes(dir / "loader.py", "def load(): pass\n");
  auto fs = posix_file_system();
  auto d1 = digest_source_files(*fs, {dir / "loader.py"});
  REQUIRE(d1.is_ok());
  test::write_bytes(dir / "loader.py", "def load(): return 1\n");
  auto d2 = digest_source_files(*fs, {dir / "loader.py"});
  CHECK(*d1 != *d2);
  CHECK(digest_source_files(*fs, {dir / "missing.py"}).status().code() == StatusCode::not_found);
}
