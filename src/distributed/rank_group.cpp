// The public ways to make a RankGroup: over the caller's process group, or from the environment.
#include "snapcache/rank_group.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "distributed/environment.h"
#include "distributed/exchange.h"
#include "distributed/group_membership.h"
#include "distributed/nccl_group.h"
#include "distributed/store_connection.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {

RankGroup::~RankGroup() = default;

std::string RankGroup::start_nonce() const { return {}; }

void RankGroup::leave(const std::string&) {}

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

namespace {

// A rank 0 whose port another process serves: what serves it, said as one line. When it is a
// store with a group on it, that group's rank 0 is told (a second claim on rank 0), so that it is
// refused too.
Status port_taken(const distributed::RankEnvironment& env, c10d::TCPStoreOptions options, const std::string& prefix,
                  distributed::Deadline deadline) {
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  const std::string mine = fmt::format("this rank 0 (pid {}) cannot start its own group of {} there", ::getpid(),
                                       env.world_size);
  options.isServer = false;
  auto tcp = distributed::open_tcp_store(env.master_addr, options, deadline);
  if (!tcp)
    return Status(StatusCode::busy, fmt::format("rank group: MASTER_PORT {} is taken by another program ({}; waited "
                                                "{} ms); {}; choose another MASTER_PORT",
                                                where, tcp.status().message(), options.timeout.count(), mine));
  c10d::PrefixStore store(prefix, *tcp);
  // The rank 0 there records its group's start as soon as it serves the port.
  const distributed::Deadline soon = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2));
  auto there = distributed::GroupMembership::contest_rank_zero(store, soon);
  if (!there)
    return Status(StatusCode::busy,
                  fmt::format("rank group: another process serves the c10d store at {} (MASTER_ADDR, MASTER_PORT), "
                              "with no snapcache group on it; {}; give each group its own MASTER_PORT",
                              where, mine));
  return Status(StatusCode::busy,
                fmt::format("rank group: another process serves the store at {} (MASTER_ADDR, MASTER_PORT): {}; {}, "
                            "and that group is refused too: two groups on one MASTER_PORT; give each group its own",
                            where, there->describe(), mine));
}

}  // namespace

Result<std::shared_ptr<RankGroup>> rank_group_from_environment(GroupTransport transport, RankGroupOptions options) {
  auto env = distributed::read_rank_environment();
  if (!env) return env.status().with_context("rank group from the environment");
  const distributed::Deadline deadline = std::chrono::steady_clock::now() + options.timeout;
  // Groups are made in the same order on every rank, so the n-th group of each rank meets the
  // n-th of the others under its own key prefix; an agent's store outlives the attempts it
  // restarts, so each attempt has its own.
  static std::atomic<int> groups_made{0};
  const int n = groups_made++;
  const std::string prefix =
      env->agent_store ? fmt::format("snapcache/attempt_{}/{}/{}", env->restart_count, to_string(transport), n)
                       : fmt::format("snapcache/{}/{}", to_string(transport), n);
  const std::string where = fmt::format("{}:{}", env->master_addr, env->master_port);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env->master_port);
  store_options.isServer = env->rank == 0 && !env->agent_store;
  // No wait for every rank to connect (numWorkers): the group's first exchange waits for them
  // anyway, and names the ranks that did not come.
  store_options.numWorkers = std::nullopt;
  store_options.timeout = options.timeout;
  store_options.multiTenant = true;  // torch.distributed may serve the same port in this process
  auto tcp = distributed::open_tcp_store(env->master_addr, store_options, deadline);
  if (!tcp) {
    if (tcp.status().code() == StatusCode::busy) return port_taken(*env, store_options, prefix, deadline);
    const char* server = env->agent_store ? "torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True)" : "rank 0";
    return tcp.status().with_context(fmt::format(
        "rank group: rank {} of {} could not reach the group's store at {} within {} ms (MASTER_ADDR, MASTER_PORT; "
        "{} serves it{})",
        env->rank, env->world_size, where, options.timeout.count(), server,
        store_options.isServer ? ": this process" : ", and may not have started"));
  }
  return guarded([&]() -> Result<std::shared_ptr<RankGroup>> {
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, *tcp);
    auto membership = distributed::GroupMembership::join(*store, env->rank, env->world_size, deadline);
    if (!membership)
      return membership.status().with_context(
          fmt::format("rank group: rank {} of {} at {} (timeout {} ms)", env->rank, env->world_size, where,
                      options.timeout.count()));
    if (transport == GroupTransport::nccl)
      return distributed::nccl_group(store, *env, fmt::format("NCCL group from the environment ({} ranks, store {})",
                                                              env->world_size, where),
                                     options, *membership);
    return distributed::store_exchange(store, std::move(*membership), env->world_size, store_options.isServer,
                                       fmt::format("c10d TCPStore group from the environment ({} ranks, store {})",
                                                   env->world_size, where),
                                       options);
  });
}

}  // namespace snapcache
