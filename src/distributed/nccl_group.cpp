// A c10d ProcessGroupNCCL on the rank's device (LOCAL_RANK), bound eagerly so a wrong device
// fails here rather than in the first exchange.
#include "distributed/nccl_group.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "distributed/exchange.h"
#include "torch/exceptions.h"
#include "util/fmt.h"
#include "snapcache/rank_group.h"

namespace snapcache::distributed {

Result<std::shared_ptr<RankGroup>> nccl_group(c10::intrusive_ptr<c10d::Store> store, const RankEnvironment& env,
                                              std::string description, RankGroupOptions options,
                                              const GroupMembership& membership) {
  const int devices = c10::cuda::device_count();
  if (env.local_rank >= devices)
    return Status(StatusCode::invalid_argument,
                  fmt::format("rank group: LOCAL_RANK={} but this process sees {} CUDA device(s)", env.local_rank, devices));
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = options.timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, nccl_options);
  backend->setBoundDeviceId(device);
  backend->eagerConnectSingleDevice(device);
  SNAPCACHE_RETURN_IF_ERROR(membership.unchallenged(*store));
  return backend_exchange(backend, device, std::move(description), options, nullptr, membership.start().nonce);
}

}  // namespace snapcache::distributed
