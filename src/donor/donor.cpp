// The donor: prepared weights in shareable device memory, lent to consumers over a Unix socket.
// One thread answers everything (requests are small and rare); a consumer's attachment is its
// open connection, so a consumer that exits or dies detaches without saying so.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cuda_runtime_api.h>

#include "donor/fingerprint.h"
#include "donor/prepared_layout.h"
#include "donor/protocol.h"
#include "gpu/cuda_status.h"
#include "gpu/shareable_memory.h"
#include "ipc/private_dir.h"
#include "ipc/unix_socket.h"
#include "snapcache/donor.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/text.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// How long a connected peer may take to send its request.
constexpr auto kRequestTimeout = 5s;

// The post-load methods whose output the tier can vouch for: the built-in ones that can run as
// configured (their properties say both).
Status check_methods(const LoadPlan& plan, bool accept_custom) {
  for (const auto& method : plan.post_load) {
    const std::string name = method->name();
    const MethodProperties properties = method->properties();
    if (!properties.unsupported.empty())
      return Status(StatusCode::unsupported, fmt::format("post-load method {}: {}", name, properties.unsupported));
    if (!properties.built_in && !accept_custom)
      return Status(StatusCode::unsupported,
                    fmt::format("post-load method {} is not a built-in method; the donor cannot vouch for what its "
                                "output depends on (DonorOptions::accept_custom_methods serves it anyway)",
                                name));
  }
  return Status::ok();
}

struct Consumer {
  ipc::Connection connection;
  pid_t pid = 0;
};

struct Component {
  DonorKey key;
  std::string key_id;
  std::unique_ptr<gpu::ShareableMemory> memory;
  donor::PreparedLayout layout;
  std::uint64_t fingerprint = 0;
  std::vector<Consumer> consumers;
};

}  // namespace

struct Donor::Impl {
  c10::Device device = c10::Device(c10::kCUDA, 0);
  DonorOptions options;
  std::string gpu_uuid;
  ipc::Listener listener;
  ipc::UniqueFd stop;  // an eventfd: request_stop() writes it, run() polls it
  std::vector<std::unique_ptr<Component>> components;

  int ordinal() const { return device.index(); }

  nlohmann::json answer_attach(const nlohmann::json& request, std::vector<ipc::UniqueFd>& fds, Component*& attached) {
    auto wanted = donor::donor_key_from_json(request.at("key"));
    if (!wanted) return donor::error_answer(wanted.status());
    Component* same_component = nullptr;
    for (auto& c : components) {
      if (c->key == *wanted) {
        if (static_cast<int>(c->consumers.size()) >= options.max_consumers_per_key)
          return donor::error_answer(Status(
              StatusCode::busy, fmt::format("component '{}' is attached by {} consumer(s) (pid {}); this donor allows {} at a time",
                                            c->key.disk.component, c->consumers.size(), c->consumers.front().pid,
                                            options.max_consumers_per_key)));
        auto exported = c->memory->export_fds();
        if (!exported) return donor::error_answer(exported.status());
        fds = std::move(*exported);
        attached = c.get();
        return {{"ok", true},
                {"component", c->key.disk.component},
                {"key", donor::to_json(c->key)},
                {"fingerprint", format_hex64(c->fingerprint)},
                {"allocations", c->memory->allocation_sizes()},
                {"layout", donor::to_json(c->layout)},
                {"pid", getpid()}};
      }
      if (c->key.disk.component == wanted->disk.component) same_component = c.get();
    }
    if (same_component != nullptr)
      return donor::error_answer(
          Status(StatusCode::mismatch, fmt::format("component '{}' is served under another key: {}", wanted->disk.component,
                                                   describe_differences(diff_donor_keys(*wanted, same_component->key), 8))));
    std::string served;
    for (auto& c : components) served += (served.empty() ? "" : ", ") + c->key.disk.component;
    return donor::error_answer(Status(StatusCode::not_found,
                                      fmt::format("this donor serves no component '{}' (it serves: {})",
                                                  wanted->disk.component, served.empty() ? "nothing yet" : served)));
  }

  nlohmann::json answer_status() const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& c : components)
      list.push_back({{"component", c->key.disk.component},
                      {"key_id", c->key_id},
                      {"key", donor::to_json(c->key)},
                      {"bytes", c->memory->size()},
                      {"tensors", c->layout.tensors.size()},
                      {"consumers", c->consumers.size()},
                      {"fingerprint", format_hex64(c->fingerprint)}});
    return {{"ok", true}, {"pid", getpid()}, {"gpu_uuid", gpu_uuid}, {"components", list}};
  }

  // One connection: its request, its answer; an attached consumer stays connected.
  void handle(ipc::Connection connection) {
    auto peer = connection.peer();
    const pid_t pid = peer ? peer->pid : 0;
    // A peer that sends a request and never reads the answer (a layout can be megabytes) must not
    // stop the donor answering everyone else.
    if (Status limited = connection.limit_send_time(kRequestTimeout); !limited)
      return log(LogLevel::warn, "donor: " + limited.to_string());
    auto message = connection.receive(kRequestTimeout);
    if (!message) return log(LogLevel::debug, "donor: a connection without a request: " + message.status().to_string());
    auto request = donor::parse_message(message->body);
    nlohmann::json answer;
    std::vector<ipc::UniqueFd> fds;
    Component* attached = nullptr;
    if (!request) answer = donor::error_answer(request.status());
    else {
      try {
        const std::string op = request->value("op", "");
        if (op == "attach") answer = answer_attach(*request, fds, attached);
        else if (op == "status") answer = answer_status();
        else answer = donor::error_answer(Status(StatusCode::invalid_argument, "unknown request '" + op + "'"));
      } catch (const std::exception& e) {
        answer = donor::error_answer(Status(StatusCode::invalid_argument, std::string("malformed request: ") + e.what()));
      }
    }
    std::vector<int> raw;
    for (const auto& fd : fds) raw.push_back(fd.get());
    if (Status sent = connection.send(answer.dump(), raw); !sent)
      return log(LogLevel::warn, "donor: answering pid " + std::to_string(pid) + ": " + sent.to_string());
    if (attached != nullptr) {
      log(LogLevel::info, fmt::format("donor: pid {} attached '{}' ({})", pid, attached->key.disk.component,
                                      format_size(attached->memory->size())));
      attached->consumers.push_back({std::move(connection), pid});
    }
  }

  // Drops the consumers whose connection closed (or that sent anything: the protocol has no more).
  void reap(const std::vector<pollfd>& polled) {
    for (auto& c : components)
      std::erase_if(c->consumers, [&](Consumer& consumer) {
        for (const auto& p : polled)
          if (p.fd == consumer.connection.fd() && p.revents != 0) {
            log(LogLevel::info, fmt::format("donor: pid {} detached '{}'", consumer.pid, c->key.disk.component));
            return true;
          }
        return false;
      });
  }

  std::size_t attached() const {
    std::size_t n = 0;
    for (const auto& c : components) n += c->consumers.size();
    return n;
  }

  std::vector<pollfd> consumer_fds() const {
    std::vector<pollfd> fds;
    for (const auto& c : components)
      for (const auto& consumer : c->consumers) fds.push_back({consumer.connection.fd(), POLLIN, 0});
    return fds;
  }
};

Donor::Donor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Donor::~Donor() = default;

Result<std::unique_ptr<Donor>> Donor::start(c10::Device device, DonorOptions options) {
  if (!device.is_cuda()) return Status(StatusCode::unsupported, "a donor serves a CUDA device, not " + device.str());
  auto impl = std::make_unique<Impl>();
  impl->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(gpu::cuda_ordinal(device)));
  if (options.max_consumers_per_key < 1) options.max_consumers_per_key = 1;
  impl->options = std::move(options);
  auto uuid = gpu::device_uuid(impl->ordinal());
  if (!uuid) return uuid.status().with_context("identifying " + impl->device.str());
  impl->gpu_uuid = std::move(*uuid);
  const std::string dir = impl->options.socket_dir.empty() ? ipc::default_socket_dir() : impl->options.socket_dir;
  auto listener = ipc::Listener::listen_at(dir, donor::socket_name(impl->gpu_uuid));
  if (!listener) return listener.status();
  impl->listener = std::move(*listener);
  impl->stop = ipc::UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->stop.valid()) return Status::from_errno(errno, "eventfd");
  log(LogLevel::info, fmt::format("donor: serving {} ({}) at {}", impl->device.str(), impl->gpu_uuid, impl->listener.path()));
  return std::unique_ptr<Donor>(new Donor(std::move(impl)));
}

Status Donor::serve(Store* store, const LoadPlan& plan, const LoadedModel& model) {
  return guarded([&]() -> Status {
    Impl& d = *impl_;
    if (gpu::cuda_ordinal(plan.device) != d.ordinal() || !plan.device.is_cuda())
      return Status(StatusCode::mismatch, fmt::format("the plan loads onto {}, this donor serves {}", plan.device.str(), d.device.str()));
    SNAPCACHE_RETURN_IF_ERROR(check_methods(plan, d.options.accept_custom_methods));
    for (const auto& c : d.components)
      if (c->key.disk.component == plan.component)
        return Status(StatusCode::busy, fmt::format("component '{}' is already served by this donor", plan.component));
    auto key = donor_key_for_plan(store, plan);
    if (!key) return key.status();
    auto packing = donor::pack(model.weights, model.derived, d.device);  // tensors carry an index
    if (!packing) return packing.status();
    auto component = std::make_unique<Component>();
    component->key = std::move(*key);
    // As consumers send it (encoded): a checkpoint keyed by content without its local path, so
    // a consumer whose copy lies elsewhere asks for the same key.
    component->key.disk = key_identity(std::move(component->key.disk));
    component->key_id = donor_key_id(component->key);
    component->layout = std::move(packing->layout);
    auto memory = gpu::ShareableMemory::allocate(d.ordinal(), component->layout.bytes);
    if (!memory) return memory.status().with_context("serving '" + plan.component + "'");
    component->memory = std::move(*memory);
    // The model's tensors may still be written by work queued on torch's streams.
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) return gpu::cuda_status(err, "waiting for the device");
    for (std::size_t i = 0; i < packing->sources.size(); ++i) {
      const auto& s = component->layout.storages[i];
      if (cudaError_t err = cudaMemcpy(component->memory->base() + s.offset, packing->sources[i].data(), s.nbytes,
                                       cudaMemcpyDeviceToDevice);
          err != cudaSuccess)
        return gpu::cuda_status(err, "copying the weights into shareable memory");
    }
    const auto t0 = Clock::now();
    auto fp = donor::fingerprint_device_bytes(d.ordinal(), component->memory->base(), component->layout.bytes);
    if (!fp) return fp.status();
    component->fingerprint = *fp;
    log(LogLevel::info, fmt::format("donor: serving '{}' ({} tensors, {}, {} allocation(s)), fingerprint {} in {:.0f} ms",
                                    plan.component, component->layout.tensors.size(), format_size(component->layout.bytes),
                                    component->memory->allocation_sizes().size(), format_hex64(*fp),
                                    std::chrono::duration<double, std::milli>(Clock::now() - t0).count()));
    d.components.push_back(std::move(component));
    return Status::ok();
  });
}

void Donor::request_stop() {
  const std::uint64_t one = 1;
  (void)!write(impl_->stop.get(), &one, sizeof one);  // async-signal-safe
}

const std::string& Donor::socket_path() const { return impl_->listener.path(); }

std::uint64_t Donor::bytes() const {
  std::uint64_t n = 0;
  for (const auto& c : impl_->components) n += c->memory->size();
  return n;
}

Result<DonorShutdown> Donor::run() {
  Impl& d = *impl_;
  for (;;) {
    std::vector<pollfd> fds = {{d.stop.get(), POLLIN, 0}, {d.listener.fd(), POLLIN, 0}};
    for (const auto& p : d.consumer_fds()) fds.push_back(p);
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return Status::from_errno(errno, "donor: poll");
    }
    // Consumers that let go before the stop are reaped first: a detach and a SIGTERM that arrive
    // in one poll would otherwise count a consumer that is gone, and the stop would wait for it.
    d.reap(fds);
    if (fds[0].revents != 0) break;
    if (fds[1].revents != 0) {
      auto connection = d.listener.accept(0ms);
      if (connection) d.handle(std::move(*connection));
      else if (connection.status().code() != StatusCode::busy)
        log(LogLevel::warn, "donor: refused a connection: " + connection.status().to_string());
    }
  }

  // Shutdown: no new consumers, then wait for the attached ones, then check and free.
  DonorShutdown out;
  d.listener.close();
  out.consumers_at_stop = d.attached();
  log(LogLevel::info, fmt::format("donor: stopping; waiting for {} consumer(s)", out.consumers_at_stop));
  const auto deadline = Clock::now() + d.options.shutdown_timeout;
  while (d.attached() > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      out.timed_out = true;
      break;
    }
    std::vector<pollfd> fds = d.consumer_fds();
    if (poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR)
      return Status::from_errno(errno, "donor: poll");
    d.reap(fds);
  }
  const auto t0 = Clock::now();
  for (const auto& c : d.components) {
    auto fp = donor::fingerprint_device_bytes(d.ordinal(), c->memory->base(), c->layout.bytes);
    if (!fp) return fp.status().with_context("fingerprinting '" + c->key.disk.component + "' at shutdown");
    if (*fp != c->fingerprint) out.changed.push_back(c->key.disk.component);
  }
  out.fingerprint_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // Consumers still attached keep the physical memory: their mappings hold it until they unmap.
  d.components.clear();
  log(out.changed.empty() && !out.timed_out ? LogLevel::info : LogLevel::warn, "donor: " + out.summary());
  return out;
}

std::string DonorShutdown::summary() const {
  std::string s = fmt::format("stopped; {} consumer(s) attached at the stop{}", consumers_at_stop,
                              timed_out ? ", some still attached at the timeout (their mappings stay valid)" : "");
  if (changed.empty()) s += fmt::format("; fingerprints unchanged ({:.0f} ms)", fingerprint_seconds * 1e3);
  else {
    std::string names;
    for (const auto& c : changed) names += (names.empty() ? "" : ", ") + c;
    s += "; FINGERPRINT CHANGED for " + names + ": a consumer wrote to shared weights";
  }
  return s;
}

}  // namespace snapcache
