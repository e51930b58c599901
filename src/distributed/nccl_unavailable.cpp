// Built where torch's NCCL headers (nvidia-nccl's nccl.h) are not found.
#include "distributed/nccl_group.h"
#include "snapcache/rank_group.h"

namespace snapcache::distributed {

Result<std::shared_ptr<RankGroup>> nccl_group(c10::intrusive_ptr<c10d::Store>, const RankEnvironment&, std::string,
                                              RankGroupOptions, const GroupMembership&) {
  return Status(StatusCode::unsupported,
                "rank group: this snapcache was built without NCCL (nccl.h from the nvidia-nccl wheel was not found); "
                "pass your own process group, or GroupTransport::store");
}

}  // namespace snapcache::distributed
