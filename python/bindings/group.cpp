// Ranks that agree: RankGroup over a torch.distributed process group (the caller's Gloo or NCCL
// group crosses as the very c10d object torch holds) or from the environment, and what the group
// decided (GroupReport).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

#include "snapcache/pipeline.h"
#include "snapcache/rank_group.h"
#include "tensors.h"

namespace snapcache::python {
namespace {

RankGroupOptions options_from(double timeout_seconds) {
  if (!(timeout_seconds > 0))
    raise_status(Status(StatusCode::invalid_argument, "rank group: timeout must be a positive number of seconds"));
  RankGroupOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1e3));
  return options;
}

std::shared_ptr<RankGroup> over_process_group(const py::handle& group, double timeout_seconds) {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  try {
    pg = group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
  } catch (const py::cast_error&) {
    throw py::type_error("rank group: expected a torch.distributed ProcessGroup (e.g. dist.group.WORLD), got " +
                         py::repr(py::type::of(group)).cast<std::string>());
  }
  const RankGroupOptions options = options_from(timeout_seconds);
  Result<std::shared_ptr<RankGroup>> made = Status();
  {
    py::gil_scoped_release release;
    made = rank_group_over(pg, options);
  }
  return unwrap(std::move(made));
}

}  // namespace

std::shared_ptr<RankGroup> group_from_python(const py::handle& obj) {
  if (obj.is_none()) return nullptr;
  if (py::isinstance<RankGroup>(obj)) return obj.cast<std::shared_ptr<RankGroup>>();
  return over_process_group(obj, 300);
}

void bind_group(py::module_& m) {
  py::native_enum<GroupTransport>(m, "GroupTransport", "enum.Enum", "What rank_group_from_environment makes.")
      .value("store", GroupTransport::store, "c10d's TCPStore (CPU only)")
      .value("nccl", GroupTransport::nccl, "a c10d NCCL process group on the rank's CUDA device (LOCAL_RANK)")
      .finalize();

  py::class_<RankGroup, std::shared_ptr<RankGroup>>(
      m, "RankGroup",
      "The ranks that load together; LoadPlan.group. Made by rank_group(process_group) or "
      "rank_group_from_environment().")
      .def_property_readonly("rank", &RankGroup::rank)
      .def_property_readonly("size", &RankGroup::size)
      .def("describe", &RankGroup::describe)
      .def(
          "exchange",
          [](RankGroup& g, const py::bytes& mine) {
            Result<std::vector<std::string>> all = Status();
            const std::string bytes = mine;
            {
              py::gil_scoped_release release;
              all = g.exchange(bytes);
            }
            py::list out;
            for (const auto& b : unwrap(std::move(all))) out.append(py::bytes(b));
            return out;
          },
          py::arg("mine"), "Every rank's bytes, in rank order (collective: every rank calls it).")
      .def("__repr__", [](const RankGroup& g) {
        return "RankGroup(rank " + std::to_string(g.rank()) + " of " + std::to_string(g.size()) + ", " + g.describe() + ")";
      });

  m.def("rank_group", &over_process_group, py::arg("process_group"), py::arg("timeout") = 300.0,
        "A RankGroup over a torch.distributed ProcessGroup (its CPU backend, Gloo, when it has one, else its "
        "NCCL backend). `timeout`: seconds one agreement waits for every rank.");
  m.def(
      "rank_group_from_environment",
      [](GroupTransport transport, double timeout) {
        const RankGroupOptions options = options_from(timeout);
        Result<std::shared_ptr<RankGroup>> made = Status();
        {
          py::gil_scoped_release release;
          made = rank_group_from_environment(transport, options);
        }
        return unwrap(std::move(made));
      },
      py::arg("transport") = GroupTransport::store, py::arg("timeout") = 300.0,
      "A RankGroup from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (and LOCAL_RANK for NCCL).");

  py::class_<GroupReport>(m, "GroupReport", "What the ranks of a group load agreed; the same words on every rank.")
      .def_readonly("rank", &GroupReport::rank)
      .def_readonly("size", &GroupReport::size)
      .def_readonly("tier", &GroupReport::tier, "The tier every rank took.")
      .def_readonly("decision", &GroupReport::decision, "Why the group took it.")
      .def_readonly("publication", &GroupReport::publication, "Which ranks kept what they loaded, and which did not.")
      .def_readonly("ranks", &GroupReport::ranks, "Each rank's answers, in rank order.")
      .def_readonly("agreement_seconds", &GroupReport::agreement_seconds)
      .def("__repr__", [](const GroupReport& g) {
        return "GroupReport(rank " + std::to_string(g.rank) + " of " + std::to_string(g.size) + ", took " + g.tier + ")";
      });
}

}  // namespace snapcache::python
