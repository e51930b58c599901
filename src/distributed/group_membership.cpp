#include "distributed/group_membership.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <random>

#include "distributed/environment.h"
#include "distributed/rank_message.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache::distributed {
namespace {

constexpr const char* kStartKey = "start";
constexpr std::size_t kMaxRecordText = 64;

std::string claim_key(int rank) { return fmt::format("rank/{}/claim", rank); }
std::string contested_key(int rank) { return fmt::format("rank/{}/contested", rank); }

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

// Text another process wrote, fit for one line of a message.
std::string clean(std::string s) {
  if (s.size() > kMaxRecordText) s = s.substr(0, kMaxRecordText) + "...";
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

std::string random_hex(std::size_t bytes) {
  std::random_device device;  // getrandom(2) on Linux
  std::string out;
  for (std::size_t i = 0; i < bytes; i += 4) out += fmt::format("{:08x}", device());
  return out.substr(0, bytes * 2);
}

ProcessRecord this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return {static_cast<long>(::getpid()), host};
}

nlohmann::json json_of(const ProcessRecord& p) { return {{"pid", p.pid}, {"host", p.host}}; }

// The process a record names; the message is left malformed when its fields are not a process's.
ProcessRecord process_of(RankMessage& record) {
  ProcessRecord p;
  p.pid = static_cast<long>(record.integer("pid", 0, LONG_MAX));
  p.host = clean(record.text("host"));
  return p;
}

std::string start_record(const GroupStart& s) {
  nlohmann::json j = json_of(s.by);
  j["nonce"] = s.nonce;
  j["world"] = s.world;
  return j.dump();
}

// The group's start as its record in the store says; a record that is not one is refused by name.
Result<GroupStart> start_of(const std::string& text) {
  auto record = RankMessage::read("the group's start in its store", text);
  if (!record) return record.status();
  GroupStart s;
  s.by = process_of(*record);
  s.nonce = clean(record->text("nonce"));
  s.world = static_cast<int>(record->integer("world", 1, kMaxWorldSize));
  if (!record->status()) return record->status();
  return s;
}

// The process that holds (or contests) a rank, in words: "pid 123 on node7", or what is wrong
// with its record.
std::string claimant(const std::string& text) {
  auto record = RankMessage::read("its claim", text);
  if (!record) return "a process (" + record.status().message() + ")";
  const ProcessRecord p = process_of(*record);
  return record->status() ? p.describe() : "a process (" + record->status().message() + ")";
}

std::string claim_record(const ProcessRecord& me, const std::string& token) {
  nlohmann::json j = json_of(me);
  j["token"] = token;
  return j.dump();
}

Status refused(const std::string& why) {
  return Status(StatusCode::invalid_argument,
                why + ": two groups on one MASTER_PORT, or one RANK given to two processes; give each group its own "
                      "MASTER_PORT");
}

// The start this store holds, waiting for it until `deadline`.
Result<GroupStart> read_start(c10d::Store& store, Deadline deadline) {
  return guarded([&]() -> Result<GroupStart> {
    if (!keys_set_by(store, {kStartKey}, deadline))
      return Status(StatusCode::io_error,
                    "rank 0 did not start the group in time: the store answers but holds no group start (rank 0 has "
                    "not reached it, has failed, or the store is another program's)");
    return start_of(text_of(store.get(kStartKey)));
  });
}

}  // namespace

std::string ProcessRecord::describe() const {
  return host.empty() ? fmt::format("pid {}", pid) : fmt::format("pid {} on {}", pid, host);
}

std::string GroupStart::describe() const {
  return fmt::format("the group started by rank 0 ({}) as {}, {} {}", by.describe(), nonce.substr(0, 6), world,
                     world == 1 ? "rank" : "ranks");
}

Result<GroupMembership> GroupMembership::join(c10d::Store& store, int rank, int world, Deadline deadline) {
  GroupMembership m;
  m.rank_ = rank;
  m.me_ = this_process();
  Status joined = guarded([&]() -> Status {
    if (rank == 0) {
      m.start_ = {random_hex(16), world, m.me_};
      const std::string mine = start_record(m.start_);
      const std::string there = text_of(store.compareSet(kStartKey, {}, bytes_of(mine)));
      if (there != mine) {
        const Result<GroupStart> other = start_of(there);
        store.set(contested_key(0), bytes_of(claim_record(m.me_, "")));
        return refused(fmt::format("{} already holds this store; this rank 0 ({}) would start another",
                                   other ? other->describe() : "a start that is no group's (" + other.status().message() + ")",
                                   m.me_.describe()));
      }
    } else {
      auto start = read_start(store, deadline);
      if (!start) return start.status();
      m.start_ = std::move(*start);
      if (m.start_.world != world)
        return Status(StatusCode::invalid_argument,
                      fmt::format("this rank {} ({}) has WORLD_SIZE={}, and the store holds {}: the ranks were "
                                  "started with different WORLD_SIZEs, or this one found another group's store",
                                  rank, m.me_.describe(), world, m.start_.describe()));
    }
    const std::string mine = claim_record(m.me_, random_hex(16));
    const std::string holder = text_of(store.compareSet(claim_key(rank), {}, bytes_of(mine)));
    if (holder != mine) {
      store.set(contested_key(rank), bytes_of(mine));
      return refused(fmt::format("rank {} of {} is held by {}, and this process ({}) claims it too", rank,
                                 m.start_.describe(), claimant(holder), m.me_.describe()));
    }
    return Status::ok();
  });
  if (!joined) return joined;
  return m;
}

Result<GroupStart> GroupMembership::contest_rank_zero(c10d::Store& store, Deadline deadline) {
  return guarded([&]() -> Result<GroupStart> {
    store.set(contested_key(0), bytes_of(claim_record(this_process(), "")));
    return read_start(store, deadline);
  });
}

Status GroupMembership::unchallenged(c10d::Store& store) const {
  return guarded([&]() -> Status {
    if (!store.check({contested_key(rank_)})) return Status::ok();
    const std::string other = claimant(text_of(store.get(contested_key(rank_))));
    return refused(fmt::format("{} also claims rank {} of {}, which this process ({}) holds, so both are refused",
                               other, rank_, start_.describe(), me_.describe()));
  });
}

}  // namespace snapcache::distributed
