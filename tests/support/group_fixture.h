// Several ranks of a group load as processes (snapcache_rank_helper), and what each printed: the
// group tests' fixture, on CPU with c10d's TCPStore and on two GPUs with NCCL.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dit_model.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/temp_dir.h"

namespace snapcache::test {

// Text checks that read the same in Catch2 v2 and v3 (whose matchers differ), with the text shown.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
inline bool starts_with(const std::string& text, const std::string& part) { return text.rfind(part, 0) == 0; }
inline bool ends_with(const std::string& text, const std::string& part) {
  return text.size() >= part.size() && text.compare(text.size() - part.size(), part.size(), part) == 0;
}
#define REQUIRE_TEXT(text, how, part) \
  do {                                \
    INFO("text: " << (text));         \
    REQUIRE(how((text), (part)));     \
  } while (false)

// A TCP port nobody listens on now (the kernel's choice).
inline std::string free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return std::to_string(ntohs(addr.sin_port));
}

struct RankResult {
  std::map<std::string, std::string> values;  // "path" -> "hit", ...
  std::vector<std::string> lines;             // every line it printed
  int exit_code = -1;
  double seconds = 0;  // from its start to its exit
  const std::string& operator[](const std::string& key) const {
    static const std::string none;
    auto it = values.find(key);
    return it == values.end() ? none : it->second;
  }
};

// Reads what a helper prints ("key value" lines) until it exits.
inline RankResult collect(ChildProcess& child, std::chrono::steady_clock::time_point started) {
  RankResult result;
  while (child.wait_for_line("")) {
    const std::string& line = child.last_line();
    result.lines.push_back(line);
    const auto space = line.find(' ');
    result.values[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
  }
  result.exit_code = child.wait();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

// The ranks of one group load, started and not yet collected.
struct Started {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<ChildProcess>> children;
  std::vector<RankResult> collect() {
    std::vector<RankResult> results;
    for (auto& child : children) results.push_back(test::collect(*child, at));
    return results;
  }
};

struct GroupFixture {
  int ranks;
  std::vector<std::string> common;  // arguments of every rank ("--transport", "nccl", ...)
  TempDir dir;
  std::string checkpoint = dir / "model.safetensors";
  std::string cache = dir / "cache";
  explicit GroupFixture(int rank_count, std::vector<std::string> common_args = {}, std::uint32_t seed = 1)
      : ranks(rank_count), common(std::move(common_args)) {
    demo::DitConfig full;
    full.hidden = 256;
    full.layers = 2;
    full.heads = 8;
    full.tokens = 8;
    full.seed = seed;
    REQUIRE(demo::write_checkpoint(full, checkpoint).is_ok());
  }

  // Starts one group load on every rank at once on `port`; `extra[r]` are rank r's own arguments.
  Started start(const std::string& port, std::map<int, std::vector<std::string>> extra = {}, int timeout_ms = 60000) {
    Started started;
    for (int r = 0; r < ranks; ++r) {
      std::vector<std::string> args = {"--checkpoint", checkpoint, "--cache", cache, "--rank", std::to_string(r),
                                       "--world", std::to_string(ranks), "--port", port, "--timeout-ms",
                                       std::to_string(timeout_ms)};
      for (const auto& a : common) args.push_back(a);
      for (const auto& a : extra[r]) args.push_back(a);
      started.children.push_back(std::make_unique<ChildProcess>(SNAPCACHE_RANK_HELPER, args));
    }
    return started;
  }

  // Runs one group load on every rank at once, on a port of its own.
  std::vector<RankResult> run(std::map<int, std::vector<std::string>> extra = {}, int timeout_ms = 60000) {
    return start(free_port(), std::move(extra), timeout_ms).collect();
  }

  std::shared_ptr<Store> store() const {
    Config config;
    config.directory = cache;
    config.reserve_free_bytes = 0;
    return *Store::open(config);
  }

  // The entry of tp rank `rank`.
  EntryInfo entry_of(int rank) const {
    auto entries = list_entries(*store());
    REQUIRE(entries.is_ok());
    for (const auto& e : *entries)
      if (e.manifest && e.manifest->key.topology.tp_rank == rank) return e;
    FAIL("no entry for rank " << rank);
    return {};
  }
};

inline void require_all(const std::vector<RankResult>& results, const std::string& key, const std::string& value) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r]["error"] << results[r]["reason"]);
    REQUIRE(results[r].exit_code == 0);
    REQUIRE(results[r][key] == value);
  }
}

inline void require_same_on_every_rank(const std::vector<RankResult>& results, const std::string& key) {
  for (std::size_t r = 1; r < results.size(); ++r) REQUIRE(results[r][key] == results[0][key]);
}

inline std::vector<std::string> fingerprints(const std::vector<RankResult>& results) {
  std::vector<std::string> out;
  for (const auto& r : results) out.push_back(r["fingerprint"]);
  return out;
}

}  // namespace snapcache::test
