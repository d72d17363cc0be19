// CUDA handlers of the Helix exchange custom calls (layout: exchange_common.h).
//   helix_sanitize_pack : partial_out [T,H,D], lse [T,H] f32, zero_kv_mask [T] -> payload [cp,T,Hc,W]
//   helix_combine       : payload [cp(src),T,Hc,W] -> out [T,Hc,D], lse [T,Hc] f32
//   helix_pack_all_to_all : sanitize + pack stored straight into every rank's received payload
//                         [cp(src),T,Hc,W] over NVLink (peer transport, single process; see below)
// Both are memory-bound byte movers: every thread moves one 16-byte chunk (rows are 16-byte aligned
// by construction), so they should run near copy bandwidth.
#include "xla/ffi/api/ffi.h"  // before any other CUDA header that could pull in CUTLASS

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <type_traits>
#include <mutex>
#include <string>
#include <utility>

#include "exchange_common.h"
#include "peer_rendezvous.h"

namespace ffi = xla::ffi;
using helix_exchange::CheckCombine;
using helix_exchange::CheckPack;
using helix_exchange::CombineShape;
using helix_exchange::PackShape;

namespace {

constexpr int kThreads = 256;

// Chunk i of the packed rows (row = token t, head h; out_chunks per row, the last one holding the
// LSE): its value after sanitizing, its head group g and its position in the group's [T, Hc] rows.
template <typename Index>
__device__ __forceinline__ uint4 PackChunk(const uint4* __restrict__ src, const float* __restrict__ lse,
                                           const bool* __restrict__ mask, Index i, Index heads, Index hc,
                                           Index in_chunks, Index* g, Index* t, Index* hh, Index* c) {
  const Index out_chunks = in_chunks + 1;
  const Index r = i / out_chunks;
  *c = i - r * out_chunks;
  *t = r / heads;
  const Index h = r - *t * heads;
  *g = h / hc;
  *hh = h - *g * hc;
  const bool m = mask[*t];
  if (*c < in_chunks) return m ? make_uint4(0u, 0u, 0u, 0u) : __ldg(src + r * in_chunks + *c);  // masked: never read
  return make_uint4(__float_as_uint(m ? -INFINITY : __ldg(lse + r)), 0u, 0u, 0u);
}

template <typename Index>
__global__ void SanitizePackKernel(const uint4* __restrict__ src, const float* __restrict__ lse,
                                   const bool* __restrict__ mask, uint4* __restrict__ dst, Index t_len,
                                   Index heads, Index hc, Index in_chunks) {
  const Index out_chunks = in_chunks + 1;  // + the chunk holding the LSE
  const Index n = t_len * heads * out_chunks;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index g, t, hh, c;
    const uint4 v = PackChunk(src, lse, mask, i, heads, hc, in_chunks, &g, &t, &hh, &c);
    dst[((g * t_len + t) * hc + hh) * out_chunks + c] = v;
  }
}

template <bool kBf16>
__device__ __forceinline__ void Accumulate(float* acc, uint4 v, float w) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
  if constexpr (kBf16) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      acc[2 * k] += w * __uint_as_float(u[k] << 16);
      acc[2 * k + 1] += w * __uint_as_float(u[k] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[k] += w * __uint_as_float(u[k]);
  }
}

template <bool kBf16>
__device__ __forceinline__ uint4 Pack(const float* acc) {
  uint32_t u[4];
  if constexpr (kBf16) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      __nv_bfloat162 b = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
      u[k] = *reinterpret_cast<uint32_t*>(&b);
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) u[k] = __float_as_uint(acc[k]);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

template <bool kBf16, typename Index>
__global__ void CombineKernel(const uint4* __restrict__ payload, uint4* __restrict__ out,
                              float* __restrict__ lse_out, int cp, Index rows, Index d_chunks) {
  constexpr int kPer = kBf16 ? 8 : 4;
  const Index in_chunks = d_chunks + 1;
  const Index n = rows * d_chunks;
  const float* lse_base = reinterpret_cast<const float*>(payload);
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    const Index r = i / d_chunks, c = i - r * d_chunks;
    // LSE of source s sits in the first 4 bytes of the row's last chunk (one uint4 = 4 floats).
    auto lse_at = [&](int s) { return __ldg(lse_base + ((Index(s) * rows + r) * in_chunks + d_chunks) * 4); };
    float mx = -INFINITY;
    for (int s = 0; s < cp; ++s) mx = fmaxf(mx, lse_at(s));
    if (!isfinite(mx)) mx = 0.f;  // all-empty row: keep exp() finite
    float total = 0.f;
    for (int s = 0; s < cp; ++s) total += __expf(lse_at(s) - mx);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    float acc[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
    for (int s = 0; s < cp; ++s) {
      const float w = __expf(lse_at(s) - mx) * inv;
      if (!(w > 0.f)) continue;  // empty partial: never touch its bytes (0 * NaN)
      Accumulate<kBf16>(acc, __ldg(payload + (Index(s) * rows + r) * in_chunks + c), w);
    }
    out[r * d_chunks + c] = Pack<kBf16>(acc);
    if (c == 0) lse_out[r] = total > 0.f ? mx + __logf(total) : -INFINITY;
  }
}

// Fixed small cp: every source's LSE and data chunk are loaded up front (one memory round trip
// instead of LSE-then-data); an empty source's data is loaded but never used (no 0 * NaN).
template <bool kBf16, int kCp, typename Index>
__global__ void CombineKernelFixed(const uint4* __restrict__ payload, uint4* __restrict__ out,
                                   float* __restrict__ lse_out, Index rows, Index d_chunks) {
  constexpr int kPer = kBf16 ? 8 : 4;
  const Index in_chunks = d_chunks + 1;
  const Index n = rows * d_chunks;
  const float* lse_base = reinterpret_cast<const float*>(payload);
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    const Index r = i / d_chunks, c = i - r * d_chunks;
    float l[kCp];
    uint4 v[kCp];
#pragma unroll
    for (int s = 0; s < kCp; ++s) {
      const Index row = (Index(s) * rows + r) * in_chunks;
      l[s] = __ldg(lse_base + (row + d_chunks) * 4);
      v[s] = __ldg(payload + row + c);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kCp; ++s) mx = fmaxf(mx, l[s]);
    if (!isfinite(mx)) mx = 0.f;
    float total = 0.f;
#pragma unroll
    for (int s = 0; s < kCp; ++s) {
      l[s] = __expf(l[s] - mx);
      total += l[s];
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    float acc[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
#pragma unroll
    for (int s = 0; s < kCp; ++s) {
      const float w = l[s] * inv;
      if (w > 0.f) Accumulate<kBf16>(acc, v[s], w);
    }
    out[r * d_chunks + c] = Pack<kBf16>(acc);
    if (c == 0) lse_out[r] = total > 0.f ? mx + __logf(total) : -INFINITY;
  }
}

unsigned Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1ll << 30) ? (1ll << 30) : b));
}

ffi::Error LaunchStatus(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(err));
  return ffi::Error::Success();
}

ffi::Error SanitizePackCuda(cudaStream_t stream, ffi::AnyBuffer o, ffi::Buffer<ffi::F32> lse,
                            ffi::Buffer<ffi::PRED> mask, ffi::Result<ffi::AnyBuffer> payload) {
  PackShape s{};
  if (auto e = CheckPack(o, lse.dimensions(), mask.dimensions(), *payload, &s); e.failure()) return e;
  const int64_t in_chunks = s.d * s.itemsize / 16;
  const int64_t n = s.t * s.h * (in_chunks + 1);
  if (n == 0) return ffi::Error::Success();
  auto* src = static_cast<const uint4*>(o.untyped_data());
  auto* dst = static_cast<uint4*>(payload->untyped_data());
  if (n < (1ll << 31)) {
    SanitizePackKernel<uint32_t><<<Blocks(n), kThreads, 0, stream>>>(
        src, lse.typed_data(), mask.typed_data(), dst, uint32_t(s.t), uint32_t(s.h), uint32_t(s.hc),
        uint32_t(in_chunks));
  } else {
    SanitizePackKernel<int64_t><<<Blocks(n), kThreads, 0, stream>>>(src, lse.typed_data(), mask.typed_data(), dst,
                                                                    s.t, s.h, s.hc, in_chunks);
  }
  return LaunchStatus("helix_sanitize_pack launch");
}

template <bool kBf16>
void LaunchCombine(cudaStream_t stream, const uint4* src, uint4* dst, float* lse, const CombineShape& s,
                   int64_t d_chunks) {
  const int64_t rows = s.t * s.hc, n = rows * d_chunks;
  const int64_t in_elems = s.cp * rows * (d_chunks + 1) * 4;  // float index into the payload
  if (in_elems < (1ll << 31) && (s.cp == 2 || s.cp == 4 || s.cp == 8)) {
    const uint32_t r32 = uint32_t(rows), d32 = uint32_t(d_chunks);
    if (s.cp == 2) CombineKernelFixed<kBf16, 2, uint32_t><<<Blocks(n), kThreads, 0, stream>>>(src, dst, lse, r32, d32);
    if (s.cp == 4) CombineKernelFixed<kBf16, 4, uint32_t><<<Blocks(n), kThreads, 0, stream>>>(src, dst, lse, r32, d32);
    if (s.cp == 8) CombineKernelFixed<kBf16, 8, uint32_t><<<Blocks(n), kThreads, 0, stream>>>(src, dst, lse, r32, d32);
  } else if (in_elems < (1ll << 31)) {
    CombineKernel<kBf16, uint32_t><<<Blocks(n), kThreads, 0, stream>>>(src, dst, lse, int(s.cp), uint32_t(rows),
                                                                      uint32_t(d_chunks));
  } else {
    CombineKernel<kBf16, int64_t><<<Blocks(n), kThreads, 0, stream>>>(src, dst, lse, int(s.cp), rows, d_chunks);
  }
}

ffi::Error CombineCuda(cudaStream_t stream, ffi::AnyBuffer payload, ffi::Result<ffi::AnyBuffer> out,
                       ffi::Result<ffi::Buffer<ffi::F32>> lse_out) {
  CombineShape s{};
  if (auto e = CheckCombine(payload, *out, lse_out->dimensions(), &s); e.failure()) return e;
  const int64_t d_chunks = s.d * s.itemsize / 16;
  if (s.t * s.hc * d_chunks == 0) return ffi::Error::Success();
  auto* src = static_cast<const uint4*>(payload.untyped_data());
  auto* dst = static_cast<uint4*>(out->untyped_data());
  if (s.itemsize == 2) {
    LaunchCombine<true>(stream, src, dst, lse_out->typed_data(), s, d_chunks);
  } else {
    LaunchCombine<false>(stream, src, dst, lse_out->typed_data(), s, d_chunks);
  }
  return LaunchStatus("helix_combine launch");
}


// ---- Peer transport (helix_pack_all_to_all) --------------------------------------------------
// After the host rendezvous (peer_rendezvous.h) every rank knows each peer's receive buffer and
// flag block. Block b of rank r pairs with block b of every peer (all ranks launch the same grid,
// <= kPeerBlocks blocks of kPeerThreads, one per SM, all resident):
//   arrive: r tells peer g "my stream reached this call" (so r's receive buffer is free: XLA may
//           have reused its memory for work earlier on r's stream) and waits for g's arrive;
//   stores: sanitize + pack, each row stored into its head group's rank (peer stores over NVLink);
//   done:   fence at system scope, tell each peer "my rows are in your buffer", wait for theirs,
//           so the kernels after this one on r's stream see every peer's rows.
// Flags hold the group's call count (gen), so they never need resetting. A wait that outlives
// kPeerWaitNs traps (a launch failure XLA reports) instead of hanging the GPU.
constexpr int kPeerBlocks = 512;   // the most blocks a launch may use (flag block layout)
constexpr int kPeerThreads = 512;
// Launch shape: HELIX_PEER_BLOCKS (default below; <= kPeerBlocks, all resident) and HELIX_PEER_UNROLL
// (1, 2 or 4 chunks per thread per step), read per call so one process can compare them. Every
// rank must see the same values (one process: one environment).
constexpr int kPeerDefaultBlocks = 256;    // measured best at T=512 (benchmarks/results/peer_a2a_sweep_*)
constexpr int kPeerDefaultUnroll = 1;       // 2 and 4: no faster

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
constexpr unsigned long long kPeerWaitNs = 60ull * 1000 * 1000 * 1000;
constexpr size_t kPeerFlagWords = 2 * helix_peer::kMaxRanks * kPeerBlocks;

struct PeerArgs {
  uint4* recv[helix_peer::kMaxRanks];       // each rank's received payload [cp(src), T, Hc, W]
  uint32_t* flags[helix_peer::kMaxRanks];   // each rank's flags: arrive[src][block], done[src][block]
  int rank, cp;
  uint32_t gen;
};

__device__ __forceinline__ int ArriveAt(int src, int block) { return src * kPeerBlocks + block; }
__device__ __forceinline__ int DoneAt(int src, int block) {
  return (helix_peer::kMaxRanks + src) * kPeerBlocks + block;
}

__device__ __forceinline__ void StoreRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void WaitFor(const uint32_t* p, uint32_t gen) {
  const unsigned long long start = GlobalTimer();
  while (static_cast<int32_t>(LoadAcquire(p) - gen) < 0) {
    if (GlobalTimer() - start > kPeerWaitNs) __trap();
  }
}

// Every block walks all rows in source order, so peer and own rows interleave and the local HBM
// traffic hides under the NVLink stores. (Tried: blocks split into own-group copiers and senders
// walking each peer's rows in destination order: no faster, results/peer_a2a_sweep_split_*.)
template <typename Index, int kUnroll>
__global__ void __launch_bounds__(kPeerThreads) PackAllToAllKernel(const uint4* __restrict__ src,
                                                               const float* __restrict__ lse,
                                                               const bool* __restrict__ mask, PeerArgs a,
                                                               Index t_len, Index heads, Index hc,
                                                               Index in_chunks) {
  const int b = blockIdx.x, g0 = threadIdx.x;
  const bool signaller = g0 < a.cp && g0 != a.rank;  // thread g talks to peer g
  if (signaller) {
    StoreRelease(a.flags[g0] + ArriveAt(a.rank, b), a.gen);
    WaitFor(a.flags[a.rank] + ArriveAt(g0, b), a.gen);
  }
  __syncthreads();
  const Index out_chunks = in_chunks + 1;
  const Index n = t_len * heads * out_chunks, stride = Index(gridDim.x) * blockDim.x;
  const Index rank = a.rank;
  // kUnroll chunks per thread per step, all loads before the stores.
  for (Index i0 = blockIdx.x * Index(blockDim.x) * kUnroll + threadIdx.x; i0 < n; i0 += stride * kUnroll) {
    uint4 v[kUnroll];
    uint4* dst[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const Index i = i0 + u * Index(blockDim.x);
      dst[u] = nullptr;
      if (i < n) {
        Index g, t, hh, c;
        v[u] = PackChunk(src, lse, mask, i, heads, hc, in_chunks, &g, &t, &hh, &c);
        dst[u] = a.recv[g] + ((rank * t_len + t) * hc + hh) * out_chunks + c;  // a peer's unless g == rank
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (dst[u] != nullptr) *dst[u] = v[u];
  }
  __threadfence_system();
  __syncthreads();
  if (signaller) {
    StoreRelease(a.flags[g0] + DoneAt(a.rank, b), a.gen);
    WaitFor(a.flags[a.rank] + DoneAt(g0, b), a.gen);
  }
}

// Per (group, rank) device state: the flag block (zeroed before it is ever published) and the
// call count. Peer access to every other device of the group is enabled once.
struct PeerDevice {
  uint32_t* flags = nullptr;
  uint64_t gen = 0;
};

ffi::Error SetUpPeerDevice(const helix_peer::Group& group, int ordinal, PeerDevice* dev) {
  int prev = 0;
  cudaGetDevice(&prev);
  auto fail = [&](const std::string& what, cudaError_t err) {
    cudaGetLastError();
    cudaSetDevice(prev);
    return ffi::Error::Internal("helix_pack_all_to_all on GPU " + std::to_string(ordinal) + ": " + what + " (" +
                                cudaGetErrorString(err) + "); use transport='collective'");
  };
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) return fail("cudaSetDevice", e);
  for (int peer : group.ordinals()) {
    if (peer == ordinal) continue;
    int can = 0;
    if (cudaError_t e = cudaDeviceCanAccessPeer(&can, ordinal, peer); e != cudaSuccess)
      return fail("cudaDeviceCanAccessPeer", e);
    if (!can) return fail("no peer access to GPU " + std::to_string(peer), cudaErrorPeerAccessUnsupported);
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
    } else if (e != cudaSuccess) {
      return fail("cudaDeviceEnablePeerAccess(" + std::to_string(peer) + ")", e);
    }
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, kPeerFlagWords * sizeof(uint32_t)); e != cudaSuccess)
    return fail("cudaMalloc of the flag block", e);
  cudaStream_t s = nullptr;  // a private stream: zeroing must finish before any peer can see the block
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
    return fail("cudaStreamCreate", e);
  cudaError_t e = cudaMemsetAsync(p, 0, kPeerFlagWords * sizeof(uint32_t), s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  if (e != cudaSuccess) return fail("zeroing the flag block", e);
  dev->flags = static_cast<uint32_t*>(p);
  cudaSetDevice(prev);
  return ffi::Error::Success();
}

ffi::Error PackAllToAllCuda(cudaStream_t stream, int32_t ordinal, ffi::RunId run, ffi::AnyBuffer o,
                            ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::PRED> mask,
                            ffi::Result<ffi::AnyBuffer> recv, ffi::Span<const int64_t> groups, int64_t cp,
                            double timeout_s) {
  PackShape s{};
  if (auto e = CheckPack(o, lse.dimensions(), mask.dimensions(), *recv, &s); e.failure()) return e;
  if (s.cp != cp) return ffi::Error::InvalidArgument("helix_pack_all_to_all: payload's cp differs from the groups'");
  helix_peer::Group* group = nullptr;
  int rank = 0;
  if (auto err = helix_peer::FindGroup(groups.begin(), static_cast<int64_t>(groups.size()), cp, ordinal, &group,
                                       &rank);
      !err.empty())
    return ffi::Error::InvalidArgument(err);
  const int64_t in_chunks = s.d * s.itemsize / 16;
  const int64_t n = s.t * s.h * (in_chunks + 1);
  if (n == 0) return ffi::Error::Success();  // every rank sees the same shapes: all skip alike

  static std::mutex mu;
  static auto* devices = new std::map<std::pair<const helix_peer::Group*, int>, PeerDevice>();
  helix_peer::Entry mine, all[helix_peer::kMaxRanks];
  {
    std::lock_guard<std::mutex> lk(mu);
    PeerDevice& dev = (*devices)[{group, rank}];
    if (dev.flags == nullptr) {
      if (auto e = SetUpPeerDevice(*group, ordinal, &dev); e.failure()) return e;
    }
    mine.flags = dev.flags;
    mine.gen = ++dev.gen;
  }
  mine.recv = recv->untyped_data();
  std::pair<int64_t, uint64_t> key;
  if (auto err = group->Publish(rank, run.run_id, mine, timeout_s, all, &key); !err.empty())
    return ffi::Error::Internal(err);
  group->Leave(key);
  PeerArgs a{};
  for (int g = 0; g < cp; ++g) {
    if (all[g].gen != mine.gen)
      return ffi::Error::Internal("helix_pack_all_to_all: the ranks' call counts differ (rank " +
                                  std::to_string(g) + " at " + std::to_string(all[g].gen) + ", rank " +
                                  std::to_string(rank) + " at " + std::to_string(mine.gen) +
                                  "): the group's programs are out of step");
    a.recv[g] = static_cast<uint4*>(all[g].recv);
    a.flags[g] = static_cast<uint32_t*>(all[g].flags);
  }
  a.rank = rank;
  a.cp = static_cast<int>(cp);
  a.gen = static_cast<uint32_t>(mine.gen);
  const int unroll = EnvInt("HELIX_PEER_UNROLL", kPeerDefaultUnroll);
  const int max_blocks = EnvInt("HELIX_PEER_BLOCKS", kPeerDefaultBlocks);
  if (unroll != 1 && unroll != 2 && unroll != 4)
    return ffi::Error::InvalidArgument("HELIX_PEER_UNROLL must be 1, 2 or 4");
  if (max_blocks < 1 || max_blocks > kPeerBlocks)
    return ffi::Error::InvalidArgument("HELIX_PEER_BLOCKS must be in [1, " + std::to_string(kPeerBlocks) + "]");
  const int64_t per_block = int64_t(kPeerThreads) * unroll;
  const int64_t want = (n + per_block - 1) / per_block;
  unsigned blocks = static_cast<unsigned>(want < max_blocks ? want : max_blocks);
  // Paired blocks wait for each other: never launch more than fit on the GPU at once.
  static std::mutex occ_mu;
  static std::map<std::pair<int, int>, int>* resident = new std::map<std::pair<int, int>, int>();
  {
    std::lock_guard<std::mutex> lk(occ_mu);
    int& cap = (*resident)[{ordinal, unroll}];
    if (cap == 0) {
      int sms = 0, per_sm = 0;
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal);
      const void* fn = unroll == 1   ? reinterpret_cast<const void*>(&PackAllToAllKernel<uint32_t, 1>)
                       : unroll == 2 ? reinterpret_cast<const void*>(&PackAllToAllKernel<uint32_t, 2>)
                                     : reinterpret_cast<const void*>(&PackAllToAllKernel<uint32_t, 4>);
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kPeerThreads, 0);
      cap = sms * per_sm;
      if (cap < 1) return LaunchStatus("helix_pack_all_to_all occupancy query");
    }
    if (blocks > static_cast<unsigned>(cap)) blocks = static_cast<unsigned>(cap);
  }
  auto* src = static_cast<const uint4*>(o.untyped_data());
  const int64_t recv_elems = s.cp * s.t * s.hc * (in_chunks + 1);
  auto launch = [&](auto index_tag, auto unroll_tag) {
    using Index = decltype(index_tag);
    PackAllToAllKernel<Index, decltype(unroll_tag)::value><<<blocks, kPeerThreads, 0, stream>>>(
        src, lse.typed_data(), mask.typed_data(), a, Index(s.t), Index(s.h), Index(s.hc), Index(in_chunks));
  };
  auto with_unroll = [&](auto index_tag) {
    if (unroll == 1) launch(index_tag, std::integral_constant<int, 1>{});
    if (unroll == 2) launch(index_tag, std::integral_constant<int, 2>{});
    if (unroll == 4) launch(index_tag, std::integral_constant<int, 4>{});
  };
  if (recv_elems < (1ll << 31) && n < (1ll << 31)) {
    with_unroll(uint32_t{});
  } else {
    with_unroll(int64_t{});
  }
  return LaunchStatus("helix_pack_all_to_all launch");
}
}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixSanitizePackCuda, SanitizePackCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()          // partial_out [T, H, D]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // lse [T, H]
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // zero_kv_mask [T]
                                  .Ret<ffi::AnyBuffer>());        // payload [cp, T, Hc, W]

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixCombineCuda, CombineCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()          // payload [cp, T, Hc, W]
                                  .Ret<ffi::AnyBuffer>()          // out [T, Hc, D]
                                  .Ret<ffi::Buffer<ffi::F32>>());  // lse [T, Hc]

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixPackAllToAllCuda, PackAllToAllCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Ctx<ffi::RunId>()
                                  .Arg<ffi::AnyBuffer>()          // partial_out [T, H, D]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // lse [T, H]
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // zero_kv_mask [T]
                                  .Ret<ffi::AnyBuffer>()          // received payload [cp(src), T, Hc, W]
                                  .Attr<ffi::Span<const int64_t>>("groups")  // [num_groups, cp] ordinals
                                  .Attr<int64_t>("cp")
                                  .Attr<double>("timeout_s"));
