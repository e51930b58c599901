// The two ways to lend device memory to another process, measured side by side on one GPU: CUDA
// virtual memory management with POSIX file-descriptor handles (what the donor uses) and legacy
// cudaIpcGetMemHandle. A forked consumer receives 1 GiB, 16 GiB and 64 GiB (as four 16 GiB
// allocations) both ways and times importing and mapping them; it checks a word written by the
// exporter. Needs a GPU; prints one line per measurement. See docs/gpu-retention.md.
//
//   snapcache_cuda_ipc_bench
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cstdint>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char* s; cuGetErrorString(r, &s); std::printf("[%d] %s failed: %s\n", getpid(), #x, s); return 1; } } while (0)
#define RK(x) do { cudaError_t r = (x); if (r != cudaSuccess) { std::printf("[%d] %s failed: %s\n", getpid(), #x, cudaGetErrorString(r)); return 1; } } while (0)
static int send_fds(int sock, const int* fds, int n, const void* buf, size_t len) {
  msghdr m{}; iovec io{const_cast<void*>(buf), len}; m.msg_iov = &io; m.msg_iovlen = 1;
  std::vector<char> c(CMSG_SPACE(sizeof(int) * n)); if (n) { m.msg_control = c.data(); m.msg_controllen = c.size();
  cmsghdr* h = CMSG_FIRSTHDR(&m); h->cmsg_level = SOL_SOCKET; h->cmsg_type = SCM_RIGHTS; h->cmsg_len = CMSG_LEN(sizeof(int) * n);
  std::memcpy(CMSG_DATA(h), fds, sizeof(int) * n); }
  return sendmsg(sock, &m, 0) < 0 ? -1 : 0;
}
static int recv_fds(int sock, int* fds, int n, void* buf, size_t len) {
  msghdr m{}; iovec io{buf, len}; m.msg_iov = &io; m.msg_iovlen = 1;
  std::vector<char> c(CMSG_SPACE(sizeof(int) * (n ? n : 1))); m.msg_control = c.data(); m.msg_controllen = c.size();
  if (recvmsg(sock, &m, MSG_WAITALL) < 0) return -1;
  if (n) { cmsghdr* h = CMSG_FIRSTHDR(&m); if (!h) return -2; std::memcpy(fds, CMSG_DATA(h), sizeof(int) * n); }
  return 0;
}
struct Msg { size_t size; int n; cudaIpcMemHandle_t legacy; };
int child(int sock) {
  double t0 = now();
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  std::printf("child init %.1f ms\n", (now() - t0) * 1e3);
  ucred cr{}; socklen_t cl = sizeof cr; getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &cl);
  std::printf("child peer pid %d uid %d\n", cr.pid, cr.uid);
  for (int round = 0; round < 3; ++round) {
    Msg msg{}; int fds[8]; if (recv_fds(sock, fds, 0, &msg, sizeof msg) < 0) { std::puts("recv hdr failed"); return 1; }
    char x; if (recv_fds(sock, fds, msg.n, &x, 1) < 0) { std::puts("recv fds failed"); return 1; }
    double a = now();
    CUmemAllocationProp prop{}; prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUdeviceptr base; CK(cuMemAddressReserve(&base, msg.size * msg.n, 0, 0, 0));
    for (int i = 0; i < msg.n; ++i) {
      CUmemGenericAllocationHandle h; CK(cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fds[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      CK(cuMemMap(base + i * msg.size, msg.size, 0, h, 0)); CK(cuMemRelease(h)); close(fds[i]);
    }
    CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(base, msg.size * msg.n, &acc, 1));
    double b = now();
    uint32_t v[2]; CK(cuMemcpyDtoH(v, base + msg.size * msg.n - 8, 8));
    std::printf("child VMM import %d x %zu MiB: %.2f ms, last word %08x (expect %08x)\n", msg.n, msg.size >> 20, (b - a) * 1e3, v[1], 0xabcd0000u + round);
    double c = now(); void* p = nullptr; cudaError_t e = cudaIpcOpenMemHandle(&p, msg.legacy, cudaIpcMemLazyEnablePeerAccess);
    double d = now();
    if (e != cudaSuccess) std::printf("child legacy open failed: %s\n", cudaGetErrorString(e));
    else { uint32_t w; cudaMemcpy(&w, (char*)p + msg.size - 4, 4, cudaMemcpyDeviceToHost); std::printf("child legacy open %zu MiB: %.2f ms word %08x\n", msg.size >> 20, (d - c) * 1e3, w); cudaIpcCloseMemHandle(p); }
    CK(cuMemUnmap(base, msg.size * msg.n)); CK(cuMemAddressFree(base, msg.size * msg.n));
    char ok = 1; send_fds(sock, nullptr, 0, &ok, 1);
  }
  return 0;
}
int main() {
  int sv[2]; socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  pid_t pid = fork();
  if (pid == 0) { close(sv[0]); return child(sv[1]); }
  close(sv[1]); int sock = sv[0];
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  int vmm = 0, fdok = 0; cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  cuDeviceGetAttribute(&fdok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
  std::printf("vmm %d posix fd %d\n", vmm, fdok);
  CUuuid uuid; cuDeviceGetUuid(&uuid, dev); std::printf("uuid "); for (int i = 0; i < 16; ++i) std::printf("%02x", (unsigned char)uuid.bytes[i]); std::puts("");
  CUmemAllocationProp prop{}; prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0; CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)); 
  size_t rec = 0; CK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  std::printf("granularity %zu recommended %zu\n", gran, rec);
  size_t sizes[3] = {1ull << 30, 16ull << 30, 16ull << 30}; int counts[3] = {1, 1, 4};
  for (int round = 0; round < 3; ++round) {
    size_t size = sizes[round]; int n = counts[round];
    double a = now();
    std::vector<int> fds(n); CUdeviceptr base; CK(cuMemAddressReserve(&base, size * n, 0, 0, 0));
    for (int i = 0; i < n; ++i) {
      CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, size, &prop, 0));
      CK(cuMemExportToShareableHandle(&fds[i], h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      CK(cuMemMap(base + i * size, size, 0, h, 0)); CK(cuMemRelease(h));
    }
    CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(base, size * n, &acc, 1));
    double b = now();
    CK(cuMemsetD32(base + size * n - 4, 0xabcd0000u + round, 1));
    void* lp; RK(cudaMalloc(&lp, size)); RK(cudaMemset((char*)lp + size - 4, 0x5a, 4));
    Msg msg{size, n, {}}; double c = now(); RK(cudaIpcGetMemHandle(&msg.legacy, lp)); double d = now(); cudaDeviceSynchronize();
    std::printf("donor VMM create+map %d x %zu MiB: %.1f ms; legacy get handle %.2f ms\n", n, size >> 20, (b - a) * 1e3, (d - c) * 1e3);
    send_fds(sock, nullptr, 0, &msg, sizeof msg); send_fds(sock, fds.data(), n, "x", 1);
    char ok; recv_fds(sock, nullptr, 0, &ok, 1);
    for (int f : fds) close(f);
    CK(cuMemUnmap(base, size * n)); CK(cuMemAddressFree(base, size * n)); cudaFree(lp);
  }
  int st; waitpid(pid, &st, 0); std::printf("child exit %d\n", WEXITSTATUS(st));
  // fingerprint: D2H 1 GiB into pinned
  return 0;
}
