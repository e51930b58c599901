// Messages through c10d's TCPStore: each exchange has its own key prefix; a rank sets its
// message, waits (with the timeout) until every rank's is there, and reads them all. A rank that
// died never sets its key, so the others time out naming it instead of waiting for ever.
#include <algorithm>

#include "distributed/exchange.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache::distributed {
namespace {

class StoreExchange final : public RankGroup {
 public:
  StoreExchange(c10::intrusive_ptr<c10d::Store> store, std::function<c10::intrusive_ptr<c10d::Store>()> fresh_store,
                int rank, int size, std::string description, RankGroupOptions options)
      : store_(std::move(store)),
        fresh_store_(std::move(fresh_store)),
        rank_(rank),
        size_(size),
        description_(std::move(description)),
        options_(options) {}

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
      // A key only every rank has read can go: this rank is past round-1's wait, and so is every
      // rank that set round's key. Deleting our own key of two rounds ago keeps the store small.
      if (round >= 2) (void)guarded([&]() -> Result<bool> { return store_->deleteKey(fmt::format("{}/{}", round - 2, rank_)); });
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
  std::string description_;
  RankGroupOptions options_;
  std::uint64_t next_round_ = 0;
  std::string broken_;
};

}  // namespace

std::shared_ptr<RankGroup> store_exchange(c10::intrusive_ptr<c10d::Store> store,
                                          std::function<c10::intrusive_ptr<c10d::Store>()> fresh_store, int rank,
                                          int size, std::string description, RankGroupOptions options) {
  return std::make_shared<StoreExchange>(std::move(store), std::move(fresh_store), rank, size, std::move(description),
                                         options);
}

}  // namespace snapcache::distributed
