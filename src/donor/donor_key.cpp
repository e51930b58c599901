// The donor key: the disk key, how the weights were processed after loading, and the GPU.
#include "load_plan/plan_key.h"
#include "gpu/shareable_memory.h"
#include "snapcache/donor.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/key.h"
#include "util/fmt.h"
#include "util/hash.h"

namespace snapcache {

Result<DonorKey> donor_key_for_plan(const Key& disk_key, const LoadPlan& plan) {
  if (!plan.device.is_cuda())
    return Status(StatusCode::unsupported, fmt::format("the GPU retention tier needs a CUDA device, the plan loads onto {}",
                                                       plan.device.str()));
  DonorKey key;
  key.disk = disk_key;
  for (const auto& method : plan.post_load)
    key.weight_processing += fmt::format("{}{}@{}", key.weight_processing.empty() ? "" : "; ", method->name(),
                                         method->version().empty() ? "unversioned" : method->version());
  auto uuid = gpu::device_uuid(gpu::cuda_ordinal(plan.device));
  if (!uuid) return uuid.status();
  key.gpu_uuid = std::move(*uuid);
  return key;
}

Result<DonorKey> donor_key_for_plan(Store* store, const LoadPlan& plan) {
  if (store != nullptr) {
    auto disk = key_for_plan(*store, plan);
    if (!disk) return disk.status();
    return donor_key_for_plan(*disk, plan);
  }
  auto files = describe_checkpoint(*posix_file_system(), plan.checkpoint_files);
  if (!files) return files.status();
  return donor_key_for_plan(load_plan::key_with_checkpoint(plan, std::move(*files)), plan);
}

std::string donor_key_id(const DonorKey& key) {
  std::string bytes = encode_key(key.disk);
  bytes += '\0' + key.weight_processing + '\0' + key.gpu_uuid;
  return util::xxh3_128(bytes).hex();
}

std::vector<KeyDifference> diff_donor_keys(const DonorKey& wanted, const DonorKey& found) {
  std::vector<KeyDifference> out = diff_keys(wanted.disk, found.disk);
  if (wanted.weight_processing != found.weight_processing)
    out.push_back({"weight_processing", wanted.weight_processing, found.weight_processing,
                   "weight processing " + found.weight_processing + " -> " + wanted.weight_processing});
  if (wanted.gpu_uuid != found.gpu_uuid)
    out.push_back({"gpu_uuid", wanted.gpu_uuid, found.gpu_uuid, "GPU " + found.gpu_uuid + " -> " + wanted.gpu_uuid});
  return out;
}

}  // namespace snapcache
