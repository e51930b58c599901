// Host memory the way the fast paths take it: anonymous mappings of whole 2 MiB pages, advised to
// be backed by transparent huge pages (a fresh 4 KiB page costs a fault and a clearing each: torch's
// allocator copied 1 GiB in 0.46 s on the development machine, a huge-page mapping in 0.13-0.15 s),
// and how much memory the kernel says a new allocation may take.
#pragma once

#include <cstdint>
#include <optional>

namespace snapcache::util {

// Bytes a mapping of `bytes` takes: whole huge pages.
std::uint64_t huge_page_span(std::uint64_t bytes);

// At least `bytes` of zeroed, writable memory aligned to a huge page, advised to be backed by them
// (a hint: where the kernel refuses, 4 KiB pages, still correct); nullptr when the mapping fails.
// Give it back with unmap_huge_pages(p, bytes).
void* map_huge_pages(std::uint64_t bytes);
void unmap_huge_pages(void* p, std::uint64_t bytes);

// The kernel's estimate of the memory available for new allocations without swapping
// (MemAvailable in /proc/meminfo); nullopt where it does not say.
std::optional<std::uint64_t> available_host_memory();

}  // namespace snapcache::util
