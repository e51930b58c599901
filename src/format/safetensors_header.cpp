// The safetensors header grammar: the JSON after the 8-byte size, checked against the data
// section. No torch, so the fuzz build (tests/fuzz) reaches it.
#include "snapcache/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <set>
#include <utility>

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

namespace {

using nlohmann::json;

// A tensor entry as the reference reads it from the JSON: the types of its fields (its dtype one
// that is known, its shape and offsets unsigned integers). The sizes are checked once the whole
// header is read, and only for the entry that counts: a name given twice means its last entry.
struct ReadEntry {
  SafetensorsEntry entry;
  std::vector<std::uint64_t> dims;
};

Result<ReadEntry> read_entry(const std::string& name, const json& v) {
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
  ReadEntry r;
  r.entry.name = name;
  r.entry.dtype_name = dt->get<std::string>();
  auto dtype = dtype_from_safetensors(r.entry.dtype_name);
  if (!dtype) return bad(fmt::format("unsupported dtype '{}'", r.entry.dtype_name));
  r.entry.dtype = *dtype;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) return bad("shape has a negative or non-integer dimension");
    r.dims.push_back(d.get<std::uint64_t>());
  }
  if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) return bad("data_offsets are not unsigned");
  r.entry.begin = (*off)[0].get<std::uint64_t>();
  r.entry.end = (*off)[1].get<std::uint64_t>();
  return r;
}

// The entry that counts, against the data section: its shape, size and offsets.
Status check_sizes(ReadEntry& r, std::uint64_t data_bytes) {
  SafetensorsEntry& e = r.entry;
  auto bad = [&](const std::string& why) { return malformed(fmt::format("tensor '{}': {}", e.name, why)); };
  std::uint64_t numel = 1;
  for (std::uint64_t n : r.dims) {
    if (n > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, n, &numel))
      return bad("shape overflows");
    e.shape.push_back(static_cast<std::int64_t>(n));
  }
  if (e.begin > e.end) return bad(fmt::format("data_offsets [{}, {}) are reversed", e.begin, e.end));
  if (e.end > data_bytes)
    return bad(fmt::format("data_offsets [{}, {}) exceed the data section ({} bytes)", e.begin, e.end, data_bytes));
  std::uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, std::uint64_t{element_size(e.dtype)}, &nbytes) || nbytes != e.end - e.begin)
    return bad(fmt::format("shape and dtype give {} bytes but data_offsets span {}", nbytes, e.end - e.begin));
  return Status::ok();
}

Status read_metadata(const json& v, std::map<std::string, std::string>* metadata) {
  if (v.is_null()) return Status::ok();  // the reference reads `"__metadata__": null` as none
  if (!v.is_object()) return malformed("__metadata__ is not an object");
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string()) return malformed(fmt::format("__metadata__['{}'] is not a string", m.key()));
    if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
  }
  return Status::ok();
}

}  // namespace

// What the reference reads, it reads (its Python package parses the header with serde_json, into
// a struct per tensor): JSON's whitespace before and after the object, a name given twice as its
// last entry, `"__metadata__": null`. What it refuses, this refuses: anything else before the
// object (a byte-order mark, which nlohmann would skip), a NUL byte (where nlohmann would end the
// text), a field given twice in an entry or a second __metadata__ (serde's struct fields), an
// earlier entry of a repeated name that is not one. docs/loading.md lists where this reader is
// stricter on purpose.
Result<std::vector<SafetensorsEntry>> parse_safetensors_header(std::string_view header, std::uint64_t data_bytes,
                                                               std::map<std::string, std::string>* metadata) {
  const std::size_t start = header.find_first_not_of(" \t\n\r");
  if (start == std::string_view::npos || header[start] != '{') return malformed("header is not a JSON object");
  if (header.find('\0') != std::string_view::npos) return malformed("header holds a NUL byte, which JSON text cannot");

  // The top-level values are read as the parser finishes each (depth 1), so that every occurrence
  // of a name is checked; each entry is then dropped from the document, which so never holds the
  // whole header (and the parser's scan of an object for dropped values stays short).
  Status problem = Status::ok();
  auto fail = [&](Status st) {
    if (problem.is_ok()) problem = std::move(st);
  };
  std::map<std::string, ReadEntry> tensors;  // by name: the order the old reader gave too
  std::map<std::string, std::string> read_metadata_values;
  bool metadata_seen = false;
  std::string name;               // the top-level name whose value is being parsed
  std::set<std::string> fields;   // the fields of the entry being parsed
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    using E = json::parse_event_t;
    if (event == E::key && depth == 1) {
      name = parsed.get<std::string>();
      if (name == "__metadata__" && std::exchange(metadata_seen, true)) fail(malformed("__metadata__ is given twice"));
      return true;
    }
    if (event == E::object_start && depth == 1) {
      fields.clear();
      return true;
    }
    if (event == E::key && depth == 2 && name != "__metadata__") {
      // (A field the format does not define is refused as such, by read_entry.)
      const std::string field = parsed.get<std::string>();
      const bool known = field == "dtype" || field == "shape" || field == "data_offsets";
      if (known && !fields.insert(field).second)
        fail(malformed(fmt::format("tensor '{}': field '{}' is given twice", name, field)));
      return true;
    }
    const bool value_done = event == E::object_end || event == E::array_end || event == E::value;
    if (!value_done || depth != 1) return true;
    if (name == "__metadata__") {
      read_metadata_values.clear();
      if (Status st = read_metadata(parsed, &read_metadata_values); !st) fail(std::move(st));
    } else if (auto entry = read_entry(name, parsed); !entry) {
      fail(entry.status());
    } else {
      tensors.insert_or_assign(name, std::move(*entry));
    }
    return event != E::object_end;  // an entry, once read, is dropped from the document
  };
  json doc = json::parse(header.begin(), header.end(), callback, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return malformed("header is not valid JSON");
  if (!problem) return problem;

  std::vector<SafetensorsEntry> entries;
  for (auto& [_, r] : tensors) {
    SNAPCACHE_RETURN_IF_ERROR(check_sizes(r, data_bytes));
    entries.push_back(std::move(r.entry));
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
  if (metadata)
    for (auto& [key, value] : read_metadata_values) (*metadata)[key] = std::move(value);
  return entries;
}

}  // namespace snapcache
