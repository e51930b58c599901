// The consumer's side: attach the prepared weights of plan.device's donor, or say why not.
#include <set>

#include "load_plan/eligibility.h"
#include "donor/prepared_layout.h"
#include "donor/protocol.h"
#include "gpu/shareable_memory.h"
#include "ipc/private_dir.h"
#include "ipc/unix_socket.h"
#include "snapcache/donor.h"
#include "snapcache/extend/tier.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

// What keeps an attachment: the mapping, and the connection whose closing tells the donor that
// this consumer is gone. Held by every storage served from it.
struct Attachment {
  std::unique_ptr<gpu::ShareableMemory> memory;  // declared first, destroyed last...
  ipc::Connection connection;
  // ...so unmap explicitly first: the donor hears of the detach only once nothing is mapped.
  ~Attachment() { memory.reset(); }
};

// Whether a failure of this kind means "no donor has it" (a miss) rather than "it has something
// this load cannot use" (a fallback).
bool is_miss(const Status& s) { return s.code() == StatusCode::not_found; }

class DonorTier final : public Tier {
 public:
  explicit DonorTier(DonorTierOptions options) : options_(std::move(options)) {}
  std::string name() const override { return "donor"; }

  Result<TierAnswer> serve(LoadContext& load) override {
    const LoadPlan& plan = load.plan;
    if (!plan.device.is_cuda()) return refuse(TierAnswer::skipped("the plan does not load onto a CUDA device"));
    // The load's own eligibility (the executor decided it): a load that must not be cached is not
    // attached from prepared weights either, except for having no disk store, which the donor does
    // not need; then the plan's own reasons still apply.
    const std::optional<NotCached>& not_cached = load.report.not_cached;
    if (not_cached && *not_cached != NotCached::no_store) return refuse(TierAnswer::skipped(load.ineligible));
    if (load_plan::Eligibility own = load_plan::plan_eligibility(plan); !own)
      return refuse(TierAnswer::skipped(own.reason));
    StageTimer stage(load.report, "attach");
    Result<TierAnswer> answer = attach(load);
    if (!answer) {
      stage.fail(answer.status().to_string());
      if (options_.required)  // the donor's own refusal, typed as it came
        return answer.status().with_context("the donor tier is required and did not serve");
      return is_miss(answer.status()) ? TierAnswer::missed(answer.status().message())
                                      : TierAnswer::unusable(answer.status().message());
    }
    std::uint64_t bytes = 0;
    for (const auto& [_, t] : answer->tensors) bytes += t.storage().nbytes();
    stage.done(bytes);
    return answer;
  }

 private:
  // Without fallback, a load the tier does not apply to is the load's error.
  Result<TierAnswer> refuse(TierAnswer answer) const {
    if (!options_.required) return answer;
    return Status(StatusCode::invalid_argument, "the donor tier is required and does not apply: " + answer.reason);
  }

  Result<TierAnswer> attach(LoadContext& load) {
    const LoadPlan& plan = load.plan;
    const int ordinal = gpu::cuda_ordinal(plan.device);
    // The disk key this load already took, when it took one, so both tiers name one checkpoint.
    Result<DonorKey> wanted = load.key != nullptr ? donor_key_for_plan(*load.key, plan) : donor_key_for_plan(load.store, plan);
    if (!wanted) return wanted.status().with_context("the donor key");
    const std::string dir = options_.socket_dir.empty() ? ipc::default_socket_dir() : options_.socket_dir;
    if (Status st = ipc::require_private_dir(dir, /*create=*/false); !st) {
      if (st.code() == StatusCode::not_found) return Status(StatusCode::not_found, "no donor: " + st.message());
      return st;
    }
    auto connection = ipc::connect_to(dir + "/" + donor::socket_name(wanted->gpu_uuid), options_.timeout);
    if (!connection) return connection.status();
    SNAPCACHE_RETURN_IF_ERROR(connection->send(nlohmann::json{{"op", "attach"}, {"key", donor::to_json(*wanted)}}.dump()));
    auto message = connection->receive(options_.timeout);
    if (!message) return message.status().with_context("waiting for the donor's answer");
    auto answer = donor::parse_message(message->body);
    if (!answer) return answer.status();
    SNAPCACHE_RETURN_IF_ERROR(donor::status_of_answer(*answer));

    // The donor said yes; check everything before anything is bound.
    auto served_key = donor::donor_key_from_json(answer->value("key", nlohmann::json::object()));
    if (!served_key) return served_key.status();
    if (auto diffs = diff_donor_keys(*wanted, *served_key); !diffs.empty())
      return Status(StatusCode::mismatch, "the donor answered with another key: " + describe_differences(diffs, 8));
    auto layout = donor::layout_from_json(answer->value("layout", nlohmann::json::object()));
    if (!layout) return layout.status();
    std::vector<std::uint64_t> sizes;
    try {
      sizes = answer->at("allocations").get<std::vector<std::uint64_t>>();
    } catch (const std::exception& e) {
      return Status(StatusCode::invalid_argument, std::string("malformed answer from the donor: ") + e.what());
    }
    std::uint64_t mapped = 0;
    for (auto n : sizes) mapped += n;
    SNAPCACHE_RETURN_IF_ERROR(donor::check_bounds(*layout, mapped));
    SNAPCACHE_RETURN_IF_ERROR(check_expected(*layout, plan));
    if (message->fds.size() != sizes.size())
      return Status(StatusCode::invalid_argument, fmt::format("the donor sent {} descriptors for {} allocations",
                                                              message->fds.size(), sizes.size()));

    auto attachment = std::make_shared<Attachment>();
    auto memory = gpu::ShareableMemory::import(ordinal, std::move(message->fds), sizes);
    if (!memory) return memory.status();
    attachment->memory = std::move(*memory);
    attachment->connection = std::move(*connection);
    std::byte* base = attachment->memory->base();
    donor::Unpacked tensors = donor::unpack(*layout, base, c10::Device(c10::kCUDA, ordinal), attachment);
    SNAPCACHE_RETURN_IF_ERROR(copy_on_attach(tensors));

    const int pid = answer->value("pid", 0);
    TierAnswer served = TierAnswer::served(
        std::move(tensors.weights), Residence::device_prepared, Provenance::cache,
        fmt::format("attached '{}' from the donor (pid {}) on {}: {} tensors, {}, fingerprint {}", plan.component, pid,
                    wanted->gpu_uuid, layout->tensors.size(), format_size(layout->bytes), answer->value("fingerprint", "")),
        donor_key_id(*wanted));
    served.derived = std::move(tensors.derived);
    return served;
  }

  // The layout against what this consumer expects, before anything is bound.
  Status check_expected(const donor::PreparedLayout& layout, const LoadPlan& plan) const {
    std::vector<TensorRecord> weights;
    std::set<std::string> derived;
    for (const auto& [r, role] : layout.tensors) {
      if (role == donor::Role::weight) weights.push_back(r);
      else derived.insert(r.name);
    }
    if (options_.expected_prepared)
      SNAPCACHE_RETURN_IF_ERROR(check_expected_layout(weights, *options_.expected_prepared, "the donor"));
    else
      SNAPCACHE_RETURN_IF_ERROR(check_expected_layout(weights, plan.expected, "the donor", ShapeCheck::element_counts_only));
    if (!options_.expected_derived.empty()) {
      const std::set<std::string> want(options_.expected_derived.begin(), options_.expected_derived.end());
      for (const auto& name : want)
        if (!derived.count(name)) return Status(StatusCode::mismatch, fmt::format("derived buffer '{}' is missing from the donor", name));
      for (const auto& name : derived)
        if (!want.count(name)) return Status(StatusCode::mismatch, fmt::format("the donor has derived buffer '{}' which is not expected", name));
    }
    return Status::ok();
  }

  // Private copies of the tensors this consumer writes (the donor's memory is shared).
  Status copy_on_attach(donor::Unpacked& tensors) const {
    for (const auto& name : options_.copy_on_attach) {
      bool found = false;
      for (auto& [n, t] : tensors.weights)
        if (n == name) t = t.clone(at::MemoryFormat::Preserve), found = true;
      if (auto it = tensors.derived.find(name); it != tensors.derived.end())
        it->second = it->second.clone(at::MemoryFormat::Preserve), found = true;
      if (!found) return Status(StatusCode::invalid_argument, fmt::format("copy_on_attach names '{}', which the donor does not serve", name));
    }
    return Status::ok();
  }

  DonorTierOptions options_;
};

}  // namespace

std::shared_ptr<Tier> donor_tier(DonorTierOptions options) { return std::make_shared<DonorTier>(std::move(options)); }

}  // namespace snapcache
