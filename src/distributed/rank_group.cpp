// The public ways to make a RankGroup: over the caller's process group, or from the environment.
#include "snapcache/rank_group.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>

#include "distributed/environment.h"
#include "distributed/exchange.h"
#include "distributed/nccl_group.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {

RankGroup::~RankGroup() = default;

const char* to_string(GroupTransport transport) {
  switch (transport) {
    case GroupTransport::store: return "store";
    case GroupTransport::nccl: return "nccl";
  }
  return "?";
}

Result<std::shared_ptr<RankGroup>> rank_group_over(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   RankGroupOptions options) {
  if (!group) return Status(StatusCode::invalid_argument, "rank group: no process group given");
  return guarded([&]() -> Result<std::shared_ptr<RankGroup>> {
    const std::vector<c10::Device> types = group->getDeviceTypes();
    auto has = [&](c10::DeviceType type) {
      return std::any_of(types.begin(), types.end(), [&](const c10::Device& d) { return d.type() == type; });
    };
    // Messages are a few hundred bytes: a CPU backend moves them without touching a GPU.
    c10::Device device(c10::kCPU);
    if (!has(c10::kCPU)) {
      if (!has(c10::kCUDA))
        return Status(StatusCode::unsupported,
                      fmt::format("rank group: process group '{}' has no CPU or CUDA backend", group->getBackendName()));
      c10::intrusive_ptr<c10d::Backend> cuda = group->getBackend(c10::kCUDA);
      device = cuda->getBoundDeviceId().value_or(c10::Device(c10::kCUDA, c10::cuda::current_device()));
    }
    c10::intrusive_ptr<c10d::Backend> backend = group->getBackend(device.type());
    std::string description =
        fmt::format("{} process group '{}' ({} ranks)", backend->getBackendName(), group->getGroupName(), group->getSize());
    // The backend lives as long as its process group; keep the group.
    auto owner = std::shared_ptr<void>(new c10::intrusive_ptr<c10d::ProcessGroup>(group),
                                       [](void* p) { delete static_cast<c10::intrusive_ptr<c10d::ProcessGroup>*>(p); });
    return distributed::backend_exchange(std::move(backend), device, std::move(description), options, std::move(owner));
  });
}

Result<std::shared_ptr<RankGroup>> rank_group_from_environment(GroupTransport transport, RankGroupOptions options) {
  auto env = distributed::read_rank_environment();
  if (!env) return env.status().with_context("rank group from the environment");
  // Groups are made in the same order on every rank, so the n-th group of each rank meets the
  // n-th of the others under its own key prefix.
  static std::atomic<int> groups_made{0};
  const int n = groups_made++;
  return guarded([&]() -> Result<std::shared_ptr<RankGroup>> {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(env->master_port);
    store_options.isServer = env->rank == 0 && !env->agent_store;
    store_options.numWorkers = env->world_size;
    store_options.timeout = options.timeout;
    store_options.multiTenant = true;  // torch.distributed may serve the same port in this process
    c10::intrusive_ptr<c10d::Store> tcp;
    try {
      tcp = c10::make_intrusive<c10d::TCPStore>(env->master_addr, store_options);
    } catch (...) {
      return status_of_current_exception().with_context(
          fmt::format("rank group: store at {}:{} (MASTER_ADDR, MASTER_PORT)", env->master_addr, env->master_port));
    }
    const std::string prefix = fmt::format("snapcache/{}/{}", to_string(transport), n);
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
    const std::string where = fmt::format("{}:{}", env->master_addr, env->master_port);
    if (transport == GroupTransport::nccl)
      return distributed::nccl_group(store, *env, fmt::format("NCCL group from the environment ({} ranks, store {})",
                                                              env->world_size, where),
                                     options);
    // A second client of the same store, for naming the ranks that did not answer.
    auto fresh_store = [host = env->master_addr, store_options, prefix]() -> c10::intrusive_ptr<c10d::Store> {
      c10d::TCPStoreOptions client = store_options;
      client.isServer = false;
      client.numWorkers = std::nullopt;
      client.timeout = std::chrono::seconds(2);
      return c10::make_intrusive<c10d::PrefixStore>(prefix, c10::make_intrusive<c10d::TCPStore>(host, client));
    };
    return distributed::store_exchange(store, fresh_store, env->rank, env->world_size, store_options.isServer,
                                       fmt::format("c10d TCPStore group from the environment ({} ranks, store {})",
                                                   env->world_size, where),
                                       options);
  });
}

}  // namespace snapcache
