// `snapcache donors`: every donor socket in the directory, asked what it serves.
#include <dirent.h>

#include <algorithm>

#include "donor/protocol.h"
#include "ipc/private_dir.h"
#include "ipc/unix_socket.h"
#include "snapcache/donor.h"
#include "snapcache/key.h"

namespace snapcache {
namespace {

constexpr ipc::Timeout kTimeout{2000};

Status ask(const std::string& path, DonorInfo& info) {
  auto connection = ipc::connect_to(path, kTimeout);
  if (!connection) return connection.status();
  SNAPCACHE_RETURN_IF_ERROR(connection->send(R"({"op":"status"})"));
  auto message = connection->receive(kTimeout);
  if (!message) return message.status();
  auto answer = donor::parse_message(message->body);
  if (!answer) return answer.status();
  SNAPCACHE_RETURN_IF_ERROR(donor::status_of_answer(*answer));
  try {
    info.pid = answer->at("pid").get<int>();
    info.gpu_uuid = answer->at("gpu_uuid").get<std::string>();
    for (const auto& c : answer->at("components")) {
      DonorComponentInfo ci;
      ci.component = c.at("component").get<std::string>();
      ci.key_id = c.at("key_id").get<std::string>();
      auto key = donor::donor_key_from_json(c.at("key"));
      if (!key) return key.status();
      ci.key = std::move(*key);
      ci.bytes = c.at("bytes").get<std::uint64_t>();
      ci.tensors = c.at("tensors").get<std::size_t>();
      ci.consumers = c.at("consumers").get<std::size_t>();
      ci.fingerprint = c.at("fingerprint").get<std::string>();
      info.bytes += ci.bytes;
      info.components.push_back(std::move(ci));
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::invalid_argument, std::string("malformed status answer: ") + e.what());
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<DonorInfo>> list_donors(const std::string& socket_dir) {
  const std::string dir = socket_dir.empty() ? ipc::default_socket_dir() : socket_dir;
  if (Status st = ipc::require_private_dir(dir, /*create=*/false); !st) {
    if (st.code() == StatusCode::not_found) return std::vector<DonorInfo>{};  // no donor ever ran
    return st;
  }
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.ends_with(".sock")) names.push_back(name);
    }
    closedir(d);
  } else {
    return Status::from_errno(errno, "listing " + dir);
  }
  std::sort(names.begin(), names.end());
  std::vector<DonorInfo> out;
  for (const auto& name : names) {
    DonorInfo info;
    info.socket = dir + "/" + name;
    if (Status st = ask(info.socket, info); !st) info.error = st.message();
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace snapcache
