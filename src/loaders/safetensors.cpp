#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/safetensors.h"

#include <ATen/Functions.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>

#include "loaders/checkpoint_file.h"
#include "util/fmt.h"
#include "util/atomic_file.h"
#include "util/file_io.h"

namespace snapcache {
namespace {

Status malformed(const std::string& why) { return {StatusCode::invalid_argument, why}; }

}  // namespace

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path, std::shared_ptr<FileSystem> fs) {
  auto with_path = [&](const Status& st) { return st.with_context(path); };
  auto fd = fs->open(path, OpenMode::read);
  if (!fd) return fd.status();
  auto id = fs->fstat(fd->get());
  if (!id) return with_path(id.status());
  if (id->size < 8) return with_path(malformed("file is shorter than the 8-byte header size"));
  std::uint64_t header_size = 0;
  if (Status st = read_all(*fs, fd->get(), &header_size, 8, 0); !st) return with_path(st);
  if (header_size > kSafetensorsMaxHeaderBytes)
    return with_path(malformed(fmt::format("header size {} exceeds the limit of {} bytes", header_size,
                                           kSafetensorsMaxHeaderBytes)));
  if (header_size > id->size - 8)
    return with_path(malformed(fmt::format("header size {} exceeds the file ({} bytes)", header_size, id->size)));
  auto file = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  file->data_start_ = 8 + header_size;
  std::string header(header_size, '\0');
  if (Status st = read_all(*fs, fd->get(), header.data(), header_size, 8); !st) return with_path(st);
  auto entries = parse_safetensors_header(header, id->size - file->data_start_, &file->metadata_);
  if (!entries) return with_path(entries.status());
  file->entries_ = std::move(*entries);
  auto mapped = loaders::CheckpointFile::map(std::move(fs), path, std::move(*fd), id->size);
  if (!mapped) return mapped.status();
  file->mapped_ = (*mapped)->data();
  file->file_ = std::move(*mapped);
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Result<at::Tensor> SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return Status(StatusCode::not_found, fmt::format("{}: no tensor '{}'", path_, name));
  void* data = mapped_ + data_start_ + e->begin;
  auto* owner = new std::shared_ptr<StoredFile>(file_);
  auto options = at::TensorOptions().dtype(to_scalar_type(e->dtype));
  return at::from_blob(
      data, e->shape, [owner](void*) { delete owner; }, options);
}

NamedTensors SafetensorsFile::tensors() const {
  NamedTensors out;
  for (const auto& e : entries_) out.emplace_back(e.name, *tensor(e.name));
  return out;
}

Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata, std::shared_ptr<FileSystem> fs) {
  using nlohmann::json;
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> contiguous;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto dtype = to_dtype(t.scalar_type());
    std::optional<std::string> st_name = dtype ? safetensors_dtype_name(*dtype) : std::nullopt;
    if (!st_name)
      return Status(StatusCode::unsupported, fmt::format("tensor '{}': dtype {} has no safetensors name", name,
                                                         c10::toString(t.scalar_type())));
    at::Tensor c = t.cpu().contiguous();
    std::uint64_t n = static_cast<std::uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", *st_name}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    contiguous.push_back(std::move(c));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  auto file = AtomicFile::create(*fs, path);
  if (!file) return file.status();
  std::uint64_t size = text.size();
  SNAPCACHE_RETURN_IF_ERROR(file->write(&size, 8, 0));
  SNAPCACHE_RETURN_IF_ERROR(file->write(text.data(), text.size(), 8));
  std::uint64_t pos = 8 + text.size();
  for (const auto& c : contiguous) {
    std::uint64_t n = static_cast<std::uint64_t>(c.numel()) * c.element_size();
    SNAPCACHE_RETURN_IF_ERROR(file->write(c.data_ptr(), n, pos));
    pos += n;
  }
  return file->commit();
}

}  // namespace snapcache
