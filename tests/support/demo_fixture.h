// The demo model, small, on a checkpoint in a temporary directory: the pipeline tests' fixture.
#pragma once

#include <memory>
#include <string>

#include "dit_model.h"
#include "support/catch.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"
#include "snapcache/extend/file_system.h"

namespace snapcache::test {

inline demo::DitConfig small_dit_config(int tp_rank = 1, int tp_size = 2) {
  demo::DitConfig c;
  c.hidden = 256;
  c.layers = 2;
  c.heads = 4;
  c.tokens = 8;
  c.tp_rank = tp_rank;
  c.tp_size = tp_size;
  return c;
}

struct DemoFixture {
  TempDir dir;
  demo::DitConfig config = small_dit_config();
  std::string checkpoint = dir / "model.safetensors";
  DemoFixture() { REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok()); }
  LoadPlan plan() const { return demo::make_plan(config, checkpoint, c10::Device(c10::kCPU)); }
  std::shared_ptr<Store> store(std::shared_ptr<FileSystem> fs = posix_file_system()) const {
    return *Store::open(test_config(dir / "cache"), std::move(fs));
  }
  LoadedModel reference() const {
    auto m = load_model(nullptr, plan());
    REQUIRE(m.is_ok());
    return std::move(*m);
  }
};

// The tensor called `name`; fails the test when there is none.
inline const at::Tensor& tensor_named(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  FAIL("no tensor named " << name);
  return tensors.front().second;  // not reached
}

}  // namespace snapcache::test
