#include "snapcache/safetensors.h"

#include <ATen/Functions.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>

#include "util/fmt.h"
#include "util/atomic_file.h"
#include "util/file_io.h"

namespace snapcache {
namespace {

struct DTypeName {
  const char* name;
  DType dtype;
};

constexpr std::array<DTypeName, 19> kSafetensorsDTypes{{
    {"BOOL", DType::bool_}, {"U8", DType::uint8}, {"I8", DType::int8}, {"I16", DType::int16},
    {"U16", DType::uint16}, {"I32", DType::int32}, {"U32", DType::uint32}, {"I64", DType::int64},
    {"U64", DType::uint64}, {"F16", DType::float16}, {"BF16", DType::bfloat16}, {"F32", DType::float32},
    {"F64", DType::float64}, {"F8_E4M3", DType::float8_e4m3fn}, {"F8_E5M2", DType::float8_e5m2},
    {"F8_E4M3FNUZ", DType::float8_e4m3fnuz}, {"F8_E5M2FNUZ", DType::float8_e5m2fnuz},
    {"F8_E8M0", DType::float8_e8m0fnu}, {"C64", DType::complex64},
}};

Status malformed(const std::string& why) { return {StatusCode::invalid_argument, why}; }

}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& d : kSafetensorsDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::optional<std::string> safetensors_dtype_name(DType dtype) {
  for (const auto& d : kSafetensorsDTypes)
    if (d.dtype == dtype) return std::string(d.name);
  return std::nullopt;
}

Result<std::vector<SafetensorsEntry>> parse_safetensors_header(std::string_view header, std::uint64_t data_bytes,
                                                               std::map<std::string, std::string>* metadata) {
  using nlohmann::json;
  if (header.empty() || header.front() != '{') return malformed("header is not a JSON object");
  json doc = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return malformed("header is not valid JSON");
  if (!doc.is_object()) return malformed("header is not a JSON object");
  std::vector<SafetensorsEntry> entries;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return malformed("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return malformed(fmt::format("__metadata__['{}'] is not a string", m.key()));
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) { return malformed(fmt::format("tensor '{}': {}", name, why)); };
    if (!v.is_object()) return bad("entry is not an object");
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        return bad(fmt::format("unknown field '{}'", f.key()));
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return bad("missing or non-string dtype");
    if (sh == v.end() || !sh->is_array()) return bad("missing or non-array shape");
    if (off == v.end() || !off->is_array() || off->size() != 2) return bad("data_offsets is not [begin, end]");
    SafetensorsEntry e;
    e.name = name;
    e.dtype_name = dt->get<std::string>();
    auto dtype = dtype_from_safetensors(e.dtype_name);
    if (!dtype) return bad(fmt::format("unsupported dtype '{}'", e.dtype_name));
    e.dtype = *dtype;
    std::uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return bad("shape has a negative or non-integer dimension");
      std::uint64_t n = d.get<std::uint64_t>();
      if (n > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, n, &numel))
        return bad("shape overflows");
      e.shape.push_back(static_cast<std::int64_t>(n));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) return bad("data_offsets are not unsigned");
    e.begin = (*off)[0].get<std::uint64_t>();
    e.end = (*off)[1].get<std::uint64_t>();
    if (e.begin > e.end) return bad(fmt::format("data_offsets [{}, {}) are reversed", e.begin, e.end));
    if (e.end > data_bytes)
      return bad(fmt::format("data_offsets [{}, {}) exceed the data section ({} bytes)", e.begin, e.end, data_bytes));
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, std::uint64_t{element_size(e.dtype)}, &nbytes) || nbytes != e.end - e.begin)
      return bad(fmt::format("shape and dtype give {} bytes but data_offsets span {}", nbytes, e.end - e.begin));
    entries.push_back(std::move(e));
  }
  // The tensors must tile the data section: no gap, no overlap, nothing left over.
  std::vector<const SafetensorsEntry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  std::uint64_t pos = 0;
  for (const auto* e : order) {
    if (e->begin < pos) return malformed(fmt::format("tensor '{}' overlaps the tensor before it", e->name));
    if (e->begin > pos) return malformed(fmt::format("gap of {} bytes before tensor '{}'", e->begin - pos, e->name));
    pos = e->end;
  }
  if (pos != data_bytes)
    return malformed(fmt::format("the tensors cover {} of the {} data bytes", pos, data_bytes));
  return entries;
}

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
  auto region = fs->map(fd->get(), id->size, MapMode::copy_on_write_private);
  if (!region) return with_path(region.status());
  file->mapping_ = std::make_shared<MappedRegion>(std::move(*region));
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
  void* data = mapping_->data() + data_start_ + e->begin;
  auto* owner = new std::shared_ptr<MappedRegion>(mapping_);
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
