// The default uploader: one device allocation and one copy per host storage, then the same views
// on the device, so tied weights stay tied and strides and offsets are kept. (Correct, not fast:
// the GPU upload engine is another Uploader.)
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/pipeline.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {

Uploader::~Uploader() = default;
UploaderTraits Uploader::traits(c10::Device) const { return {}; }

namespace {

class PerStorageUploader final : public Uploader {
 public:
  std::string name() const override { return "per-storage copy"; }

  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& host, c10::Device device) override {
    if (device.is_cpu()) return Uploaded{tensors, 0};
    if (host.storage_of.size() != tensors.size())
      return Status(StatusCode::invalid_argument, "the host storages do not describe these tensors");
    return guarded([&]() -> Result<Uploaded> {
      std::vector<c10::Storage> on_device;
      on_device.reserve(host.storages.size());
      for (const HostStorage& s : host.storages) {
        const auto nbytes = static_cast<std::int64_t>(s.nbytes);
        at::Tensor dst = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte).device(device));
        if (nbytes > 0) {
          at::Tensor src = at::from_blob(const_cast<std::byte*>(s.data), {nbytes}, at::TensorOptions().dtype(at::kByte));
          dst.copy_(src);
        }
        on_device.push_back(dst.storage());
      }
      return Uploaded{views_over(tensors, host, on_device), 0};
    });
  }
};

}  // namespace

std::shared_ptr<Uploader> per_storage_uploader() {
  static const std::shared_ptr<Uploader> plain = std::make_shared<PerStorageUploader>();  // stateless
  return plain;
}

Result<NamedTensors> upload_tensors(const NamedTensors& tensors, c10::Device device) {
  auto host = describe_host_storages(tensors);
  if (!host) return host.status().with_context("upload");
  auto out = per_storage_uploader()->upload(tensors, *host, device);
  if (!out) return out.status().with_context(fmt::format("upload to {}", device.str()));
  return std::move(out->tensors);
}

}  // namespace snapcache
