// NVLink transport probe for the Helix all-to-all (issue #5): how fast can SMs move bytes between
// two GPUs of one host, against the copy engines and a local copy?
//
//   push : kernel on GPU a reads its own buffer and stores 16-byte vectors into GPU b's buffer
//   pull : kernel on GPU a loads from GPU b's buffer and stores locally
//   ce   : cudaMemcpyPeerAsync (copy engines)
// each one way (GPU0 -> GPU1 only) and both ways at once (each GPU sends to the other), over a
// sweep of grid sizes. GB/s = bytes leaving one GPU / time per direction (event time on each
// device, the larger of the two when both run). Bytes default to the T=512 exchange: 34078720.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a benchmarks/peer_copy_probe.cu -o peer_probe
//   ./peer_probe [bytes]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

template <int kUnroll>
__global__ void Copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

struct Dev {
  uint4 *src, *dst;
  cudaStream_t s;
  cudaEvent_t e0, e1;
};

enum Mode { kLocal, kPush, kPull, kCe };

// Runs `reps` copies on each participating GPU, returns ms per copy (max over devices).
float Run(std::vector<Dev>& d, Mode mode, bool both, int blocks, int threads, int unroll, long long n16,
          int reps) {
  const int ndev = both ? 2 : 1;
  auto launch = [&](int a) {
    const int b = 1 - a;
    CK(cudaSetDevice(a));
    const uint4* src = mode == kPull ? d[b].src : d[a].src;
    uint4* dst = mode == kPush ? d[b].dst : d[a].dst;
    if (mode == kCe) {
      CK(cudaMemcpyPeerAsync(d[b].dst, b, d[a].src, a, n16 * 16, d[a].s));
    } else if (unroll == 4) {
      Copy16<4><<<blocks, threads, 0, d[a].s>>>(src, dst, n16);
    } else {
      Copy16<1><<<blocks, threads, 0, d[a].s>>>(src, dst, n16);
    }
  };
  for (int a = 0; a < ndev; ++a) launch(a);  // warm-up
  for (int a = 0; a < ndev; ++a) { CK(cudaSetDevice(a)); CK(cudaStreamSynchronize(d[a].s)); }
  for (int a = 0; a < ndev; ++a) { CK(cudaSetDevice(a)); CK(cudaEventRecord(d[a].e0, d[a].s)); }
  for (int r = 0; r < reps; ++r)
    for (int a = 0; a < ndev; ++a) launch(a);
  for (int a = 0; a < ndev; ++a) { CK(cudaSetDevice(a)); CK(cudaEventRecord(d[a].e1, d[a].s)); }
  float worst = 0.f;
  for (int a = 0; a < ndev; ++a) {
    CK(cudaSetDevice(a));
    CK(cudaEventSynchronize(d[a].e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, d[a].e0, d[a].e1));
    worst = std::max(worst, ms / reps);
  }
  CK(cudaGetLastError());
  return worst;
}

int main(int argc, char** argv) {
  long long bytes = argc > 1 ? atoll(argv[1]) : 34078720ll;
  bytes = (bytes + 15) / 16 * 16;
  const long long n16 = bytes / 16;
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) { std::printf("need 2 GPUs, have %d\n", ndev); return 1; }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<Dev> d(2);
  for (int a = 0; a < 2; ++a) {
    CK(cudaSetDevice(a));
    int can = 0;
    CK(cudaDeviceCanAccessPeer(&can, a, 1 - a));
    if (!can) { std::printf("no peer access %d->%d\n", a, 1 - a); return 1; }
    CK(cudaDeviceEnablePeerAccess(1 - a, 0));
    CK(cudaMalloc(&d[a].src, bytes));
    CK(cudaMalloc(&d[a].dst, bytes));
    CK(cudaMemset(d[a].src, 0x3c + a, bytes));
    CK(cudaStreamCreateWithFlags(&d[a].s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&d[a].e0));
    CK(cudaEventCreate(&d[a].e1));
  }
  std::printf("peer probe: %lld bytes per direction, %d SMs\n", bytes, sms);
  const char* names[] = {"local", "push", "pull", "ce"};
  const int reps = 20;
  for (int mode = kLocal; mode <= kCe; ++mode) {
    for (int both = 0; both < 2; ++both) {
      if (mode == kLocal && both) continue;
      if (mode == kCe) {
        float ms = Run(d, Mode(mode), both, 0, 0, 0, n16, reps);
        std::printf("%-5s %-4s ce                      %8.4f ms %7.1f GB/s\n", names[mode], both ? "2way" : "1way",
                    ms, bytes / ms / 1e6);
        continue;
      }
      for (int unroll : {1, 4}) {
        for (int bpsm : {1, 2, 4}) {
          for (int threads : {512, 1024}) {
            if (threads == 1024 && bpsm > 2) continue;
            const int blocks = sms * bpsm;
            float ms = Run(d, Mode(mode), both, blocks, threads, unroll, n16, reps);
            std::printf("%-5s %-4s blocks=%4d thr=%4d u=%d  %8.4f ms %7.1f GB/s\n", names[mode],
                        both ? "2way" : "1way", blocks, threads, unroll, ms, bytes / ms / 1e6);
          }
        }
      }
    }
  }
  // Data check of the last push (both ways) so a fast number is not a broken copy.
  Run(d, kPush, true, sms, 512, 4, n16, 1);
  for (int a = 0; a < 2; ++a) {
    std::vector<unsigned char> h(4096);
    CK(cudaSetDevice(a));
    CK(cudaMemcpy(h.data(), reinterpret_cast<char*>(d[a].dst) + bytes - 4096, 4096, cudaMemcpyDeviceToHost));
    const unsigned char want = 0x3c + (1 - a);
    const bool ok = std::all_of(h.begin(), h.end(), [&](unsigned char c) { return c == want; });
    std::printf("check dst on GPU%d: %s\n", a, ok ? "ok" : "WRONG");
  }
  return 0;
}
