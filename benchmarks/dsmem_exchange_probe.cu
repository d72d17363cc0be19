// Distributed-shared-memory exchange probe (H200): how long do the two CTAs of a cluster take to trade a 64 x 64 f32
// block (16 KB each way) through distributed shared memory, over and over, one CTA per SM on every SM?
//
// Why (benchmarks/NOTES.md, session 23): the sketch of the next H=128 decode kernel splits the 576 dims over a CTA pair
// so that each CTA has room for five KV buffers; each 64-token tile then needs the peer's f32 partial logits (16 KB)
// before its softmax, so the exchange's latency sits in every consumer's chain (the S partial is ~576 tensor cycles).
// This measures that latency and rate before any kernel is written. Methods:
//   bulk:  the sender's thread 0 copies its 16 KB from its own shared memory into the peer's with one
//          cp.async.bulk.shared::cluster.shared::cta, completing on the peer's mbarrier by transaction count;
//   store: all 128 threads store their 128 B straight into the peer's shared memory (st.shared::cluster.v4) and arrive
//          on the peer's mbarrier with release semantics at cluster scope.
// Each iteration: wait until the peer gave back my slot in its memory, send, wait for the peer's block, read it (every
// value checked against what the peer wrote), give the slot back. Two slots each way.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a benchmarks/dsmem_exchange_probe.cu -o dsmem_exchange_probe
//   ./dsmem_exchange_probe [iterations]   # prints us and SM cycles per exchange, GB/s per SM each way, value errors
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

constexpr int kThreads = 128;
constexpr int kBytes = 64 * 64 * 4;             // one block of partial logits
constexpr int kPerThread = kBytes / 4 / kThreads;  // 32 floats
constexpr int kPadSmem = 160 * 1024;             // dynamic shared memory: one CTA per SM
enum Method { kBulk = 0, kStore = 1 };

struct Bars {
  uint64_t full[2];   // my receive slot s holds the peer's block (bulk: 1 arrival + kBytes; store: 128 remote arrivals)
  uint64_t empty[2];  // the peer read my block in its slot s (128 remote arrivals)
};

__device__ __forceinline__ uint32_t Smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ uint32_t Mapa(uint32_t a, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void ArriveRemote(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
__device__ __forceinline__ void WaitCluster(uint64_t* b, int parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(Smem(b)), "r"(parity) : "memory");
}
// The value element idx of the block CTA `rank` sends in iteration i (exact in f32).
__device__ __forceinline__ float Val(int rank, int i, int idx) { return (float)((rank * 7 + i * 13 + idx) & 1023); }

template <int kMethod>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads, 1)
    exchange(int iters, long long* cycles, int* errors, float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* send = reinterpret_cast<float*>(smem);                // [2][kBytes / 4] (bulk: the copies' sources)
  float* recv = reinterpret_cast<float*>(smem + 2 * kBytes);   // [2][kBytes / 4]
  Bars* bars = reinterpret_cast<Bars*>(smem + 4 * kBytes);
  const int t = threadIdx.x;
  const uint32_t rank = ClusterRank(), peer = rank ^ 1u;
  if (t == 0) {
    for (int s = 0; s < 2; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(Smem(&bars->full[s])), "r"(kMethod == kBulk ? 1 : kThreads));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(Smem(&bars->empty[s])), "r"(kThreads));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  ClusterSync();
  int bad = 0;
  float acc = 0.f;
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
    const int s = i & 1, u = i >> 1;
    if (kMethod == kBulk && t == 0)  // my receive slot expects the peer's bytes (they may land before this arrival)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(Smem(&bars->full[s])), "r"(kBytes) : "memory");
    if (u >= 1) WaitCluster(&bars->empty[s], (u - 1) & 1);  // the peer gave its slot s (my last block there) back
    if constexpr (kMethod == kBulk) {
      if (t == 0) asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");  // send[s]'s copy of i - 2 has read it
      asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
      float* dst = send + s * (kBytes / 4);
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) dst[k * kThreads + t] = Val(rank, i, k * kThreads + t);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> the bulk copy (async proxy)
      asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
      if (t == 0) {
        asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     ::"r"(Mapa(Smem(recv + s * (kBytes / 4)), peer)), "r"(Smem(dst)), "r"(kBytes),
                     "r"(Mapa(Smem(&bars->full[s]), peer)) : "memory");
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
      }
    } else {
      const uint32_t dst = Mapa(Smem(recv + s * (kBytes / 4)), peer);
#pragma unroll
      for (int k = 0; k < kPerThread / 4; ++k) {
        const int idx = (k * kThreads + t) * 4;
        asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + idx * 4), "f"(Val(rank, i, idx)),
                     "f"(Val(rank, i, idx + 1)), "f"(Val(rank, i, idx + 2)), "f"(Val(rank, i, idx + 3)) : "memory");
      }
      ArriveRemote(Mapa(Smem(&bars->full[s]), peer));
    }
    WaitCluster(&bars->full[s], u & 1);  // the peer's block of iteration i is in my slot s
    const float* src = recv + s * (kBytes / 4);
    if constexpr (kMethod == kBulk) {
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) {
        const float v = src[k * kThreads + t];
        bad += v != Val((int)peer, i, k * kThreads + t);
        acc += v;
      }
    } else {
#pragma unroll
      for (int k = 0; k < kPerThread / 4; ++k) {
        const int idx = (k * kThreads + t) * 4;
        const float4 v = *reinterpret_cast<const float4*>(src + idx);
        bad += (v.x != Val((int)peer, i, idx)) + (v.y != Val((int)peer, i, idx + 1)) + (v.z != Val((int)peer, i, idx + 2)) +
               (v.w != Val((int)peer, i, idx + 3));
        acc += v.x + v.y + v.z + v.w;
      }
    }
    // My reads of slot s come before the peer's next write into it (bulk: an async-proxy write).
    if constexpr (kMethod == kBulk) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    ArriveRemote(Mapa(Smem(&bars->empty[s]), peer));
  }
  const long long t1 = clock64();
  if constexpr (kMethod == kBulk)
    if (t == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  ClusterSync();  // the peer may still arrive on my barriers
  atomicAdd(errors, bad);
  if (t == 0) cycles[blockIdx.x] = t1 - t0;
  if (acc == -1.f) sink[blockIdx.x] = acc;  // keeps the reads
}

template <int kMethod>
static void Run(const char* name, int iters, int sms) {
  auto kern = exchange<kMethod>;
  const int smem = kPadSmem;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int ctas = sms & ~1;
  long long* cycles;
  int* errors;
  float* sink;
  CK(cudaMalloc(&cycles, ctas * sizeof(long long)));
  CK(cudaMalloc(&errors, sizeof(int)));
  CK(cudaMalloc(&sink, ctas * sizeof(float)));
  CK(cudaMemset(errors, 0, sizeof(int)));
  kern<<<ctas, kThreads, smem>>>(16, cycles, errors, sink);  // warm-up
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(errors, 0, sizeof(int)));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  kern<<<ctas, kThreads, smem>>>(iters, cycles, errors, sink);
  CK(cudaEventRecord(b));
  CK(cudaGetLastError());
  CK(cudaEventSynchronize(b));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, a, b));
  std::vector<long long> cyc(ctas);
  int err = 0;
  CK(cudaMemcpy(cyc.data(), cycles, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&err, errors, sizeof(int), cudaMemcpyDeviceToHost));
  double mean = 0;
  for (long long c : cyc) mean += (double)c / ctas;
  const double us = ms * 1e3 / iters;
  std::printf("%-5s CTAs %d, %d exchanges: %.3f us per exchange (kernel time), %.0f SM cycles per exchange (clock64, mean "
              "over CTAs), %.1f GB/s per SM each way, value errors %d\n",
              name, ctas, iters, us, mean / iters, kBytes / us * 1e-3, err);
  CK(cudaFree(cycles));
  CK(cudaFree(errors));
  CK(cudaFree(sink));
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  int sms = 0, dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s, %d SMs; block %d B f32 each way per exchange, 2 slots each way\n", prop.name, sms, kBytes);
  Run<kBulk>("bulk", iters, sms);
  Run<kStore>("store", iters, sms);
  return 0;
}
