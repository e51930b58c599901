// Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, TORCHELASTIC_USE_AGENT_STORE and
// TORCHELASTIC_RESTART_COUNT.
#include "distributed/environment.h"

#include <cstdlib>
#include <limits>

#include <cerrno>

#include "util/fmt.h"

namespace snapcache::distributed {
namespace {

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

Result<int> integer(const char* name, long min, long max) {
  const char* text = variable(name);
  if (text == nullptr) return Status(StatusCode::invalid_argument, fmt::format("{} is not set", name));
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max)
    return Status(StatusCode::invalid_argument,
                  fmt::format("{}={} is not a whole number from {} to {}", name, text, min, max));
  return static_cast<int>(value);
}

}  // namespace

Result<RankEnvironment> read_rank_environment() {
  RankEnvironment env;
  const char* addr = variable("MASTER_ADDR");
  if (addr == nullptr) return Status(StatusCode::invalid_argument, "MASTER_ADDR is not set");
  env.master_addr = addr;
  if (variable("MASTER_PORT") != nullptr) {
    auto port = integer("MASTER_PORT", 1, 65535);
    if (!port) return port.status();
    env.master_port = *port;
  }
  auto world = integer("WORLD_SIZE", 1, std::numeric_limits<int>::max());
  if (!world) return world.status();
  if (*world > kMaxWorldSize)
    return Status(StatusCode::invalid_argument,
                  fmt::format("WORLD_SIZE={} is more ranks than a group can have: at most {} (the group's c10d store "
                              "holds a connection for every rank, and a process holds at most {} descriptors)",
                              *world, kMaxWorldSize, kMaxWorldSize));
  env.world_size = *world;
  auto rank = integer("RANK", 0, env.world_size - 1);
  if (!rank) return rank.status().with_context(fmt::format("WORLD_SIZE={}", env.world_size));
  env.rank = *rank;
  env.local_rank = env.rank;
  if (variable("LOCAL_RANK") != nullptr) {
    auto local = integer("LOCAL_RANK", 0, std::numeric_limits<int>::max());
    if (!local) return local.status();
    env.local_rank = *local;
  }
  const char* agent = variable("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && std::string(agent) == "True";
  if (variable("TORCHELASTIC_RESTART_COUNT") != nullptr) {
    auto restarts = integer("TORCHELASTIC_RESTART_COUNT", 0, std::numeric_limits<int>::max());
    if (!restarts) return restarts.status();
    env.restart_count = *restarts;
  }
  return env;
}

}  // namespace snapcache::distributed
