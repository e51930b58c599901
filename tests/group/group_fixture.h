// Several ranks of a group load as processes (snapcache_rank_helper), and what each printed: the
// group tests' fixture, on CPU with c10d's TCPStore and on two GPUs with NCCL.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
  int exit_code = -1;
  const std::string& operator[](const std::string& key) const {
    static const std::string none;
    auto it = values.find(key);
    return it == values.end() ? none : it->second;
  }
};

struct GroupFixture {
  int ranks;
  std::vector<std::string> common;  // arguments of every rank ("--transport", "nccl", ...)
  TempDir dir;
  std::string checkpoint = dir / "model.safetensors";
  std::string cache = dir / "cache";
  explicit GroupFixture(int rank_count, std::vector<std::string> common_args = {})
      : ranks(rank_count), common(std::move(common_args)) {
    demo::DitConfig full;
    full.hidden = 256;
    full.layers = 2;
    full.heads = 8;
    full.tokens = 8;
    REQUIRE(demo::write_checkpoint(full, checkpoint).is_ok());
  }

  // Runs one group load on every rank at once; `extra[r]` are rank r's own arguments.
  std::vector<RankResult> run(std::map<int, std::vector<std::string>> extra = {}, int timeout_ms = 60000) {
    const std::string port = free_port();
    std::vector<std::unique_ptr<ChildProcess>> children;
    for (int r = 0; r < ranks; ++r) {
      std::vector<std::string> args = {"--checkpoint", checkpoint, "--cache", cache, "--rank", std::to_string(r),
                                       "--world", std::to_string(ranks), "--port", port, "--timeout-ms",
                                       std::to_string(timeout_ms)};
      for (const auto& a : common) args.push_back(a);
      for (const auto& a : extra[r]) args.push_back(a);
      children.push_back(std::make_unique<ChildProcess>(SNAPCACHE_RANK_HELPER, args));
    }
    std::vector<RankResult> results(ranks);
    for (int r = 0; r < ranks; ++r) {
      while (children[r]->wait_for_line("")) {
        const std::string& line = children[r]->last_line();
        const auto space = line.find(' ');
        results[r].values[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
      }
      results[r].exit_code = children[r]->wait();
    }
    return results;
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
