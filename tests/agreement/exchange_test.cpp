// The group exchange against what can reach its port (docs/reliability.md, "group exchange"): a
// process that rewrites a rank's answer in the group's c10d store (to "served", or to a message no
// rank sends), two groups started on one
// MASTER_PORT, one rank claimed by two processes, ranks that load different models, and every
// wait bounded by the group's timeout: a rank 0 that never starts, a port whose program accepts
// and never answers, WORLD_SIZEs no group can have. Each case is real processes on loopback.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <thread>

#include "support/group_fixture.h"

namespace snapcache::test {
namespace {

// A group's processes time out after this long in the cases below.
constexpr int kTimeoutMs = 3000;
// What a failure may take past the timeout: a store that does not answer is given up a quarter
// of a second after the deadline; the rest is a loaded machine's scheduling.
constexpr double kBoundMs = 1500;

// One rank of `world` alone: its own arguments, the fixture's checkpoint and cache.
Started one_rank(const GroupFixture& f, int rank, long world, const std::string& port, int timeout_ms,
                 std::vector<std::string> extra = {}) {
  Started started;
  std::vector<std::string> args = {"--checkpoint", f.checkpoint, "--cache", f.cache, "--rank", std::to_string(rank),
                                   "--world", std::to_string(world), "--port", port, "--timeout-ms",
                                   std::to_string(timeout_ms), "--stderr-to-stdout"};
  args.insert(args.end(), extra.begin(), extra.end());
  started.children.push_back(std::make_unique<ChildProcess>(SNAPCACHE_RANK_HELPER, args));
  return started;
}

double group_ms(const RankResult& r) { return r["group_ms"].empty() ? -1 : std::stod(r["group_ms"]); }

// A failure the user reads: the helper printed how long making the group took and one error line;
// its stderr goes to the same pipe and holds nothing but the library's own log of a failed load
// (a warning line and its few lines of stages): no torch log lines, no C++ stack frames.
void require_one_line_failure(const RankResult& r) {
  std::string all;
  for (const auto& line : r.lines) all += line + "\n";
  INFO("output:\n" << all);
  REQUIRE(r.exit_code == 1);
  REQUIRE(all.find("frame #") == std::string::npos);
  REQUIRE(all.find("Exception raised from") == std::string::npos);
  REQUIRE(all.find("[c10d]") == std::string::npos);
  REQUIRE(r.lines.size() < 30);
  std::size_t errors = 0;
  bool in_log = false;
  for (const auto& line : r.lines) {
    if (starts_with(line, "error ")) {
      ++errors;
      in_log = false;
    } else if (starts_with(line, "snapcache[warn] ")) {
      in_log = true;
    } else {
      REQUIRE((starts_with(line, "group_ms ") || (in_log && (line.empty() || starts_with(line, "  ")))));
    }
  }
  REQUIRE(errors == 1);
  REQUIRE(r["error"].size() < 2000);
}

// A TCP listener on loopback that accepts every connection and never writes a byte.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd_, 64) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = std::to_string(ntohs(addr.sin_port));
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) accepted_.push_back(c), ++count_;
      }
    });
  }
  ~SilentListener() {
    stop_ = true;
    thread_.join();
    for (int c : accepted_) ::close(c);
    ::close(fd_);
  }
  const std::string& port() const { return port_; }
  int accepted() const { return count_; }

 private:
  int fd_ = -1;
  std::string port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> count_{0};
  std::vector<int> accepted_;
  std::thread thread_;
};

std::vector<pid_t> pids_of(const Started& s) {
  std::vector<pid_t> out;
  for (const auto& c : s.children) out.push_back(c->pid());
  return out;
}

// "pid 123" in `text`, not the start of "pid 1234".
bool names_pid(const std::string& text, pid_t pid) {
  const std::string word = "pid " + std::to_string(pid);
  for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const std::size_t end = at + word.size();
    if (end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return true;
  }
  return false;
}

// Each rank failed, naming a process of the other group (by its pid).
void require_names_the_other_group(const std::vector<RankResult>& results, const std::vector<pid_t>& other) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    const std::string& error = results[r]["error"];
    INFO("rank " << r << ": " << error);
    REQUIRE(results[r].exit_code == 1);
    REQUIRE(std::any_of(other.begin(), other.end(), [&](pid_t pid) { return names_pid(error, pid); }));
  }
}

}  // namespace

TEST_CASE("group exchange: a forged 'served' for a rank that missed never makes it hand out a hit without weights",
          "[group][exchange]") {
  GroupFixture f(2);
  require_all(f.run(), "path", "miss");
  // Rank 0 has its entry and rank 1 has none: rank 1 misses.
  REQUIRE(remove_entry(*f.store(), f.entry_of(1).id).is_ok());

  const std::string port = free_port();
  // Rank 0 starts its load late, so the forgery lands before any rank reads rank 1's answer.
  Started ranks = f.start(port, {{0, {"--delay-ms", "2500"}}}, 20000);
  ChildProcess forger(SNAPCACHE_RANK_HELPER, {"--forge-rank", "1", "--port", port, "--timeout-ms", "20000"});
  REQUIRE(forger.wait_for_line("forged"));
  REQUIRE(forger.last_line() == "forged missed -> served");  // it landed: read back as written
  REQUIRE(forger.wait() == 0);
  const std::vector<RankResult> results = ranks.collect();

  INFO("rank 0: " << results[0]["error"] << results[0]["path"]);
  INFO("rank 1: " << results[1]["error"] << results[1]["path"] << " tensors " << results[1]["tensors"]);
  REQUIRE(!(results[1]["path"] == "hit" && results[1]["tensors"] == "0"));
  // Rank 1 decides from its own answer, sees its copy was rewritten, and leaves saying so.
  REQUIRE(results[1].exit_code == 1);
  REQUIRE_TEXT(results[1]["error"], contains,
               "rank 1's own message (answer from the snapshot tier) came back changed: another process overwrote it");
  // Rank 0 believed the forgery (every rank served), and learns from rank 1 before handing anything out.
  REQUIRE(results[0].exit_code == 1);
  REQUIRE_TEXT(results[0]["error"], contains, "rank 1 left the group: rank group: rank 1's own message");
  REQUIRE(results[0]["path"].empty());
}

TEST_CASE("group exchange: a malformed message in a rank's key is refused by name on every rank, and nobody waits",
          "[group][exchange]") {
  struct Shape {
    std::string shape;  // rank_helper_main.cpp's malformed()
    int round;          // 0: the first tier's answers; 2: the outcome of a cold load (after two tiers)
    std::string says;   // what the refusal says is wrong
  };
  const Shape c = GENERATE(values<Shape>({
      {"tier-list", 0, "its field 'tier' is an array, where a rank sends a string"},
      {"no-outcome", 0, "it has no field 'outcome', where a rank sends a string"},
      {"nested", 0, "its field 'reason' is an object, where a rank sends a string"},
      {"huge", 0, "bytes, and a rank's message is at most 65536"},
      {"code-text", 0, "its field 'code' is a string, where a rank sends an integer from 0 to 14"},
      {"not-json", 0, "it is not JSON"},
      {"ok-text", 2, "its field 'ok' is a string, where a rank sends true or false"},
  }));
  INFO("shape " << c.shape << " in round " << c.round);
  // Four ranks (the demo model's 8 heads and 256 columns split four ways), so that three read the
  // forgery.
  GroupFixture f(4);
  const std::string port = free_port();
  // Rank 0 comes to the round late (it starts late, or its publication writes slowly), so the
  // forgery of rank 3's message lands before any rank reads the round. A rank that waited for a
  // message would wait the whole timeout: a minute, far longer than the case takes.
  const std::vector<std::string> late =
      c.round == 0 ? std::vector<std::string>{"--delay-ms", "2500"} : std::vector<std::string>{"--write-delay-ms", "2500"};
  Started ranks = f.start(port, {{0, late}}, 60000);
  ChildProcess forger(SNAPCACHE_RANK_HELPER, {"--forge-rank", "3", "--port", port, "--timeout-ms", "60000",
                                              "--forge-round", std::to_string(c.round), "--forge-shape", c.shape});
  REQUIRE(forger.wait_for_line("forged"));
  REQUIRE(forger.last_line() == "forged " + c.shape);  // it landed: read back as written
  REQUIRE(forger.wait() == 0);
  const std::vector<RankResult> results = ranks.collect();

  // Every rank that read it refuses it, naming the rank, the step, what is wrong and who may have
  // written it: never a JSON library's exception.
  for (int r : {0, 1, 2}) {
    const std::string& error = results[r]["error"];
    INFO("rank " << r << ": " << error);
    REQUIRE(results[r].exit_code == 1);
    REQUIRE(results[r]["path"].empty());
    REQUIRE_TEXT(error, contains,
                 c.round == 0 ? "rank group: rank 3's message (answer from the snapshot tier) is malformed: "
                              : "rank group: rank 3's message (outcome of the load) is malformed: ");
    REQUIRE_TEXT(error, contains, c.says);
    REQUIRE_TEXT(error, contains, "another process may have written it");
    REQUIRE_TEXT(error, !contains, "json.exception");
    REQUIRE(error.size() < 2000);
    REQUIRE(results[r].seconds < 45);
  }
  // Rank 3 finds its own message changed, and leaves saying so.
  INFO("rank 3: " << results[3]["error"]);
  REQUIRE(results[3].exit_code == 1);
  REQUIRE_TEXT(results[3]["error"], contains, "rank 3's own message");
  REQUIRE_TEXT(results[3]["error"], contains, "came back changed: another process overwrote it");
  REQUIRE(results[3].seconds < 45);
}

TEST_CASE("group exchange: ranks that load different models are refused, naming both groups", "[group][exchange]") {
  GroupFixture f(2);
  const auto results = f.run({{1, {"--component", "dit-b"}}}, 20000);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << results[r]["error"]);
    REQUIRE(results[r].exit_code == 1);
  }
  REQUIRE_TEXT(results[0]["error"], contains, "rank 1's message belongs to group ");
  REQUIRE_TEXT(results[0]["error"], contains, "(component dit-b, tp 2, pp 1, dtype bfloat16");
  REQUIRE_TEXT(results[0]["error"], contains, "not this group ");
  REQUIRE_TEXT(results[0]["error"], contains, "(component dit, tp 2, pp 1, dtype bfloat16");
  REQUIRE_TEXT(results[1]["error"], contains, "rank 0's message belongs to group ");
  REQUIRE_TEXT(results[1]["error"], contains, "(component dit, tp 2");
}

TEST_CASE("group exchange: one rank claimed by two processes is refused on both, and the group fails naming them",
          "[group][exchange]") {
  GroupFixture f(2);
  const std::string port = free_port();
  // Rank 0 loads late: both claims are in long before any exchange ends.
  Started group = f.start(port, {{0, {"--delay-ms", "2500"}}}, 20000);
  Started second = one_rank(f, 1, 2, port, 20000);
  const auto results = group.collect();
  const auto again = second.collect();
  const pid_t first = group.children[1]->pid();
  const pid_t second_pid = second.children[0]->pid();
  // Whichever came second is refused as it claims; the first at its next exchange; rank 0 by the first.
  for (const RankResult* r : {&results[1], &again[0]}) {
    INFO((*r)["error"]);
    REQUIRE(r->exit_code == 1);
    REQUIRE_TEXT((*r)["error"], contains, "two groups on one MASTER_PORT, or one RANK given to two processes");
    REQUIRE(names_pid((*r)["error"], first));
    REQUIRE(names_pid((*r)["error"], second_pid));
  }
  REQUIRE(results[0].exit_code == 1);
  REQUIRE_TEXT(results[0]["error"], contains, "rank 1 left the group: ");
  REQUIRE_TEXT(results[0]["error"], contains, "also claims rank 1");
}

TEST_CASE("group exchange: two groups started on one MASTER_PORT never mix, and each failure names the other",
          "[group][exchange]") {
  const bool same_model = GENERATE(false, true);
  INFO((same_model ? "the same model" : "different models"));
  GroupFixture a(2);
  GroupFixture b(2, same_model ? std::vector<std::string>{} : std::vector<std::string>{"--component", "dit-b"},
                 same_model ? 1 : 2);
  const std::string port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  // Every rank loads a while after it made its group (as a real load takes seconds): every claim
  // is in before any exchange ends.
  const std::vector<std::string> late = {"--delay-ms", "2500"};
  Started ga = a.start(port, {{0, late}, {1, late}}, 8000);
  Started gb = b.start(port, {{0, late}, {1, late}}, 8000);
  const auto ra = ga.collect();
  const auto rb = gb.collect();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // No rank of either group loads: one rank 0 could not serve the port, the other is told so; each
  // rank 1 is claimed twice.
  require_names_the_other_group(ra, pids_of(gb));
  require_names_the_other_group(rb, pids_of(ga));
  // The rank 0 that lost the port says whose group serves it.
  const RankResult& lost = ra[0]["error"].find("another process serves the store") != std::string::npos ? ra[0] : rb[0];
  REQUIRE_TEXT(lost["error"], contains, "another process serves the store at 127.0.0.1:" + port);
  REQUIRE_TEXT(lost["error"], contains, "the group started by rank 0 (pid ");
  REQUIRE(seconds < 8 + 2.5 + 15);
}

TEST_CASE("group exchange: over torchrun's agent store each attempt is a group of its own", "[group][exchange]") {
  GroupFixture f(2);
  const std::string port = free_port();
  ChildProcess agent(SNAPCACHE_RANK_HELPER, {"--serve-store", "--port", port, "--serve-ms", "120000"});
  REQUIRE(agent.wait_for_line("serving"));
  auto attempt = [&](int n) {
    return f.start(port, {{0, {"--agent-store", "--restart-count", std::to_string(n)}},
                          {1, {"--agent-store", "--restart-count", std::to_string(n)}}},
                   20000)
        .collect();
  };
  require_all(attempt(0), "path", "miss");
  // The same attempt started again on the same agent meets the first one's start and claims.
  const auto again = attempt(0);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << again[r]["error"]);
    REQUIRE(again[r].exit_code == 1);
    REQUIRE_TEXT(again[r]["error"], contains, "two groups on one MASTER_PORT, or one RANK given to two processes");
  }
  REQUIRE_TEXT(again[0]["error"], contains, "already holds this store; this rank 0 (pid ");
  // The agent's next attempt has keys of its own.
  require_all(attempt(1), "path", "hit");
}

TEST_CASE("group exchange: a rank whose rank 0 never starts fails after the timeout, in one line",
          "[group][exchange]") {
  GroupFixture f(2);
  const RankResult r = one_rank(f, 1, 2, free_port(), kTimeoutMs).collect()[0];
  require_one_line_failure(r);
  INFO(r["error"]);
  REQUIRE(group_ms(r) >= kTimeoutMs - 100);
  REQUIRE(group_ms(r) < kTimeoutMs + kBoundMs);
  REQUIRE_TEXT(r["error"], contains, "could not reach the group's store at 127.0.0.1:");
  REQUIRE_TEXT(r["error"], contains, "within 3000 ms");
  REQUIRE_TEXT(r["error"], ends_with, "nothing accepted a connection (Connection refused)");
  REQUIRE_TEXT(r["error"], contains, "rank 0 serves it, and may not have started");
}

TEST_CASE("group exchange: a port whose program accepts and never answers fails after the timeout, in one line",
          "[group][exchange]") {
  GroupFixture f(2);
  SilentListener listener;
  const int rank = GENERATE(1, 0);  // a client of the store, and a rank 0 that finds its port taken
  INFO("rank " << rank);
  const RankResult r = one_rank(f, rank, 2, listener.port(), kTimeoutMs).collect()[0];
  REQUIRE(listener.accepted() >= 1);  // torch's connection was accepted, and never answered
  require_one_line_failure(r);
  INFO(r["error"]);
  REQUIRE(group_ms(r) < kTimeoutMs + kBoundMs);
  REQUIRE_TEXT(r["error"], contains, "accepted a connection but did not answer as a c10d store");
  REQUIRE_TEXT(r["error"], contains, rank == 0 ? "is taken by another program" : "within 3000 ms");
}

TEST_CASE("group exchange: a WORLD_SIZE of ten million is refused at once with the reason", "[group][exchange]") {
  GroupFixture f(2);
  const RankResult r = one_rank(f, 0, 10000000, free_port(), kTimeoutMs).collect()[0];
  require_one_line_failure(r);
  REQUIRE(group_ms(r) < 1000);
  REQUIRE_TEXT(r["error"], contains, "WORLD_SIZE=10000000 is more ranks than a group can have: at most 1048576");
}

TEST_CASE("group exchange: a WORLD_SIZE of a million fails after the timeout with the missing ranks summarised",
          "[group][exchange]") {
  GroupFixture f(2);
  const std::string port = free_port();
  Started rank0 = one_rank(f, 0, 1000000, port, kTimeoutMs);
  Started rank1 = one_rank(f, 1, 1000000, port, kTimeoutMs);
  for (const RankResult& r : {rank0.collect()[0], rank1.collect()[0]}) {
    require_one_line_failure(r);
    INFO(r["error"]);
    REQUIRE_TEXT(r["error"], contains, "ranks 2-999999 did not answer within 3000 ms");
    // The exchange's time, from the library's log of the failed load: "(3260.9 ms agreeing)".
    double agreeing_ms = -1;
    for (const auto& line : r.lines)
      if (const auto at = line.find(" ms agreeing)"); at != std::string::npos)
        agreeing_ms = std::stod(line.substr(line.rfind('(', at) + 1));
    REQUIRE(agreeing_ms >= kTimeoutMs);
    REQUIRE(agreeing_ms < kTimeoutMs + kBoundMs);
    REQUIRE(r.seconds < kTimeoutMs / 1e3 + 15);
  }
}

}  // namespace snapcache::test
