// A small DiT-like model: the demo's model and the pipeline tests' model. bf16 attention with
// separate q/k/v in the checkpoint (fused per rank), INT8 linear layers with (N, 1) row scales, an
// FP8 layer with 128x128 block scales, an fp16 adaLN layer, norms, and two derived buffers (a
// cross-layer fused norm table and a RoPE table).
#pragma once

#include <memory>
#include <string>

#include "snapcache/extend/file_system.h"
#include "snapcache/pipeline.h"

namespace snapcache::demo {

struct DitConfig {
  std::int64_t hidden = 1536;
  std::int64_t layers = 8;
  std::int64_t heads = 16;
  std::int64_t tokens = 16;  // forward-pass input length
  int tp_rank = 0;
  int tp_size = 1;
  std::uint32_t seed = 1;
  // What the loader opens the checkpoint through (null: the POSIX file system); the tests count and
  // fail its reads.
  std::shared_ptr<FileSystem> checkpoint_fs;
};

// Bytes of the full checkpoint for a config.
std::uint64_t checkpoint_bytes(const DitConfig& config);
// The layers (at least one) of a checkpoint of about `bytes` at the config's width.
std::int64_t layers_for(const DitConfig& config, std::uint64_t bytes);

// Writes the full (unsharded) checkpoint with deterministic contents, not from torch's RNG.
Status write_checkpoint(const DitConfig& config, const std::string& path);

// A load plan for rank config.tp_rank of config.tp_size: a streaming loader (safetensors + sharding
// + QKV fusion, a layer at a time), expected layout, post-load methods, precision policy, refresh
// hooks.
LoadPlan make_plan(const DitConfig& config, const std::string& checkpoint_path, c10::Device device);

// The plan with its loader run whole (an ordinary_loader over the streaming one): a cold load then
// takes the host path once, after the loader, as a plan without a streaming loader does.
LoadPlan with_whole_loader(LoadPlan plan);

// The rank's share of a forward pass on a fixed input; deterministic for equal weights.
at::Tensor forward(const DitConfig& config, const LoadedModel& model);

// Same dtype, shape, strides and bytes (wherever the tensors live).
bool identical(const at::Tensor& a, const at::Tensor& b);
// The same names in the same order, each tensor identical.
bool identical(const NamedTensors& a, const NamedTensors& b);
// Same weights (names, order, bytes) and derived buffers.
bool identical(const LoadedModel& a, const LoadedModel& b);
// What identical() compares, of the model and a forward output, as 16 hex digits: equal models and
// outputs give equal fingerprints in any process of the same build, so a restarted process can be
// checked against the one before it.
std::string fingerprint(const LoadedModel& model, const at::Tensor& output);

}  // namespace snapcache::demo
