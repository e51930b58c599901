// The model the donor tests serve and attach: the demo DiT at a small size, one TP rank, on a
// checkpoint the test writes once. The donor helper process and the tests build the same plan.
#pragma once

#include <string>

#include "dit_model.h"
#include "snapcache/donor.h"
#include "snapcache/pipeline.h"

namespace snapcache::test {

inline demo::DitConfig donor_test_config(int tp_rank = 0, int tp_size = 1) {
  demo::DitConfig c;
  c.hidden = 512;
  c.layers = 2;
  c.tp_rank = tp_rank;
  c.tp_size = tp_size;
  return c;
}

inline DonorOptions socket_options(const std::string& dir) {
  DonorOptions o;
  o.socket_dir = dir;
  return o;
}

// The donor tier without fallback: a test that must prove the weights were attached.
inline DonorTierOptions required_tier_options(const std::string& dir) {
  DonorTierOptions o;
  o.socket_dir = dir;
  o.required = true;
  return o;
}

inline std::string donor_test_checkpoint(const std::string& work_dir) { return work_dir + "/model.safetensors"; }

}  // namespace snapcache::test
