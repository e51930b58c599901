// snapcache ls and inspect.
#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "snapcache/dtype.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "support/catch.h"
#include "support/child_process.h"

using namespace snapcache;
using namespace snapcache::test;

namespace {
void age_apart() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }
}  // namespace

TEST_CASE("cli ls lists entries most recently used first", "[cli][ls]") {
  Cache cache;
  const std::string a = cache.publish(1);
  age_apart();
  const std::string b = cache.publish(2);
  age_apart();
  REQUIRE(cache.store->lookup(store_key(1)).result == LookupResult::hit);  // a is now the latest

  auto run = run_cli(with_dir(cache, {"ls", "--json"}));
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  REQUIRE(j["entries"].size() == 2);
  CHECK(j["directory"] == cache.path());
  const auto& first = j["entries"][0];
  CHECK(first["id"] == a);
  CHECK(j["entries"][1]["id"] == b);
  CHECK(first["short_id"] == a.substr(0, 12));
  CHECK(first["state"] == "ok");
  CHECK(first["component"] == "dit");
  CHECK(first["checkpoint"][0] == "/checkpoints/model-1.safetensors");
  CHECK(first["topology"]["tp_size"] == 1);
  CHECK(first["dtype"] == "bfloat16");
  CHECK(first["torch_version"] == store_key(1).torch.version);
  CHECK(first["bytes"].get<std::uint64_t>() > (1u << 20) / 2);
  CHECK(first["leased"] == false);
  CHECK(first["lease_holders"].empty());
  CHECK(first["last_use_unix_ns"].get<std::int64_t>() > j["entries"][1]["last_use_unix_ns"].get<std::int64_t>());
  CHECK(first["created_unix_ns"].get<std::int64_t>() > 0);
  CHECK(j["bytes"].get<std::uint64_t>() >= first["bytes"].get<std::uint64_t>());

  auto text = run_cli(with_dir(cache, {"ls"}));
  REQUIRE(text.exit_code == 0);
  INFO(text.out);
  CHECK(contains(text.out, "ID"));
  CHECK(contains(text.out, "LAST USE"));
  CHECK(contains(text.out, "bfloat16"));
  CHECK(contains(text.out, "tp 0/1 pp 0/1"));
  CHECK(contains(text.out, "MiB"));
  CHECK(text.out.find(a.substr(0, 12)) < text.out.find(b.substr(0, 12)));
  CHECK(contains(text.out, "2 entries"));
}

TEST_CASE("cli ls names the processes that hold a lease and unfinished publications", "[cli][ls]") {
  Cache cache;
  const std::string id = cache.publish(3);
  ChildProcess holder(kStoreHelper, {"hold", cache.path(), "3"});
  REQUIRE(holder.wait_for_line("holding"));
  REQUIRE(make_directories(cache.store->fs(), cache.path() + "/tmp/" + id + ".1-0-dead").is_ok());

  auto j = run_cli(with_dir(cache, {"ls", "--json"})).json();
  REQUIRE(j["entries"].size() == 2);
  bool saw_leased = false, saw_unfinished = false;
  for (const auto& e : j["entries"]) {
    if (e["state"] == "unfinished") {
      saw_unfinished = true;
      CHECK(e["component"].is_null());
      continue;
    }
    saw_leased = true;
    CHECK(e["leased"] == true);
    REQUIRE(e["lease_holders"].size() == 1);
    CHECK(e["lease_holders"][0]["pid"] == holder.pid());
    CHECK(e["lease_holders"][0]["name"] != "?");
  }
  CHECK(saw_leased);
  CHECK(saw_unfinished);

  auto text = run_cli(with_dir(cache, {"ls"}));
  INFO(text.out);
  CHECK(contains(text.out, "ok, leased by pid " + std::to_string(holder.pid())));
  CHECK(contains(text.out, "unfinished"));
}

TEST_CASE("cli inspect shows key tensors storages checksums and leases without changing last use",
          "[cli][inspect]") {
  Cache cache;
  const std::string id = cache.publish(4, 2);
  set_age(cache.lease_path(id), 3600);
  const std::string before = tree_snapshot(cache.path());

  auto run = run_cli(with_dir(cache, {"inspect", id.substr(0, 8), "--json"}));
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["id"] == id);
  CHECK(j["key"]["id"] == id);
  CHECK(j["key"]["component"] == "dit");
  CHECK(j["key"]["checkpoint"][0]["path"] == "/checkpoints/model-4.safetensors");
  CHECK(j["key"]["torch"]["version"] == store_key(4).torch.version);
  CHECK(j["key"]["precision_policy"] == "w8a16");
  CHECK(j["creation"]["pid"].get<int>() > 0);
  CHECK(j["verified_unix_ns"].is_null());
  CHECK(j["identity_trusted"] == true);
  CHECK(j["leased"] == false);
  REQUIRE(j["files"].size() == 1);
  CHECK(j["files"][0]["name"] == "data-0000.bin");
  CHECK(j["files"][0]["chunk_size"] == 1 << 20);
  CHECK(j["files"][0]["chunk_hashes"].size() >= 2);
  CHECK(j["files"][0]["chunk_hashes"][0].get<std::string>().size() == 16);
  CHECK_FALSE(j["storages"].empty());
  CHECK_FALSE(j["storages"][0]["chunk_hashes"].empty());

  // Each named tensor must be there: a missing one fails here, it is not skipped.
  auto tensor = [&](const std::string& name) {
    for (const auto& t : j["tensors"])
      if (t["name"] == name) return t;
    FAIL("inspect --json lists no tensor " << name);
    return nlohmann::json();
  };
  // Every tensor that was published is shown, with its dtype, shape and layout.
  const RawModel expected = raw_model(4, 2);
  REQUIRE(j["tensors"].size() == expected.tensors.size());
  std::set<std::string> names;
  for (const auto& t : j["tensors"]) names.insert(t["name"].get<std::string>());
  CHECK(names.size() == expected.tensors.size());
  CHECK(names.count("attn.qkv.weight") == 1);
  for (const TensorRecord& record : expected.tensors) {
    INFO("tensor " << record.name);
    const auto shown = tensor(record.name);
    CHECK(shown["dtype"] == std::string(dtype_name(record.dtype)));
    CHECK(shown["shape"] == nlohmann::json(record.sizes));
    CHECK(shown["strides"] == nlohmann::json(record.strides));
    CHECK(shown["storage_offset"] == record.storage_offset);
  }
  const auto k_view = tensor("attn.k_view");
  CHECK(k_view["dtype"] == "bfloat16");
  CHECK(k_view["shape"] == nlohmann::json::array({256, 256}));
  CHECK(k_view["strides"] == nlohmann::json::array({256, 1}));
  CHECK(k_view["storage_offset"] == 256 * 256);
  CHECK(k_view["bytes"] == 256 * 256 * 2);
  CHECK(tensor("attn.proj.weight_t")["strides"] == nlohmann::json::array({1, 512}));

  auto text = run_cli(with_dir(cache, {"inspect", id, "--all"}));
  REQUIRE(text.exit_code == 0);
  INFO(text.out);
  CHECK(contains(text.out, "attn.qkv.weight"));
  CHECK(contains(text.out, "[768, 256]"));
  CHECK(contains(text.out, "XXH3-64"));
  CHECK(contains(text.out, "source_identity"));
  CHECK(contains(text.out, "leases"));
  CHECK(contains(text.out, "never rehashed since publication"));

  // Inspecting is reading: the entry keeps its place in the LRU order, and nothing else moves.
  CHECK(tree_snapshot(cache.path()) == before);
}

TEST_CASE("cli inspect names the candidates of an ambiguous prefix", "[cli][inspect]") {
  Cache cache;
  // Seventeen ids over sixteen first digits: two must share one.
  std::map<char, std::vector<std::string>> by_digit;
  char shared = 0;
  for (int seed = 10; seed < 27 && !shared; ++seed) {
    std::string id = cache.publish(seed);
    by_digit[id[0]].push_back(id);
    if (by_digit[id[0]].size() == 2) shared = id[0];
  }
  REQUIRE(shared != 0);
  auto run = run_cli(with_dir(cache, {"inspect", std::string(1, shared)}));
  INFO(run.err);
  CHECK(run.exit_code == 3);
  CHECK(contains(run.err, "ambiguous"));
  for (const auto& id : by_digit[shared]) CHECK(contains(run.err, id));

  std::string unused = "0123456789ab";
  while (std::any_of(by_digit.begin(), by_digit.end(), [&](const auto& kv) {
    return std::any_of(kv.second.begin(), kv.second.end(), [&](const std::string& id) { return id.starts_with(unused); });
  }))
    unused[11] = unused[11] == 'f' ? '0' : static_cast<char>(unused[11] + 1);
  auto none = run_cli(with_dir(cache, {"inspect", unused}));
  CHECK(none.exit_code == 3);
  CHECK(contains(none.err, "no entry matches"));
}

namespace {

// A model of `layers` layers, each an attention weight (bf16) and an int8 weight with fp32 scales,
// and an embedding: the names of a real model's layers, which a summary groups.
RawModel layered_model(int layers) {
  RawModel m;
  auto storage = [&](std::size_t bytes) {
    m.storages.emplace_back(bytes, std::byte{7});
    return static_cast<std::uint32_t>(m.storages.size() - 1);
  };
  m.tensors.push_back({"embed.weight", DType::bfloat16, {128, 64}, {64, 1}, storage(128 * 64 * 2), 0});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    m.tensors.push_back({p + "attn.qkv.weight", DType::bfloat16, {192, 64}, {64, 1}, storage(192 * 64 * 2), 0});
    m.tensors.push_back({p + "mlp.up.weight", DType::int8, {256, 64}, {64, 1}, storage(256 * 64), 0});
    m.tensors.push_back({p + "mlp.up.scale", DType::float32, {256, 1}, {1, 1}, storage(256 * 4), 0});
  }
  return m;
}

std::size_t line_count(const std::string& text) { return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')); }

// The line of `text` that holds `part`, or "".
std::string line_with(const std::string& text, const std::string& part) {
  const auto at = text.find(part);
  if (at == std::string::npos) return "";
  const auto begin = text.rfind('\n', at);
  const auto end = text.find('\n', at);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end == std::string::npos ? end : end - begin - 1);
}

}  // namespace

TEST_CASE("cli inspect summarises an entry's tensors, and --chunks and --all list its parts", "[cli][inspect]") {
  Cache cache;
  PublishOptions options;
  options.chunk_size = 1 << 20;
  const RawModel model = layered_model(24);
  auto out = publish_raw(*cache.store, store_key(60), model, options);
  REQUIRE(out.result == PublishResult::published);
  const std::string id = out.entry_id;

  auto summary = run_cli(with_dir(cache, {"inspect", id.substr(0, 12)}));
  INFO(summary.out << summary.err);
  REQUIRE(summary.exit_code == 0);
  // The entry, its state and its key, as before.
  CHECK(contains(summary.out, "entry     " + id));
  CHECK(contains(summary.out, "state     ok"));
  CHECK(contains(summary.out, "source_identity"));
  CHECK(contains(summary.out, "/checkpoints/model-60.safetensors"));
  // The tensors: how many, how big, grouped by dtype and by name with the layer index as "*".
  CHECK(contains(summary.out, "tensors (73, "));
  CHECK(contains(line_with(summary.out, "\n  bfloat16 "), " 25 "));
  CHECK(contains(line_with(summary.out, "\n  int8 "), " 24 "));
  CHECK(contains(line_with(summary.out, "\n  float32 "), " 24 "));
  const std::string qkv = line_with(summary.out, "blocks.*.attn.qkv.weight");
  CHECK(contains(qkv, " 24 "));
  CHECK(contains(qkv, "bfloat16"));
  CHECK(contains(qkv, "[192, 64]"));
  CHECK(contains(qkv, "576.0 KiB"));  // 24 x 192 x 64 x 2 bytes
  CHECK(contains(line_with(summary.out, "blocks.*.mlp.up.scale"), "[256, 1]"));
  CHECK(contains(line_with(summary.out, "embed.weight"), " 1 "));
  // A screenful, not one line per tensor, chunk and storage.
  CHECK_FALSE(contains(summary.out, "blocks.7.attn.qkv.weight"));
  CHECK_FALSE(contains(summary.out, "XXH3-64"));
  CHECK(line_count(summary.out) < 45);
  CHECK(contains(summary.out, "--chunks"));

  auto chunks = run_cli(with_dir(cache, {"inspect", id, "--chunks"}));
  INFO(chunks.out);
  REQUIRE(chunks.exit_code == 0);
  CHECK(contains(chunks.out, "blocks.*.attn.qkv.weight"));
  CHECK(contains(chunks.out, "XXH3-64"));
  CHECK(contains(chunks.out, "data-0000.bin"));
  CHECK_FALSE(contains(chunks.out, "blocks.7.attn.qkv.weight"));

  // --all: everything, each storage and each tensor with its layout.
  auto all = run_cli(with_dir(cache, {"inspect", id, "--all"}));
  INFO(all.out);
  REQUIRE(all.exit_code == 0);
  CHECK(contains(all.out, "XXH3-64"));
  CHECK(contains(all.out, "storages (73)"));
  for (const auto& t : model.tensors) CHECK(contains(all.out, "  " + t.name + " "));
  CHECK(contains(all.out, "STRIDES"));

  // The JSON is whole without a flag.
  auto j = run_cli(with_dir(cache, {"inspect", id, "--json"})).json();
  CHECK(j["tensors"].size() == model.tensors.size());
  CHECK(j["storages"].size() == model.storages.size());
  CHECK_FALSE(j["files"][0]["chunk_hashes"].empty());
}

TEST_CASE("cli ls and verify count a data file that two entries share once", "[cli][ls][shared]") {
  Cache cache;
  cache.publish(1, 2);
  Key upgraded = store_key(1);
  upgraded.torch.version += ".post1";  // the same tensors under another Torch: the same bytes
  cache.publish(upgraded, 1, 2);
  const std::uint64_t measured = total_bytes(*cache.store).value();

  auto run = run_cli(with_dir(cache, {"ls", "--json"}));
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  REQUIRE(j["entries"].size() == 2);
  std::uint64_t sizes = 0;
  for (const auto& e : j["entries"]) {
    CHECK(e["shared_bytes"].get<std::uint64_t>() >= (1u << 20));
    sizes += e["bytes"].get<std::uint64_t>();
  }
  CHECK(j["bytes"].get<std::uint64_t>() == measured);
  CHECK(sizes - measured >= (1u << 20));  // the entries' sizes hold the shared file twice

  auto text = run_cli(with_dir(cache, {"ls"}));
  REQUIRE(text.exit_code == 0);
  INFO(text.out);
  CHECK(contains(text.out, "of the sizes above in files entries share"));

  auto verified = run_cli(with_dir(cache, {"verify", "--json"}));
  INFO(verified.out);
  REQUIRE(verified.exit_code == 0);
  auto v = verified.json();
  REQUIRE(v["entries"].size() == 2);
  const auto& later = v["entries"][1];
  CHECK(later["bytes_hashed"] == 0);
  CHECK(later["bytes_proven_before"] == v["entries"][0]["bytes_hashed"]);
  CHECK(v["bytes_hashed"] == v["entries"][0]["bytes_hashed"]);

  // Both entries are one component's: its space is the cache's, the shared file counted once.
  auto stats = run_cli(with_dir(cache, {"stats", "--json"}));
  INFO(stats.out);
  REQUIRE(stats.exit_code == 0);
  auto components = stats.json()["components"];
  REQUIRE(components.size() == 1);
  CHECK(components[0]["entries"] == 2);
  CHECK(components[0]["bytes"].get<std::uint64_t>() == measured);

  // A dry run frees a shared file with the last of its names it would remove, and no sooner.
  auto one = run_cli(with_dir(cache, {"evict", "--dry-run", "--json", j["entries"][0]["id"].get<std::string>()}));
  INFO(one.out);
  REQUIRE(one.exit_code == 0);
  CHECK(one.json()["bytes_freed"].get<std::uint64_t>() < (1u << 20));
  auto all = run_cli(with_dir(cache, {"evict", "--dry-run", "--json", "--all"}));
  INFO(all.out);
  REQUIRE(all.exit_code == 0);
  CHECK(all.json()["bytes_freed"].get<std::uint64_t>() == measured);
  CHECK(all.json()["bytes_after"] == 0);
}
