// Messages through c10d's TCPStore: each exchange has its own key prefix; a rank sets its
// message, waits (with the timeout) until every rank's is there, and reads them all. A rank that
// died never sets its key, so the others time out naming it instead of waiting for ever.
#include <algorithm>
#include <chrono>
#include <thread>

#include "distributed/exchange.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache::distributed {
namespace {

using Clock = std::chrono::steady_clock;

class StoreExchange final : public RankGroup {
 public:
  StoreExchange(c10::intrusive_ptr<c10d::Store> store, std::function<c10::intrusive_ptr<c10d::Store>()> fresh_store,
                int rank, int size, bool serves_store, std::string description, RankGroupOptions options)
      : store_(std::move(store)),
        fresh_store_(std::move(fresh_store)),
        rank_(rank),
        size_(size),
        serves_store_(serves_store),
        description_(std::move(description)),
        options_(options) {}

  // The rank that serves the store takes it down with it: it first waits (a bounded while) until
  // every rank has read the last exchange, which it may not have when this rank is done with it.
  ~StoreExchange() override {
    if (!serves_store_ || next_round_ == 0 || !broken_.empty()) return;
    const std::string done = fmt::format("{}/read", next_round_ - 1);
    const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(10));
    while (Clock::now() < deadline) {
      auto read = guarded([&]() -> Result<std::int64_t> { return store_->add(done, 0); });
      if (!read || *read >= size_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return description_; }

  Result<std::vector<std::string>> exchange(const std::string& mine) override {
    if (!broken_.empty()) return Status(StatusCode::io_error, description_ + " failed before: " + broken_);
    const std::uint64_t round = next_round_++;
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(fmt::format("{}/{}", round, r));
    auto result = guarded([&]() -> Result<std::vector<std::string>> {
      store_->set(keys[rank_], std::vector<std::uint8_t>(mine.begin(), mine.end()));
      try {
        store_->wait(keys, options_.timeout);
      } catch (...) {
        const Status waited = status_of_current_exception();
        auto missing = ranks_without_keys(keys);
        if (!missing)
          return Status(StatusCode::io_error,
                        fmt::format("the group's store cannot be reached any more (rank 0 serves it unless torchrun's "
                                    "agent does: it may have failed or exited): {}",
                                    waited.message()));
        if (missing->empty())
          return Status(StatusCode::io_error, fmt::format("no answer from every rank within {} ms: {}",
                                                          options_.timeout.count(), waited.message()));
        return Status(StatusCode::io_error,
                      fmt::format("rank{} {} did not answer within {} ms (a rank died, hangs, or loads another "
                                  "model)",
                                  missing->size() == 1 ? "" : "s", fmt::join(*missing, ", "), options_.timeout.count()));
      }
      std::vector<std::string> out;
      for (const auto& bytes : store_->multiGet(keys)) out.emplace_back(bytes.begin(), bytes.end());
      // Counted for the rank that serves the store, so it does not leave before everyone has read.
      store_->add(fmt::format("{}/read", round), 1);
      // A key only every rank has read can go: this rank is past round-1's wait, and so is every
      // rank that set round's key. Deleting our own key of two rounds ago keeps the store small.
      if (round >= 2) {
        (void)guarded([&]() -> Result<bool> { return store_->deleteKey(fmt::format("{}/{}", round - 2, rank_)); });
        if (rank_ == 0) (void)guarded([&]() -> Result<bool> { return store_->deleteKey(fmt::format("{}/read", round - 2)); });
      }
      return out;
    });
    if (!result) {
      broken_ = result.status().message();
      return Status(StatusCode::io_error,
                    fmt::format("{} (rank {} of {}): {}", description_, rank_, size_, result.status().message()));
    }
    return result;
  }

 private:
  // The ranks whose key is not in the store, asked over a new connection.
  Result<std::vector<int>> ranks_without_keys(const std::vector<std::string>& keys) const {
    return guarded([&]() -> Result<std::vector<int>> {
      std::vector<int> missing;
      c10::intrusive_ptr<c10d::Store> fresh = fresh_store_();
      for (int r = 0; r < size_; ++r)
        if (!fresh->check({keys[r]})) missing.push_back(r);
      return missing;
    });
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::function<c10::intrusive_ptr<c10d::Store>()> fresh_store_;
  int rank_;
  int size_;
  bool serves_store_;
  std::string description_;
  RankGroupOptions options_;
  std::uint64_t next_round_ = 0;
  std::string broken_;
};

}  // namespace

std::shared_ptr<RankGroup> store_exchange(c10::intrusive_ptr<c10d::Store> store,
                                          std::function<c10::intrusive_ptr<c10d::Store>()> fresh_store, int rank,
                                          int size, bool serves_store, std::string description,
                                          RankGroupOptions options) {
  return std::make_shared<StoreExchange>(std::move(store), std::move(fresh_store), rank, size, serves_store,
                                         std::move(description), options);
}

}  // namespace snapcache::distributed
