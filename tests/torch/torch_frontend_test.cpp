// The torch front end of the store (snapcache/extend/store_tensors.h): tensors captured as storages and
// records, loaded back as tensors over the mapping, byte for byte, with their views and aliases.
// The store underneath is tested without torch in snapcache_store_tests.
#include <ATen/Functions.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>

#include "snapcache/extend/store_tensors.h"
#include "support/catch.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "torch/tensor_over.h"

using namespace snapcache;

namespace {

at::Tensor patterned(at::IntArrayRef sizes, c10::ScalarType type, int salt) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(type));
  auto* p = static_cast<std::uint8_t*>(t.data_ptr());
  std::size_t n = static_cast<std::size_t>(t.numel()) * t.element_size();
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 31 + static_cast<std::size_t>(salt) * 7);
  // bool must hold 0/1 to be a valid bool tensor
  if (type == at::kBool)
    for (std::size_t i = 0; i < n; ++i) p[i] &= 1;
  return t;
}

NamedTensors round_trip(const NamedTensors& tensors, Store& store, int seed = 1) {
  auto pub = publish_tensors(store, test::test_key(seed), tensors);
  REQUIRE(pub.result == PublishResult::published);
  auto loaded = load_tensors(store, test::test_key(seed));
  REQUIRE(loaded.lookup.result == LookupResult::hit);
  return loaded.tensors;
}

}  // namespace

TEST_CASE("every storable dtype round-trips bit for bit", "[torch][dtype]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  NamedTensors tensors;
  int salt = 0;
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    auto type = static_cast<c10::ScalarType>(i);
    if (!to_dtype(type).is_ok()) continue;  // quantized types (checked below)
    tensors.emplace_back(std::string("t_") + c10::toString(type), patterned({3, 5}, type, ++salt));
  }
  // The ones the issue names explicitly must be among them.
  for (const char* name : {"t_BFloat16", "t_Half", "t_Float8_e4m3fn", "t_Float8_e5m2", "t_Char", "t_Byte", "t_Bool",
                           "t_ComplexFloat", "t_ComplexDouble", "t_ComplexHalf"}) {
    bool found = false;
    for (auto& [n, _] : tensors) found |= n == name;
    INFO(name);
    CHECK(found);
  }
  NamedTensors back = round_trip(tensors, *store);
  REQUIRE(back.size() == tensors.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    INFO(back[i].first);
    CHECK(back[i].first == tensors[i].first);
    CHECK(back[i].second.scalar_type() == tensors[i].second.scalar_type());
    CHECK(test::same_tensor(back[i].second, tensors[i].second));
  }
}

TEST_CASE("quantized and non-CPU tensors are refused with a reason and nothing is written", "[torch][dtype]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  at::Tensor q = at::quantize_per_tensor(at::ones({4}), 0.1, 0, at::kQInt8);
  auto pub = publish_tensors(*store, test::test_key(1), {{"q", q}});
  CHECK(pub.result == PublishResult::skipped);
  CHECK(pub.status.code() == StatusCode::unsupported);
  CHECK(pub.status.message().find("'q'") != std::string::npos);
  wait_for_publications();
  CHECK(list_entries(*store).value().empty());
  at::Tensor conj = at::ones({2}, at::kComplexFloat).conj();
  CHECK(publish_tensors(*store, test::test_key(1), {{"c", conj}}).status.message().find("resolve_conj") !=
        std::string::npos);
}

TEST_CASE("layouts round-trip - views and offsets / strides / zero-size / aliases", "[torch][layout]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  at::Tensor base = patterned({64, 48}, at::kFloat, 1);
  at::Tensor col = patterned({10, 20}, at::kBFloat16, 2).t();
  NamedTensors tensors = {
      {"base", base},
      {"tied", base},                                   // the same tensor under two names
      {"rows", base.narrow(0, 5, 10)},                  // offset view
      {"stepped", base.slice(1, 1, 48, 3)},             // strided view
      {"transposed", base.t()},                         // non-contiguous
      {"expanded", patterned({1, 8}, at::kInt, 3).expand({4, 8})},  // stride 0
      {"col_major", col},
      {"zero", at::empty({0, 7}, at::kHalf)},
      {"zero_view", base.narrow(0, 3, 0)},
      {"scalar", patterned({}, at::kDouble, 4)},
  };
  NamedTensors back = round_trip(tensors, *store);
  REQUIRE(back.size() == tensors.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(test::same_tensor(back[i].second, tensors[i].second));
  }
  auto impl = [&](const char* name) {
    for (auto& [n, t] : back)
      if (n == name) return t.storage().unsafeGetStorageImpl();
    FAIL("no tensor " << name);
    return static_cast<c10::StorageImpl*>(nullptr);
  };
  // Tensors that shared a storage share one again; others do not.
  CHECK(impl("base") == impl("tied"));
  CHECK(impl("base") == impl("rows"));
  CHECK(impl("base") == impl("stepped"));
  CHECK(impl("base") == impl("transposed"));
  CHECK(impl("base") != impl("col_major"));
  CHECK(back[2].second.storage_offset() == 5 * 48);
  // Writing through one alias is seen through the other, as with the original tensors.
  back[0].second[0][0] = 1234.5f;
  CHECK(back[1].second[0][0].item<float>() == 1234.5f);
  CHECK(back[4].second[0][0].item<float>() == 1234.5f);
}

TEST_CASE("tensors keep the mapping and the lease alive after everything else is gone", "[torch][lifetime]") {
  test::TempDir dir;
  NamedTensors tensors = test::model_tensors(6);
  at::Tensor survivor;
  std::string id = key_id(test::test_key(6));
  {
    auto store = *Store::open(test::test_config(dir.path()));
    REQUIRE(publish_tensors(*store, test::test_key(6), tensors).result == PublishResult::published);
    auto loaded = load_tensors(*store, test::test_key(6));
    REQUIRE(loaded.lookup.result == LookupResult::hit);
    survivor = loaded.tensors[2].second.narrow(0, 1, 2);  // a view of a view
  }
  // Store, outcome, snapshot and the other tensors are gone; the view still reads its bytes...
  CHECK(test::same_tensor(survivor, tensors[2].second.narrow(0, 1, 2)));
  // ...and still holds the lease: the entry cannot be evicted.
  auto store = *Store::open(test::test_config(dir.path()));
  CHECK(remove_entry(*store, id).status().code() == StatusCode::busy);
  survivor = at::Tensor();
  CHECK(remove_entry(*store, id).is_ok());
}

TEST_CASE("loading does not consume the global RNG", "[torch]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  REQUIRE(publish_tensors(*store, test::test_key(8), test::model_tensors(8)).result == PublishResult::published);
  at::Tensor before = at::detail::getDefaultCPUGenerator().get_state();
  auto loaded = load_tensors(*store, test::test_key(8));
  REQUIRE(loaded.lookup.result == LookupResult::hit);
  at::Tensor after = at::detail::getDefaultCPUGenerator().get_state();
  CHECK(at::equal(before, after));
}


TEST_CASE("views over other storages keep every tensor's dtype, shape, strides, offset and aliases, on the storages' device",
          "[torch][layout]") {
  at::Tensor base = patterned({4096}, at::kFloat, 3);
  at::Tensor tied = patterned({64, 64}, at::kBFloat16, 4);
  const NamedTensors host = {
      {"flat", base},
      {"offset view", base.narrow(0, 100, 1000).view({10, 100})},
      {"transposed", base.narrow(0, 7, 600).view({20, 30}).t()},
      {"embed", tied},
      {"lm_head", tied},
      {"empty", at::empty({0, 5}, at::kHalf)},
      {"scalar", patterned({}, at::kLong, 5)},
  };
  auto described = describe_host_storages(host);
  REQUIRE(described.is_ok());
  // Storages of the same bytes elsewhere: copies on the CPU, and on a CUDA device a DataPtr that no
  // code may read (no GPU here): a view's making never touches its bytes.
  std::vector<at::Tensor> copies;
  std::vector<c10::Storage> cpu, cuda;
  for (const HostStorage& s : described->storages) {
    copies.push_back(at::empty({static_cast<std::int64_t>(std::max<std::uint64_t>(s.nbytes, 1))}, at::kByte));
    if (s.nbytes > 0) std::memcpy(copies.back().data_ptr(), s.data, s.nbytes);  // an empty storage may have no data
    cpu.push_back(copies.back().storage());
    c10::DataPtr elsewhere(copies.back().data_ptr(), c10::Device(c10::kCUDA, 0));
    cuda.emplace_back(c10::Storage::use_byte_size_t(), s.nbytes, std::move(elsewhere), nullptr, false);
  }
  for (const auto* storages : {&cpu, &cuda}) {
    const bool on_cuda = storages == &cuda;
    INFO((on_cuda ? "cuda" : "cpu"));
    const NamedTensors views = views_over(host, *described, *storages);
    REQUIRE(views.size() == host.size());
    for (std::size_t i = 0; i < host.size(); ++i) {
      const at::Tensor& t = host[i].second;
      const at::Tensor& v = views[i].second;
      INFO(host[i].first);
      CHECK(views[i].first == host[i].first);
      CHECK(v.scalar_type() == t.scalar_type());
      CHECK(v.sizes() == t.sizes());
      CHECK(v.strides() == t.strides());
      CHECK(v.storage_offset() == t.storage_offset());
      CHECK(v.is_contiguous() == t.is_contiguous());
      CHECK(v.device() == (*storages)[described->storage_of[i]].device());
      CHECK(v.storage().data() == (*storages)[described->storage_of[i]].data());
      // Dispatched as a tensor of its device, autograd included.
      CHECK(v.key_set().has(on_cuda ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU));
      CHECK(v.key_set().has(on_cuda ? c10::DispatchKey::AutogradCUDA : c10::DispatchKey::AutogradCPU));
      if (!on_cuda && t.numel() > 0) {  // bit for bit (at::equal says NaN differs from itself)
        const at::Tensor a = v.contiguous(), b = t.contiguous();
        CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(b.numel()) * b.element_size()) == 0);
      }
    }
    CHECK(views[3].second.storage().is_alias_of(views[4].second.storage()));  // tied stay tied
  }
  // A view that would reach past its storage is refused, as set_ refuses it.
  std::vector<c10::Storage> short_storages = cpu;
  short_storages[described->storage_of[0]] = c10::Storage(c10::Storage::use_byte_size_t(), 64,
                                                         c10::DataPtr(copies[0].data_ptr(), c10::Device(c10::kCPU)),
                                                         nullptr, false);
  CHECK_THROWS(views_over(host, *described, short_storages));

  // Negative sizes, strides and offsets are refused, also beside an empty dimension, where the
  // bytes a view reaches are none.
  const c10::Storage& any = cpu.front();
  CHECK_NOTHROW(tensor_over(any, at::kByte, {0, 4}, {4, 1}, 0));
  CHECK_THROWS(tensor_over(any, at::kByte, {0, -4}, {4, 1}, 0));
  CHECK_THROWS(tensor_over(any, at::kByte, {0, 4}, {-4, 1}, 0));
  CHECK_THROWS(tensor_over(any, at::kByte, {1}, {1}, -1));
}
