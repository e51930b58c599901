// A cold load's upload while its loader still runs. A streaming loader (LoadPlan::streaming_loader)
// hands its tensors over a part at a time; a worker thread takes what has come (every part put
// since it last looked), runs the host path on it (host_path/host_to_device.h: post-load, precision,
// upload) and goes back for more, so the upload ends soon after the loader instead of starting
// after it. The whole path stays the truth: finish() hands the device tensors out only when the
// tier served exactly what was put, every part went through, no storage spans two parts, and each
// method's targets in the parts add up to its targets in the whole (MethodProperties::
// applies_per_part). Otherwise it releases what it uploaded and says why, and the load runs the
// host path once on the whole, as without a streaming loader.
#pragma once

#include <ATen/ThreadLocalState.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "snapcache/extend/uploader.h"
#include "snapcache/pipeline.h"

namespace snapcache::host_path {

class UploadAhead final : public TensorSink {
 public:
  // Null when the plan's load cannot go part by part: no streaming loader, or a post-load method
  // that may write in place (a publication of the loader's tensors starts after the loader) or
  // does not apply per part. Starts no thread until the first part comes.
  static std::unique_ptr<UploadAhead> for_plan(const LoadPlan& plan);
  explicit UploadAhead(const LoadPlan& plan);
  ~UploadAhead() override;  // stops the worker; what it uploaded is released
  UploadAhead(const UploadAhead&) = delete;
  UploadAhead& operator=(const UploadAhead&) = delete;

  Status put(NamedTensors tensors) override;
  bool received() const { return started_; }

  // After the tier served `served` (the loader is done): waits for the worker, then the device
  // tensors of `served`, in its order, with the stages of the parts added to `report`; or why the
  // load must run the host path on the whole (nothing uploaded is held any more).
  Result<Uploaded> finish(const NamedTensors& served, LoadReport& report);
  // Stops the worker and releases what it uploaded: the load took another way.
  void release();

 private:
  struct Part;
  void work();
  Status prepare_and_upload(NamedTensors tensors);
  Status adds_up(const NamedTensors& served) const;
  // Takes no more parts and joins the worker, once it has uploaded those queued (`drain`) or
  // dropped them.
  void stop(bool drain);

  const LoadPlan& plan_;
  std::shared_ptr<Uploader> uploader_;
  bool converts_layouts_ = false;
  at::ThreadLocalState thread_state_;  // the load's thread's (grad mode, inference mode, ...)

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<NamedTensors> queued_;
  bool closed_ = false;
  bool started_ = false;
  std::thread worker_;

  // The worker's until it is joined.
  std::vector<Part> parts_;
  // The host storages each part uploaded, held so that no later storage can take the address of
  // one freed after its part: a storage in two parts is found by its address.
  std::unordered_map<const c10::StorageImpl*, c10::Storage> uploaded_storages_;
  Status failed_;
  std::vector<StageTime> stages_;  // summed over the parts, by stage, in the order first seen
  std::vector<std::string> notes_;  // the parts' reasons (a fallback copy), each once
};

}  // namespace snapcache::host_path
