#include "load_plan/interruption.h"

#include "torch/exceptions.h"

namespace snapcache::load_plan {

Status interruption(const LoadPlan& plan, const std::string& next) {
  if (!plan.interrupt_check) return Status::ok();
  const Status st = guarded([&] { return plan.interrupt_check(); });
  return st ? st : st.with_context("interrupted before " + next);
}

}  // namespace snapcache::load_plan
