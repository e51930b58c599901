// Messages through a c10d backend's all-gather: first every rank's length, then every message
// padded to the longest. Two small collectives per exchange, on CPU (Gloo) or on the rank's CUDA
// device (NCCL, which only moves device memory).
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>

#include "distributed/exchange.h"
#include "distributed/rank_message.h"
#include "torch/exceptions.h"
#include "util/fmt.h"
#include "snapcache/rank_group.h"

namespace snapcache::distributed {
namespace {

class BackendExchange final : public RankGroup {
 public:
  BackendExchange(c10::intrusive_ptr<c10d::Backend> backend, c10::Device device, std::string description,
                  RankGroupOptions options, std::shared_ptr<void> owner, std::string start_nonce)
      : backend_(std::move(backend)),
        device_(device),
        description_(std::move(description)),
        options_(options),
        owner_(std::move(owner)),
        start_nonce_(std::move(start_nonce)) {}

  int rank() const override { return backend_->getRank(); }
  int size() const override { return backend_->getSize(); }
  std::string describe() const override { return description_; }
  std::string start_nonce() const override { return start_nonce_; }

  Result<std::vector<std::string>> exchange(const std::string& mine) override {
    if (broken_) return Status(StatusCode::io_error, description_ + " failed before: " + broken_reason_);
    auto result = guarded([&]() -> Result<std::vector<std::string>> {
      const auto cpu_u8 = at::TensorOptions().dtype(at::kByte);
      const auto cpu_i64 = at::TensorOptions().dtype(at::kLong);
      at::Tensor length = at::empty({1}, cpu_i64);
      length.data_ptr<std::int64_t>()[0] = static_cast<std::int64_t>(mine.size());
      auto lengths = all_gather(length.to(device_));
      if (!lengths) return lengths.status();
      std::int64_t longest = 1;
      std::vector<std::int64_t> sizes;
      for (const at::Tensor& t : *lengths) {
        sizes.push_back(t.cpu().data_ptr<std::int64_t>()[0]);
        // Every rank sees the same lengths, so every rank refuses here alike, before the second
        // all-gather (which would allocate what the length says).
        if (sizes.back() < 0 || sizes.back() > static_cast<std::int64_t>(kMaxRankMessageBytes))
          return malformed_rank_message(fmt::format("rank {}'s message", sizes.size() - 1),
                                        fmt::format("its length is {} bytes, and a rank's message is at most {}",
                                                    sizes.back(), kMaxRankMessageBytes));
        longest = std::max(longest, sizes.back());
      }
      at::Tensor padded = at::zeros({longest}, cpu_u8);
      std::memcpy(padded.data_ptr(), mine.data(), mine.size());
      auto messages = all_gather(padded.to(device_));
      if (!messages) return messages.status();
      std::vector<std::string> out;
      for (std::size_t r = 0; r < messages->size(); ++r) {
        at::Tensor bytes = (*messages)[r].cpu();
        out.emplace_back(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(sizes[r]));
      }
      return out;
    });
    if (!result) {
      broken_ = true;
      broken_reason_ = result.status().message();
      return Status(StatusCode::io_error, fmt::format("{} (rank {} of {}): {}", description_, rank(), size(),
                                                      result.status().message()));
    }
    return result;
  }

 private:
  Result<std::vector<at::Tensor>> all_gather(at::Tensor input) {
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(input));
    c10::intrusive_ptr<c10d::Work> work = backend_->allgather(outputs, inputs);
    // Work::wait throws when the collective fails (a peer closed its connection) or times out.
    if (!work->wait(options_.timeout))
      return Status(StatusCode::io_error, fmt::format("no answer from every rank within {} ms", options_.timeout.count()));
    return outputs[0];
  }

  c10::intrusive_ptr<c10d::Backend> backend_;
  c10::Device device_;
  std::string description_;
  RankGroupOptions options_;
  std::shared_ptr<void> owner_;
  std::string start_nonce_;
  bool broken_ = false;
  std::string broken_reason_;
};

}  // namespace

std::shared_ptr<RankGroup> backend_exchange(c10::intrusive_ptr<c10d::Backend> backend, c10::Device device,
                                            std::string description, RankGroupOptions options,
                                            std::shared_ptr<void> owner, std::string start_nonce) {
  return std::make_shared<BackendExchange>(std::move(backend), device, std::move(description), options,
                                           std::move(owner), std::move(start_nonce));
}

}  // namespace snapcache::distributed
