// The blocked transpose behind the post-load layout conversions gives exactly what torch's
// t().contiguous() and contiguous() give: sizes, strides and bytes, for every element size, odd
// shapes, whole register blocks (16x16 bytes, 8x8 16-bit) and sizes that are not multiples of a block or tile, size-1 dimensions, and tensors large enough
// to be split among threads. While a load defers them, they wait unreadable until written.
#include <ATen/Functions.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "methods/deferred_layout.h"
#include "methods/layout_kernels.h"
#include "support/catch.h"
#include "util/transpose.h"

using namespace snapcache;

namespace {

// Same dtype, sizes, strides and bytes (all of the storage the tensor spans).
bool same(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() || a.strides() != b.strides()) return false;
  const auto bytes = static_cast<std::size_t>(a.numel()) * a.element_size();
  // An empty tensor's data_ptr() is null, and memcmp of null is undefined even for 0 bytes.
  return bytes == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), bytes) == 0;
}

// Deterministic bytes of every dtype's size (not torch's RNG: the values need not be valid floats).
at::Tensor filled(std::int64_t rows, std::int64_t cols, at::ScalarType type) {
  at::Tensor t = at::empty({rows, cols}, at::TensorOptions().dtype(type));
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  const auto n = static_cast<std::size_t>(t.numel()) * t.element_size();
  std::uint32_t x = 2463534242u + static_cast<std::uint32_t>(rows * 31 + cols);
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = static_cast<unsigned char>(x);
  }
  return t;
}

// Whether this process may read the byte at `p`: the kernel copies it into a pipe, or answers
// EFAULT for a page that may not be read, where a plain read would kill the process.
bool readable(const void* p) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const ssize_t n = ::write(fds[1], p, 1);
  const int error = errno;
  ::close(fds[0]);
  ::close(fds[1]);
  if (n < 0) REQUIRE(error == EFAULT);
  return n == 1;
}

}  // namespace

TEST_CASE("column-major and row-major conversions match torch bit for bit", "[post-load][kernels]") {
  const at::ScalarType types[] = {at::kChar,  at::kByte,  at::kFloat8_e4m3fn, at::kHalf,          at::kBFloat16,
                                  at::kFloat, at::kDouble, at::kLong,         at::kComplexDouble, at::kShort};
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1},  {1, 7},   {7, 1},    {3, 5},    {64, 64},
                                                          {65, 63}, {127, 129}, {200, 3}, {3, 200}, {0, 5},
                                                          {513, 2049}, {16, 16},  {8, 8},     {32, 48},  {40, 24}, {17, 33}};
  for (at::ScalarType type : types) {
    for (auto [rows, cols] : shapes) {
      INFO(c10::toString(type) << " [" << rows << ", " << cols << "]");
      at::Tensor t = filled(rows, cols, type);
      at::Tensor cm = methods::column_major(t);
      CHECK(same(cm, t.t().contiguous().t()));
      // And back: the row-major form of a column-major tensor.
      at::Tensor rm = methods::row_major(cm);
      CHECK(same(rm, cm.contiguous()));
      CHECK(same(rm, t));
      // Already in the wanted layout: handed back as it is, as torch does.
      CHECK(methods::row_major(t).is_same(t));
    }
  }
}

TEST_CASE("a layout conversion large enough for several threads matches torch", "[post-load][kernels]") {
  for (at::ScalarType type : {at::kChar, at::kHalf, at::kFloat}) {
    INFO(c10::toString(type));
    at::Tensor t = filled(3001, 2999, type);  // > 8 MiB for half and float: split among threads
    CHECK(same(methods::column_major(t), t.t().contiguous().t()));
    at::Tensor cm = t.t().contiguous().t();
    CHECK(same(methods::row_major(cm), cm.contiguous()));
  }
}

TEST_CASE("the transpose needs no alignment: matrices at odd addresses come out right", "[post-load][kernels]") {
  // The upload engine transposes into byte offsets of one staging buffer shared by matrices of
  // different element sizes: a 2-byte matrix after an int8 one of odd size starts at an odd
  // address. (Typed element accesses there were undefined behaviour, found by UBSan.)
  const std::pair<std::size_t, std::size_t> shapes[] = {{1, 1}, {3, 5}, {16, 16}, {17, 33}, {64, 64}, {65, 63}, {3, 200}};
  for (std::size_t size : {1, 2, 4, 8, 16}) {
    for (auto [rows, cols] : shapes) {
      for (std::size_t threads : {1, 3}) {
        INFO(size << "-byte elements [" << rows << ", " << cols << "], " << threads << " threads");
        const std::size_t bytes = rows * cols * size;
        std::vector<unsigned char> src(bytes + 1), dst(bytes + 1), want(bytes);
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < cols; ++c)
            std::memcpy(&want[(c * rows + r) * size], &src[1 + (r * cols + c) * size], size);
        util::transpose(src.data() + 1, dst.data() + 1, rows, cols, size, threads);
        CHECK(std::memcmp(dst.data() + 1, want.data(), bytes) == 0);
      }
    }
  }
}

TEST_CASE("deferred conversions wait unreadable until written, and a written one outlives the load's layouts",
          "[post-load][kernels]") {
  // Neither a whole number of pages; c as small as an FP8 scale grid, which is deferred too.
  const at::Tensor a = filled(300, 257, at::kChar), b = filled(129, 300, at::kHalf), c = filled(12, 6, at::kFloat);
  at::Tensor ta, tb, tc;
  {
    methods::DeferredLayouts layouts;
    {
      methods::DeferredLayouts::Scope scope(layouts);
      ta = methods::column_major(a);
      tb = methods::column_major(b);
      tc = methods::column_major(c);
    }
    CHECK(!layouts.empty());
    // Carved from one reservation, page-aligned, neither readable.
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto pa = reinterpret_cast<std::uintptr_t>(ta.data_ptr()), pb = reinterpret_cast<std::uintptr_t>(tb.data_ptr());
    CHECK(pa % page == 0);
    CHECK(pb == pa + (300 * 257 + page - 1) / page * page);
    CHECK(!readable(ta.data_ptr()));
    CHECK(!readable(tb.data_ptr()));
    CHECK(reinterpret_cast<std::uintptr_t>(tc.data_ptr()) == pb + (129 * 300 * 2 + page - 1) / page * page);
    CHECK(!readable(tc.data_ptr()));
    CHECK(ta.sizes() == a.t().contiguous().t().sizes());
    CHECK(ta.strides() == a.t().contiguous().t().strides());

    // Writing one writes torch's bytes and leaves its neighbour unreadable.
    REQUIRE(layouts.materialize({{"a", ta}, {"b", tb}, {"c", tc}}, {"a", "c"}));
    CHECK(same(ta, a.t().contiguous().t()));
    CHECK(same(tc, c.t().contiguous().t()));
    CHECK(!readable(tb.data_ptr()));
  }
  // The layouts are gone; the tensors still hold their reservation.
  CHECK(same(ta, a.t().contiguous().t()));
  CHECK(!readable(tb.data_ptr()));
}
