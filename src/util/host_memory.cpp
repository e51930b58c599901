#include "util/host_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "util/align.h"

namespace snapcache::util {
namespace {

constexpr std::uint64_t kHugePage = 2ull << 20;

}  // namespace

std::uint64_t huge_page_span(std::uint64_t bytes) { return align_up(bytes, kHugePage); }

void* map_huge_pages(std::uint64_t buffer_bytes) {
  const std::uint64_t bytes = huge_page_span(buffer_bytes);
  // Aligned to a huge page: map one more, then give back the edges.
  const std::uint64_t span = bytes + kHugePage;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto begin = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) ::munmap(raw, aligned - begin);
  if (const std::uintptr_t end = begin + span, used = aligned + bytes; end > used)
    ::munmap(reinterpret_cast<void*>(used), end - used);
  void* p = reinterpret_cast<void*>(aligned);
  (void)::madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void unmap_huge_pages(void* p, std::uint64_t bytes) {
  if (p != nullptr) ::munmap(p, huge_page_span(bytes));
}

std::optional<std::uint64_t> available_host_memory() {
  // /proc/meminfo is the kernel's own file, small and never blocking; read line by line.
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> name >> kib) {
    std::getline(meminfo, unit);
    if (name == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace snapcache::util
