// The safetensors header grammar: the JSON after the 8-byte size, checked against the data
// section. No torch, so the fuzz build (tests/fuzz) reaches it.
#include "snapcache/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

#include "util/fmt.h"

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

}  // namespace snapcache
