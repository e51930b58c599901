// The default uploader: one device allocation and one copy per host storage, then the same views
// on the device, so tied weights stay tied and strides and offsets are kept. (Correct, not fast:
// the GPU upload engine is another Uploader.) Onto a CUDA device it writes pending layout
// conversions there: the source matrix crosses the bus as it is and a device kernel writes its
// transpose into place (gpu/device_transpose.h, as the engine does). On the host each
// converted byte would be a fresh page, and on a small load those transposes took half the load
// (13 ms of 25 for one 43 MiB DiT layer on the H200 machine; docs/performance.md).
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/pipeline.h"
#include "gpu/device_transpose.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {

Uploader::~Uploader() = default;
UploaderTraits Uploader::traits(c10::Device) const { return {}; }
void Uploader::expect(std::uint64_t, c10::Device) {}

namespace {

class PerStorageUploader final : public Uploader {
 public:
  std::string name() const override { return "per-storage copy"; }
  UploaderTraits traits(c10::Device device) const override { return {.converts_layouts = device.is_cuda()}; }

  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& host, c10::Device device) override {
    if (!device.is_cuda()) {
      for (const HostStorage& s : host.storages)
        if (s.pending)
          return Status(StatusCode::invalid_argument, "pending layout conversions are written only on a CUDA device");
    }
    if (device.is_cpu()) return Uploaded{tensors, 0};
    if (host.storage_of.size() != tensors.size())
      return Status(StatusCode::invalid_argument, "the host storages do not describe these tensors");
    return guarded([&]() -> Result<Uploaded> {
      std::vector<c10::Storage> on_device;
      on_device.reserve(host.storages.size());
      for (const HostStorage& s : host.storages) {
        const auto nbytes = static_cast<std::int64_t>(s.nbytes);
        at::Tensor dst = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte).device(device));
        if (nbytes > 0 && s.pending) {
          SNAPCACHE_RETURN_IF_ERROR(transpose_pending(*s.pending, s.nbytes, dst, device));
        } else if (nbytes > 0) {
          at::Tensor src = at::from_blob(const_cast<std::byte*>(s.data), {nbytes}, at::TensorOptions().dtype(at::kByte));
          dst.copy_(src);
        }
        on_device.push_back(dst.storage());
      }
      return Uploaded{views_over(tensors, host, on_device), 0};
    });
  }

 private:
  // The source's raw rows onto the device (a temporary there, freed to torch's allocator when
  // done), then their transpose into `dst`.
  static Status transpose_pending(const PendingTranspose& p, std::uint64_t nbytes, at::Tensor& dst, c10::Device device) {
    SNAPCACHE_RETURN_IF_ERROR(p.check(nbytes));
    at::Tensor raw = at::from_blob(p.source.data_ptr(), {static_cast<std::int64_t>(nbytes)},
                                   at::TensorOptions().dtype(at::kByte))
                         .to(device);
    return gpu::transpose_on_device(static_cast<std::byte*>(dst.data_ptr()), p.rows() * p.element_size(),
                               static_cast<const std::byte*>(raw.data_ptr()), p.rows(), p.cols(), p.element_size(),
                               device);
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
