// Messages through c10d's TCPStore: each exchange has its own key prefix; a rank sets its
// message, adds its rank to the round's arrivals, waits (with the timeout) until every rank's
// message is there, and reads them all, in slices the store accepts. A rank that died never sets
// its key, so the others time out naming it (from the arrivals: one read, whatever the group's
// size) instead of waiting for ever.
//
// A key holds 'm' and the rank's message, or 'r' and the reason the rank left the group (another
// process claims its rank, or RankGroup::leave); anything else was written by no rank of a group.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>

#include "distributed/exchange.h"
#include "distributed/rank_list.h"
#include "torch/exceptions.h"
#include "util/fmt.h"
#include "snapcache/rank_group.h"

namespace snapcache::distributed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMessage = 'm';
constexpr char kLeaving = 'r';
// A peer's reason for leaving is a line for a person.
constexpr std::size_t kMaxReasonBytes = 600;
// c10d's libuv store refuses one request for more than 131072 keys, and its time per request
// grows with the square of the keys in it (16384 keys: 0.5 s; 1024: 3 ms): larger groups wait for
// and read their round in slices of this many.
constexpr std::size_t kKeysPerRequest = 1024;

std::vector<std::uint8_t> framed(char kind, const std::string& text) {
  std::vector<std::uint8_t> out;
  out.reserve(text.size() + 1);
  out.push_back(static_cast<std::uint8_t>(kind));
  out.insert(out.end(), text.begin(), text.end());
  return out;
}

std::string arrivals_key(std::uint64_t round) { return fmt::format("{}/arrived", round); }
// Where a rank's message of a round is.
std::string message_key(std::uint64_t round, std::size_t rank) { return fmt::format("{}/{}", round, rank); }

class StoreExchange final : public RankGroup {
 public:
  StoreExchange(c10::intrusive_ptr<c10d::Store> store, GroupMembership membership, int size, bool serves_store,
                std::string description, RankGroupOptions options)
      : store_(std::move(store)),
        membership_(std::move(membership)),
        rank_(membership_.rank()),
        size_(size),
        serves_store_(serves_store),
        description_(std::move(description)),
        options_(options) {}

  // The rank that serves the store takes it down with it: it first waits (a bounded while) until
  // the other ranks are done with its last round: every rank has read it; or, when this rank left,
  // the others have read why; or, when it gave up waiting, the others that came have given up too
  // (so that they can still name the ranks that did not).
  ~StoreExchange() override {
    if (!serves_store_ || !last_round_) return;
    const std::string read = fmt::format("{}/read", last_round_->round);
    const std::string gave_up = fmt::format("{}/gave_up", last_round_->round);
    const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(10));
    while (Clock::now() < deadline) {
      auto done = guarded([&]() -> Result<std::int64_t> { return store_->add(read, 0) + store_->add(gave_up, 0); });
      if (!done || *done >= last_round_->readers) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return description_; }
  std::string start_nonce() const override { return membership_.start().nonce; }

  void leave(const std::string& reason) override {
    if (!broken_.empty()) return;
    broken_ = reason;
    (void)post_leaving(next_round_++, Status(StatusCode::invalid_argument, reason));
  }

  Result<std::vector<std::string>> exchange(const std::string& mine) override {
    if (!broken_.empty()) return Status(StatusCode::io_error, description_ + " failed before: " + broken_);
    const std::uint64_t round = next_round_++;
    const auto ranks = static_cast<std::size_t>(size_);
    // The round's keys a request at a time, made when that request is sent: a group of a million
    // ranks would otherwise spend seconds making keys before it starts to wait.
    auto slice = [&](std::size_t first) {
      std::vector<std::string> keys;
      for (std::size_t r = first; r < std::min(ranks, first + kKeysPerRequest); ++r)
        keys.push_back(message_key(round, r));
      return keys;
    };
    auto result = guarded([&]() -> Result<std::vector<std::string>> {
      if (Status held = membership_.unchallenged(*store_); !held) return post_leaving(round, held);
      store_->set(message_key(round, static_cast<std::size_t>(rank_)), framed(kMessage, mine));
      store_->append(arrivals_key(round), framed(',', std::to_string(rank_)));
      try {
        const auto deadline = Clock::now() + options_.timeout;
        for (std::size_t first = 0; first < ranks; first += kKeysPerRequest)
          if (!keys_set_by(*store_, slice(first), deadline)) return give_up(round);
      } catch (...) {
        return Status(StatusCode::io_error,
                      fmt::format("the group's store cannot be reached any more (rank 0 serves it unless torchrun's "
                                  "agent does: it may have failed or exited): {}",
                                  status_of_current_exception().message()));
      }
      std::vector<std::vector<std::uint8_t>> values;
      values.reserve(ranks);
      for (std::size_t first = 0; first < ranks; first += kKeysPerRequest)
        for (auto& v : store_->multiGet(slice(first))) values.push_back(std::move(v));
      // What the ranks said (no store access): their messages, or why this round ends.
      std::optional<Status> ended;
      std::vector<std::string> out;
      out.reserve(ranks);
      for (std::size_t r = 0; r < values.size() && !ended; ++r) {
        const std::vector<std::uint8_t>& v = values[r];
        if (!v.empty() && v[0] == kLeaving)
          ended = Status(StatusCode::invalid_argument,
                         fmt::format("rank {} left the group: {}", r,
                                     std::string(v.begin() + 1, v.begin() + std::min(v.size(), kMaxReasonBytes + 1))));
        else if (v.empty() || v[0] != kMessage)
          ended = Status(StatusCode::invalid_argument,
                         fmt::format("rank {}'s key in round {} holds {} bytes that no rank of a group writes: another "
                                     "process wrote them (anyone who reaches the store's port can)",
                                     r, round, v.size()));
        else
          out.emplace_back(v.begin() + 1, v.end());
      }
      Status held = Status::ok();
      if (!ended) {
        // A key only every rank has read can go: this rank is past round-1's wait, and so is every
        // rank that set round's key. Deleting our own key of two rounds ago keeps the store small.
        if (round >= 2) {
          (void)guarded([&]() -> Result<bool> { return store_->deleteKey(message_key(round - 2, static_cast<std::size_t>(rank_))); });
          if (rank_ == 0)
            for (const std::string& key :
                 {fmt::format("{}/read", round - 2), fmt::format("{}/gave_up", round - 2), arrivals_key(round - 2)})
              (void)guarded([&]() -> Result<bool> { return store_->deleteKey(key); });
        }
        last_round_ = {round, size_};
        held = membership_.unchallenged(*store_);  // claimed meanwhile?
      }
      // Counted for the rank that serves the store, so it does not leave before everyone has read
      // (a rank's leaving message included). The last request of this rank's round: the serving
      // rank may take the store down as soon as the count is full, and a request after it would
      // then fail with a closed connection instead of the group's own reason.
      store_->add(fmt::format("{}/read", round), 1);
      if (ended) return *ended;
      // Claimed meanwhile: the others learn it from this rank's message in the next round.
      if (!held) return post_leaving(round + 1, held);
      return out;
    });
    if (!result) {
      broken_ = result.status().message();
      return Status(result.status().code(),
                    fmt::format("{} (rank {} of {}): {}", description_, rank_, size_, result.status().message()));
    }
    return result;
  }

 private:
  // This rank's reason for leaving as its message of `round`, where the other ranks look for it.
  Status post_leaving(std::uint64_t round, const Status& why) {
    last_round_ = {round, size_ - 1};
    (void)guarded([&]() -> Status {
      store_->set(message_key(round, static_cast<std::size_t>(rank_)), framed(kLeaving, why.message()));
      return Status::ok();
    });
    return why;
  }

  Status give_up(std::uint64_t round) {
    auto missing = ranks_not_arrived(round);
    if (!missing) return missing.status();
    (void)guarded([&]() -> Result<std::int64_t> { return store_->add(fmt::format("{}/gave_up", round), 1); });
    last_round_ = {round, size_ - static_cast<int>(missing->size())};  // this rank among them
    if (missing->empty())
      return Status(StatusCode::io_error, fmt::format("no answer from every rank within {} ms", options_.timeout.count()));
    return Status(StatusCode::io_error,
                  fmt::format("rank{} {} did not answer within {} ms (a rank died, hangs, or loads another model)",
                              missing->size() == 1 ? "" : "s", rank_list(*missing), options_.timeout.count()));
  }

  // The ranks that did not add themselves to the round's arrivals: one read, whatever the size.
  Result<std::vector<int>> ranks_not_arrived(std::uint64_t round) const {
    return guarded([&]() -> Result<std::vector<int>> {
      std::vector<bool> arrived(static_cast<std::size_t>(size_), false);
      if (store_->check({arrivals_key(round)})) {
        const std::vector<std::uint8_t> list = store_->get(arrivals_key(round));
        const std::string_view text(reinterpret_cast<const char*>(list.data()), list.size());
        for (std::size_t i = 0; i < text.size();) {  // ",0,3,1": each entry is ',' and a rank
          const std::size_t next = std::min(text.find(',', i + 1), text.size());
          int r = -1;
          std::from_chars(text.data() + i + 1, text.data() + next, r);
          if (r >= 0 && r < size_) arrived[static_cast<std::size_t>(r)] = true;
          i = next;
        }
      }
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r)
        if (!arrived[static_cast<std::size_t>(r)]) missing.push_back(r);
      return missing;
    });
  }

  c10::intrusive_ptr<c10d::Store> store_;
  GroupMembership membership_;
  int rank_;
  int size_;
  bool serves_store_;
  std::string description_;
  RankGroupOptions options_;
  std::uint64_t next_round_ = 0;
  std::string broken_;
  // The round the others must be done with before this rank takes the store away, and how many
  // of them will read it (or give up on it).
  struct LastRound {
    std::uint64_t round;
    int readers;
  };
  std::optional<LastRound> last_round_;
};

}  // namespace

std::shared_ptr<RankGroup> store_exchange(c10::intrusive_ptr<c10d::Store> store, GroupMembership membership,
                                          int size, bool serves_store, std::string description,
                                          RankGroupOptions options) {
  return std::make_shared<StoreExchange>(std::move(store), std::move(membership), size, serves_store,
                                         std::move(description), options);
}

}  // namespace snapcache::distributed
