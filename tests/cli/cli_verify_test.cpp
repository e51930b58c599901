// snapcache verify: damage found and named, --repair, the progress bar.
#include <map>
#include <set>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"
#include "support/child_process.h"

using namespace snapcache;
using namespace snapcache::test;

namespace {

// Offset in the data file of the storage that holds `tensor`.
std::uint64_t storage_offset_of(Cache& cache, const std::string& id, const std::string& tensor) {
  auto info = entry_info(*cache.store, id);
  REQUIRE(info.is_ok());
  for (const auto& t : info->manifest->tensors)
    if (t.name == tensor) return info->manifest->storages.at(t.storage).offset;
  FAIL("no tensor " << tensor);
  return 0;
}

}  // namespace

TEST_CASE("cli verify finds a corrupted byte and names the tensor in its chunk", "[cli][verify]") {
  Cache cache;
  const std::string good = cache.publish(5, 4);
  const std::string bad = cache.publish(6, 4);
  const std::uint64_t offset = storage_offset_of(cache, bad, "attn.qkv.weight") + 100;
  flip_byte(cache.data_path(bad), offset);
  const std::uint64_t chunk = offset / (1 << 20);

  auto run = run_cli(with_dir(cache, {"verify", "--json"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  auto j = run.json();
  CHECK(j["checked"] == 2);
  CHECK(j["damaged"] == 1);
  CHECK(j["removed"] == 0);
  CHECK(j["bytes_hashed"].get<std::uint64_t>() > 0);
  bool found = false;
  for (const auto& e : j["entries"]) {
    if (e["id"] == good) {
      CHECK(e["status"] == "ok");
      CHECK(e["damaged_chunks"].empty());
      continue;
    }
    found = true;
    CHECK(e["status"] == "damaged");
    CHECK(e["removed"] == false);
    REQUIRE(e["damaged_chunks"].size() == 1);
    const auto& d = e["damaged_chunks"][0];
    CHECK(d["file"] == "data-0000.bin");
    CHECK(d["chunk"] == chunk);
    CHECK(d["offset"] == chunk * (1 << 20));
    auto tensors = d["tensors"].get<std::vector<std::string>>();
    CHECK(std::find(tensors.begin(), tensors.end(), "attn.qkv.weight") != tensors.end());
    CHECK(std::find(tensors.begin(), tensors.end(), "attn.k_view") != tensors.end());  // same storage
  }
  CHECK(found);

  // Verifying alone changes nothing; the text says where and what.
  auto text = run_cli(with_dir(cache, {"verify", bad.substr(0, 10)}));
  INFO(text.out);
  CHECK(text.exit_code == 1);
  CHECK(contains(text.out, "DAMAGED"));
  CHECK(contains(text.out, "chunk " + std::to_string(chunk)));
  CHECK(contains(text.out, "attn.qkv.weight"));
  CHECK(contains(text.out, "--repair"));
  CHECK(path_exists(cache.store->entry_path(bad)));

  auto good_only = run_cli(with_dir(cache, {"verify", good}));
  CHECK(good_only.exit_code == 0);
  CHECK(contains(good_only.out, "ok"));

  auto repair = run_cli(with_dir(cache, {"verify", "--all", "--repair", "--json"}));
  CHECK(repair.exit_code == 1);
  auto r = repair.json();
  CHECK(r["removed"] == 1);
  CHECK_FALSE(path_exists(cache.store->entry_path(bad)));
  CHECK(path_exists(cache.store->entry_path(good)));

  auto again = run_cli(with_dir(cache, {"verify"}));
  INFO(again.out);
  CHECK(again.exit_code == 0);
  CHECK(contains(again.out, "1 entry verified: 0 damaged"));
  CHECK(cache.store->lookup(store_key(6)).result == LookupResult::miss);
  CHECK(cache.store->lookup(store_key(5)).result == LookupResult::hit);
}

TEST_CASE("cli verify reports a missing data file as damage", "[cli][verify]") {
  Cache cache;
  const std::string id = cache.publish(7);
  remove_path(cache.data_path(id));
  auto run = run_cli(with_dir(cache, {"verify", "--json"}));
  CHECK(run.exit_code == 1);
  auto j = run.json();
  REQUIRE(j["entries"].size() == 1);
  CHECK(j["entries"][0]["status"] == "damaged");
  CHECK(contains(j["entries"][0]["reason"].get<std::string>(), "data-0000.bin"));
}

TEST_CASE("cli verify draws a progress bar on a terminal and never into a pipe", "[cli][verify]") {
  Cache cache;
  cache.publish(8, 2);
  auto piped = run_cli(with_dir(cache, {"verify"}));
  CHECK(piped.exit_code == 0);
  CHECK_FALSE(contains(piped.out + piped.err, "\r"));
  CHECK_FALSE(contains(piped.out + piped.err, "\033["));

  auto terminal = run_cli_on_terminal(with_dir(cache, {"verify"}));
  INFO(terminal.out);
  CHECK(terminal.exit_code == 0);
  CHECK(contains(terminal.out, "\033[K"));  // the bar, cleared when done
  CHECK(contains(terminal.out, "/s"));      // with its throughput
  CHECK(contains(terminal.out, "1 entry verified"));

  auto quiet = run_cli_on_terminal(with_dir(cache, {"verify", "--no-progress"}));
  CHECK_FALSE(contains(quiet.out, "\033["));
}

TEST_CASE("cli verify agrees with loads about an entry without its lease file", "[cli][verify]") {
  Cache cache;
  const std::string id = cache.publish(9);
  remove_path(cache.lease_path(id));
  auto run = run_cli(with_dir(cache, {"verify", "--json"}));
  CHECK(run.exit_code == 1);
  CHECK(run.json()["entries"][0]["reason"] == "entry has no lease file");
  CHECK(run_cli(with_dir(cache, {"verify", "--repair"})).exit_code == 1);
  CHECK_FALSE(path_exists(cache.store->entry_path(id)));
}

TEST_CASE("cli verify --repair takes a leased damaged entry out of use at once", "[cli][verify]") {
  Cache cache;
  const std::string id = cache.publish(10, 2);
  ChildProcess holder(kStoreHelper, {"hold", cache.path(), "10"});
  REQUIRE(holder.wait_for_line("holding"));
  flip_byte(cache.data_path(id), 10);
  auto run = run_cli(with_dir(cache, {"verify", "--repair", "--json"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  CHECK(run.json()["removed"] == 1);
  CHECK_FALSE(path_exists(cache.store->entry_path(id)));
  CHECK(count_entries(cache.path() + "/trash") == 1);  // still mapped by the holder
  holder.kill_now();
  auto gc = run_cli(with_dir(cache, {"gc", "--json"}));
  CHECK(gc.exit_code == 0);
  CHECK(gc.json()["removed"].size() == 1);
  CHECK(count_entries(cache.path() + "/trash") == 0);
}

namespace {

// The terminal column at byte `at` of `line`: a character of UTF-8 takes one, whatever its bytes.
std::size_t column(const std::string& line, std::size_t at) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < at && i < line.size(); ++i) n += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
  return n;
}

}  // namespace

TEST_CASE("cli verify lines up its columns when component names differ in width", "[cli][verify]") {
  Cache cache;
  PublishOptions options;
  options.chunk_size = 1 << 20;
  // Names of 3, 12 and 6 characters (the last of 12 bytes: columns count characters).
  const std::vector<std::string> components = {"dit", "text_encoder", "модель"};
  std::map<std::string, std::string> component_of;
  for (std::size_t i = 0; i < components.size(); ++i) {
    auto out = publish_raw(*cache.store, store_key(70 + static_cast<int>(i), components[i]), raw_model(70 + static_cast<int>(i)), options);
    REQUIRE(out.result == PublishResult::published);
    component_of[out.entry_id.substr(0, 12)] = components[i];
  }
  const std::string damaged = cache.publish(73);  // "dit" again, with a damaged chunk
  component_of[damaged.substr(0, 12)] = "dit";
  flip_byte(cache.data_path(damaged), storage_offset_of(cache, damaged, "attn.qkv.weight") + 7);

  auto run = run_cli(with_dir(cache, {"verify"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 1);
  std::set<std::size_t> id_columns, component_columns, size_columns;
  std::size_t results = 0;
  std::size_t start = 0;
  while (start < run.out.size()) {
    const std::size_t end = run.out.find('\n', start);
    const std::string line = run.out.substr(start, end - start);
    start = end + 1;
    if (!line.starts_with("ok ") && !line.starts_with("DAMAGED ")) continue;
    ++results;
    const std::size_t id_at = line.find_first_not_of(' ', line.find(' '));
    const std::string id = line.substr(id_at, 12);
    REQUIRE(component_of.count(id) == 1);
    const std::size_t component_at = line.find(component_of[id], id_at + 12);
    REQUIRE(component_at != std::string::npos);
    id_columns.insert(column(line, id_at));
    component_columns.insert(column(line, component_at));
    const std::size_t size_at = line.find_first_not_of(' ', component_at + component_of[id].size());
    if (size_at != std::string::npos) size_columns.insert(column(line, size_at));  // DAMAGED ends at its component
  }
  CHECK(results == 4);
  CHECK(id_columns.size() == 1);
  CHECK(component_columns.size() == 1);
  CHECK(size_columns.size() == 1);
  // The lines under a damaged entry start under its id.
  CHECK(contains(run.out, "\n" + std::string(*id_columns.begin(), ' ') + "data-0000.bin chunk "));
}
