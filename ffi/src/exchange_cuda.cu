// CUDA handlers of the Helix exchange custom calls (layout: exchange_common.h).
//   helix_sanitize_pack : partial_out [T,H,D], lse [T,H] f32, zero_kv_mask [T] -> payload [cp,T,Hc,W]
//   helix_combine       : payload [cp(src),T,Hc,W] -> out [T,Hc,D], lse [T,Hc] f32
//   helix_exchange_peer : the whole exchange for the GPUs of one process: sanitize + pack stored
//                         straight into the peers' receive buffers over NVLink, then the combine
//                         -> out [T,Hc,D], lse [T,Hc] (see the peer section below)
// Both are memory-bound byte movers: every thread moves one 16-byte chunk (rows are 16-byte aligned
// by construction), so they should run near copy bandwidth.
#include "xla/ffi/api/ffi.h"  // before any other CUDA header that could pull in CUTLASS

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "env_int.h"
#include "exchange_common.h"
#include "peer_rendezvous.h"

namespace ffi = xla::ffi;
using helix_exchange::CheckCombine;
using helix_exchange::CheckPack;
using helix_exchange::FindPeerExchange;
using helix_exchange::CombineShape;
using helix_exchange::PackShape;

namespace {

constexpr int kThreads = 256;

// Chunk c of packed row r (token t, out_chunks = in_chunks + 1 per row, the last holding the LSE),
// sanitized: a masked token gives (0, -inf) and its partial is never read.
template <typename Index>
__device__ __forceinline__ uint4 SanitizedChunk(const uint4* __restrict__ src, const float* __restrict__ lse,
                                                bool masked, Index r, Index c, Index in_chunks) {
  if (c < in_chunks) return masked ? make_uint4(0u, 0u, 0u, 0u) : __ldg(src + r * in_chunks + c);
  return make_uint4(__float_as_uint(masked ? -INFINITY : __ldg(lse + r)), 0u, 0u, 0u);
}

template <typename Index>
__global__ void SanitizePackKernel(const uint4* __restrict__ src, const float* __restrict__ lse,
                                   const bool* __restrict__ mask, uint4* __restrict__ dst, Index t_len,
                                   Index heads, Index hc, Index in_chunks) {
  const Index out_chunks = in_chunks + 1;  // + the chunk holding the LSE
  const Index n = t_len * heads * out_chunks;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    const Index r = i / out_chunks, c = i - r * out_chunks;
    const Index t = r / heads, h = r - t * heads;
    const Index g = h / hc, hh = h - g * hc;
    dst[((g * t_len + t) * hc + hh) * out_chunks + c] = SanitizedChunk(src, lse, mask[t], r, c, in_chunks);
  }
}

// ---- Peer primitives (helix_exchange_peer; see the peer section below) -----------------------
constexpr int kPeerBlocks = 512;    // the most send blocks a call may use (flag block layout)
constexpr int kPeerThreads = 512;
constexpr unsigned long long kPeerWaitNs = 60ull * 1000 * 1000 * 1000;
constexpr size_t kPeerFlagWords = size_t(helix_peer::kMaxRanks) * kPeerBlocks;

// done[src][block] = the group call count (gen) once send block `block` of rank src has stored its
// rows into this rank's buffer. Counts only grow, so flags never need resetting.
__device__ __forceinline__ int DoneAt(int src, int block) { return src * kPeerBlocks + block; }

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

// Spins until *p reaches gen; a wait that outlives kPeerWaitNs traps (a launch failure XLA
// reports) instead of hanging the GPU.
__device__ __forceinline__ void WaitFor(const uint32_t* p, uint32_t gen) {
  const unsigned long long start = GlobalTimer();
  while (static_cast<int32_t>(LoadAcquire(p) - gen) < 0) {
    if (GlobalTimer() - start > kPeerWaitNs) __trap();
  }
}

// The peer exchange's combine first waits until every peer's send blocks [0, blocks) have stored
// their rows for call `gen` into this rank's buffer, and reads its own head group straight from the
// partial output (the send kernel never copies it); flags == nullptr: plain combine.
struct PeerWait {
  const uint32_t* flags = nullptr;  // this rank's flag block
  uint32_t gen = 0;
  int blocks = 0, cp = 0, rank = 0;
  const uint4* own = nullptr;       // partial_out [T, H, D] of this rank
  const float* own_lse = nullptr;   // lse [T, H]
  const bool* mask = nullptr;       // zero_kv_mask [T]
  int64_t heads = 0, hc = 0;
};

__device__ __forceinline__ void WaitForPeers(const PeerWait& w) {
  if (w.flags == nullptr) return;
  for (int i = threadIdx.x; i < w.cp * w.blocks; i += blockDim.x) {
    const int src = i / w.blocks;
    if (src != w.rank) WaitFor(w.flags + DoneAt(src, i - src * w.blocks), w.gen);
  }
  __syncthreads();  // the acquires above order every thread's loads below
}

// Payload loads: the read-only path normally; L2 only (never a stale L1 line) for the peer
// exchange, whose buffer other GPUs wrote while this kernel may already have been running.
template <bool kPeer, typename T>
__device__ __forceinline__ T LoadPayload(const T* p) {
  if constexpr (kPeer) {
    return __ldcg(p);
  } else {
    return __ldg(p);
  }
}

// Source s of combined row r (token r / Hc, head (r % Hc) of this rank's group): its LSE and data
// chunk c, from the received payload, or for the peer exchange's own group from the partial output
// (sanitized here as the pack would: a masked token's LSE is -inf, so its data is never used).
template <typename Index>
__device__ __forceinline__ Index OwnRow(const PeerWait& w, Index r) {
  const Index hc = Index(w.hc), t = r / hc;
  return t * Index(w.heads) + Index(w.rank) * hc + (r - t * hc);
}

template <bool kPeer, typename Index>
__device__ __forceinline__ float SourceLse(const float* lse_base, const PeerWait& w, int s, Index rows, Index r,
                                           Index d_chunks) {
  if constexpr (kPeer) {
    if (s == w.rank) return w.mask[r / Index(w.hc)] ? -INFINITY : __ldg(w.own_lse + OwnRow(w, r));
  }
  return LoadPayload<kPeer>(lse_base + ((Index(s) * rows + r) * (d_chunks + 1) + d_chunks) * 4);
}

template <bool kPeer, typename Index>
__device__ __forceinline__ uint4 SourceChunk(const uint4* payload, const PeerWait& w, int s, Index rows, Index r,
                                             Index c, Index d_chunks) {
  if constexpr (kPeer) {
    if (s == w.rank) return __ldg(w.own + OwnRow(w, r) * d_chunks + c);
  }
  return LoadPayload<kPeer>(payload + (Index(s) * rows + r) * (d_chunks + 1) + c);
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

template <bool kBf16, bool kPeer, typename Index>
__global__ void CombineKernel(const uint4* __restrict__ payload, uint4* __restrict__ out,
                              float* __restrict__ lse_out, int cp, Index rows, Index d_chunks, PeerWait wait) {
  if constexpr (kPeer) WaitForPeers(wait);
  constexpr int kPer = kBf16 ? 8 : 4;
  const Index n = rows * d_chunks;
  const float* lse_base = reinterpret_cast<const float*>(payload);
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    const Index r = i / d_chunks, c = i - r * d_chunks;
    // LSE of source s sits in the first 4 bytes of the row's last chunk (one uint4 = 4 floats).
    auto lse_at = [&](int s) { return SourceLse<kPeer>(lse_base, wait, s, rows, r, d_chunks); };
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
      Accumulate<kBf16>(acc, SourceChunk<kPeer>(payload, wait, s, rows, r, c, d_chunks), w);
    }
    out[r * d_chunks + c] = Pack<kBf16>(acc);
    if (c == 0) lse_out[r] = total > 0.f ? mx + __logf(total) : -INFINITY;
  }
}

// Fixed small cp: every source's LSE and data chunk are loaded up front (one memory round trip
// instead of LSE-then-data); an empty source's data is loaded but never used (no 0 * NaN).
template <bool kBf16, int kCp, bool kPeer, typename Index>
__global__ void CombineKernelFixed(const uint4* __restrict__ payload, uint4* __restrict__ out,
                                   float* __restrict__ lse_out, Index rows, Index d_chunks, PeerWait wait) {
  if constexpr (kPeer) WaitForPeers(wait);
  constexpr int kPer = kBf16 ? 8 : 4;
  const Index n = rows * d_chunks;
  const float* lse_base = reinterpret_cast<const float*>(payload);
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    const Index r = i / d_chunks, c = i - r * d_chunks;
    float l[kCp];
    uint4 v[kCp];
#pragma unroll
    for (int s = 0; s < kCp; ++s) {
      l[s] = SourceLse<kPeer>(lse_base, wait, s, rows, r, d_chunks);
      v[s] = SourceChunk<kPeer>(payload, wait, s, rows, r, c, d_chunks);
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

// kPeer = false: helix_combine (wait unused); true: the peer exchange's combine (waits for the peers'
// rows, reads its own group from the partial output; its grid is capped so each block's flag poll is
// paid a bounded number of times).
template <bool kBf16, bool kPeer>
void LaunchCombine(cudaStream_t stream, const uint4* src, uint4* dst, float* lse, const CombineShape& s,
                   int64_t d_chunks, const PeerWait& wait) {
  const int64_t rows = s.t * s.hc, n = rows * d_chunks;
  const int64_t in_elems = s.cp * rows * (d_chunks + 1) * 4;  // float index into the payload
  const unsigned blocks = kPeer ? std::min(Blocks(n), 8u * 132u) : Blocks(n);
  if (in_elems < (1ll << 31) && (s.cp == 2 || s.cp == 4 || s.cp == 8)) {
    const uint32_t r32 = uint32_t(rows), d32 = uint32_t(d_chunks);
    if (s.cp == 2)
      CombineKernelFixed<kBf16, 2, kPeer, uint32_t><<<blocks, kThreads, 0, stream>>>(src, dst, lse, r32, d32, wait);
    if (s.cp == 4)
      CombineKernelFixed<kBf16, 4, kPeer, uint32_t><<<blocks, kThreads, 0, stream>>>(src, dst, lse, r32, d32, wait);
    if (s.cp == 8)
      CombineKernelFixed<kBf16, 8, kPeer, uint32_t><<<blocks, kThreads, 0, stream>>>(src, dst, lse, r32, d32, wait);
  } else if (in_elems < (1ll << 31)) {
    CombineKernel<kBf16, kPeer, uint32_t><<<blocks, kThreads, 0, stream>>>(src, dst, lse, int(s.cp), uint32_t(rows),
                                                                          uint32_t(d_chunks), wait);
  } else {
    CombineKernel<kBf16, kPeer, int64_t><<<blocks, kThreads, 0, stream>>>(src, dst, lse, int(s.cp), rows, d_chunks,
                                                                         wait);
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
    LaunchCombine<true, false>(stream, src, dst, lse_out->typed_data(), s, d_chunks, PeerWait{});
  } else {
    LaunchCombine<false, false>(stream, src, dst, lse_out->typed_data(), s, d_chunks, PeerWait{});
  }
  return LaunchStatus("helix_combine launch");
}


// ---- Peer exchange (helix_exchange_peer) -------------------------------------------------------
// The whole exchange of one rank in one call, for the GPUs of one process:
//   send    : sanitize + pack of the peers' head groups, each row stored straight into its group's
//             rank's receive buffer (peer stores over NVLink), then fence at system scope and set
//             done[rank][block] = gen in every peer's flag block. No waiting.
//   combine : wait until done[src][block] == gen for every peer and send block, then the LSE combine
//             of the peers' rows in this rank's buffer with its own group's rows, read straight from
//             the partial output, into XLA's outputs.
// Receive buffers are the library's, two per (group, rank), used alternately (slot gen % 2). That is
// what makes a "my buffer is free" handshake unnecessary: a peer writes slot s for call gen only
// after its own combine of call gen-1 saw this rank's done flags of gen-1, which this rank sets
// after its combine of gen-2 — the last reader of slot s — has finished (stream order).
// Pointers to the peers' buffers and flag blocks come from the host rendezvous (peer_rendezvous.h).
constexpr int kPeerDefaultBlocks = 256;  // HELIX_PEER_BLOCKS; measured best (results/peer_a2a_sweep_*)

// The value of env var `name` as a whole decimal integer; `fallback` where it is unset or empty, -1 where it is anything
// else ("128x", "abc", out of int range), so the caller's range check names the variable instead of using a prefix.
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  int n;
  return helix_ffi::ParseWholeInt(v, INT_MIN, INT_MAX, &n) ? n : -1;
}

struct PeerArgs {
  uint4* recv[helix_peer::kMaxRanks];       // each rank's receive slot for this call [cp(src), T, Hc, W]
  uint32_t* flags[helix_peer::kMaxRanks];   // each rank's flag block
  int rank, cp;
  uint32_t gen;
};

// Only the peers' head groups travel (the combine reads the own group from the partial output):
// chunk i walks the source rows of token t with the own group's heads skipped, so consecutive
// threads store consecutive chunks of one destination range (NVLink sees long aligned runs).
template <typename Index>
__global__ void __launch_bounds__(kPeerThreads) PeerSendKernel(const uint4* __restrict__ src,
                                                           const float* __restrict__ lse,
                                                           const bool* __restrict__ mask, PeerArgs a,
                                                           Index t_len, Index heads, Index hc, Index in_chunks) {
  const Index out_chunks = in_chunks + 1, sent_heads = heads - hc;
  const Index n = t_len * sent_heads * out_chunks, stride = Index(gridDim.x) * blockDim.x;
  const Index rank = a.rank, own_first = rank * hc;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const Index rr = i / out_chunks, c = i - rr * out_chunks;
    const Index t = rr / sent_heads, hp = rr - t * sent_heads;
    const Index h = hp < own_first ? hp : hp + hc;                 // skip the own group
    const Index g = h / hc, hh = h - g * hc, r = t * heads + h;
    a.recv[g][((rank * t_len + t) * hc + hh) * out_chunks + c] = SanitizedChunk(src, lse, mask[t], r, c, in_chunks);
  }
  __threadfence_system();
  __syncthreads();
  const int g = threadIdx.x;
  if (g < a.cp && g != a.rank) StoreRelease(a.flags[g] + DoneAt(a.rank, blockIdx.x), a.gen);
}

// Per (group, rank) device state: flag block (zeroed before it is ever published), the two
// receive slots, the call count. Peer access to the group's other devices is enabled once.
struct PeerDevice {
  uint32_t* flags = nullptr;
  void* slot[2] = {nullptr, nullptr};
  size_t slot_bytes = 0;
  uint64_t gen = 0;
};

ffi::Error PeerError(int ordinal, const std::string& what, cudaError_t err) {
  cudaGetLastError();
  return ffi::Error::Internal("helix_exchange_peer on GPU " + std::to_string(ordinal) + ": " + what + " (" +
                              cudaGetErrorString(err) + "); use transport='collective'");
}

// Runs with `ordinal` current (the caller restores the previous device).
ffi::Error SetUpPeerDevice(const helix_peer::Group& group, int ordinal, PeerDevice* dev) {
  for (int peer : group.ordinals()) {
    if (peer == ordinal) continue;
    int can = 0;
    if (cudaError_t e = cudaDeviceCanAccessPeer(&can, ordinal, peer); e != cudaSuccess)
      return PeerError(ordinal, "cudaDeviceCanAccessPeer", e);
    if (!can) return PeerError(ordinal, "no peer access to GPU " + std::to_string(peer), cudaErrorPeerAccessUnsupported);
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
    } else if (e != cudaSuccess) {
      return PeerError(ordinal, "cudaDeviceEnablePeerAccess(" + std::to_string(peer) + ")", e);
    }
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, kPeerFlagWords * sizeof(uint32_t)); e != cudaSuccess)
    return PeerError(ordinal, "cudaMalloc of the flag block", e);
  cudaStream_t s = nullptr;  // a private stream: zeroing must finish before any peer can see the block
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
    return PeerError(ordinal, "cudaStreamCreate", e);
  cudaError_t e = cudaMemsetAsync(p, 0, kPeerFlagWords * sizeof(uint32_t), s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  if (e != cudaSuccess) return PeerError(ordinal, "zeroing the flag block", e);
  dev->flags = static_cast<uint32_t*>(p);
  return ffi::Error::Success();
}

// Grows both slots to hold `bytes` (next power of two). Old slots are not freed: kernels in flight
// on this GPU or a peer may still use them; growth happens once per new largest shape.
ffi::Error GrowSlots(int ordinal, size_t bytes, PeerDevice* dev) {
  if (dev->slot_bytes >= bytes) return ffi::Error::Success();
  size_t cap = 1 << 20;
  while (cap < bytes) cap <<= 1;
  for (void*& slot : dev->slot) {
    if (cudaError_t e = cudaMalloc(&slot, cap); e != cudaSuccess)
      return PeerError(ordinal, "cudaMalloc of a " + std::to_string(cap) + "-byte receive buffer", e);
  }
  dev->slot_bytes = cap;
  return ffi::Error::Success();
}

ffi::Error ExchangePeerCuda(cudaStream_t stream, int32_t ordinal, ffi::RunId run, ffi::AnyBuffer o,
                            ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::PRED> mask, ffi::Result<ffi::AnyBuffer> out,
                            ffi::Result<ffi::Buffer<ffi::F32>> lse_out, ffi::Span<const int64_t> groups, int64_t cp,
                            double timeout_s) {
  PackShape s{};
  helix_peer::Group* group = nullptr;
  int rank = 0;
  if (auto e = FindPeerExchange(o, lse.dimensions(), mask.dimensions(), *out, lse_out->dimensions(), groups, cp,
                                ordinal, &s, &group, &rank);
      e.failure())
    return e;
  const int64_t in_chunks = s.d * s.itemsize / 16;
  const int64_t n = s.t * (s.h - s.hc) * (in_chunks + 1);    // chunks sent
  if (s.t * s.h == 0) return ffi::Error::Success();  // every rank sees the same shapes: all skip alike
  const int max_blocks = EnvInt("HELIX_PEER_BLOCKS", kPeerDefaultBlocks);
  if (max_blocks < 1 || max_blocks > kPeerBlocks)
    return ffi::Error::InvalidArgument("HELIX_PEER_BLOCKS must be an integer in [1, " + std::to_string(kPeerBlocks) + "]");
  const size_t slot_bytes = size_t(s.cp * s.t * s.hc * s.w * s.itemsize);

  static std::mutex mu;
  static auto* devices = new std::map<std::pair<const helix_peer::Group*, int>, PeerDevice>();
  helix_peer::Entry mine, all[helix_peer::kMaxRanks];
  const uint32_t* own_flags = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu);
    PeerDevice& dev = (*devices)[{group, rank}];
    if (dev.flags == nullptr || dev.slot_bytes < slot_bytes) {
      int prev = 0;
      cudaGetDevice(&prev);
      if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) return PeerError(ordinal, "cudaSetDevice", e);
      ffi::Error err = dev.flags == nullptr ? SetUpPeerDevice(*group, ordinal, &dev) : ffi::Error::Success();
      if (!err.failure()) err = GrowSlots(ordinal, slot_bytes, &dev);
      cudaSetDevice(prev);
      if (err.failure()) return err;
    }
    mine.gen = ++dev.gen;
    mine.flags = dev.flags;
    mine.recv = dev.slot[mine.gen & 1];
    own_flags = dev.flags;
  }
  std::pair<int64_t, uint64_t> key;
  if (auto err = group->Publish(rank, run.run_id, mine, timeout_s, all, &key); !err.empty())
    return ffi::Error::Internal(err);
  group->Leave(key);
  PeerArgs a{};
  for (int g = 0; g < cp; ++g) {
    if (all[g].gen != mine.gen)
      return ffi::Error::Internal("helix_exchange_peer: the ranks' call counts differ (rank " + std::to_string(g) +
                                  " at " + std::to_string(all[g].gen) + ", rank " + std::to_string(rank) + " at " +
                                  std::to_string(mine.gen) + "): the group's programs are out of step");
    a.recv[g] = static_cast<uint4*>(all[g].recv);
    a.flags[g] = static_cast<uint32_t*>(all[g].flags);
  }
  a.rank = rank;
  a.cp = static_cast<int>(cp);
  a.gen = static_cast<uint32_t>(mine.gen);
  // Same grid on every rank (same shapes): the combine waits for exactly these send blocks.
  const int64_t want = (n + kPeerThreads - 1) / kPeerThreads;
  const int blocks = static_cast<int>(std::max<int64_t>(1, want < max_blocks ? want : max_blocks));
  auto* src = static_cast<const uint4*>(o.untyped_data());
  const int64_t recv_elems = s.cp * s.t * s.hc * (in_chunks + 1);
  if (recv_elems < (1ll << 31) && s.t * s.h * (in_chunks + 1) < (1ll << 31)) {
    PeerSendKernel<uint32_t><<<blocks, kPeerThreads, 0, stream>>>(src, lse.typed_data(), mask.typed_data(), a,
                                                                  uint32_t(s.t), uint32_t(s.h), uint32_t(s.hc),
                                                                  uint32_t(in_chunks));
  } else {
    PeerSendKernel<int64_t><<<blocks, kPeerThreads, 0, stream>>>(src, lse.typed_data(), mask.typed_data(), a, s.t,
                                                                 s.h, s.hc, in_chunks);
  }
  if (auto e = LaunchStatus("helix_exchange_peer send launch"); e.failure()) return e;
  const CombineShape cs{s.cp, s.t, s.hc, s.d, s.w, s.itemsize};
  const PeerWait wait{own_flags, a.gen, blocks, a.cp, rank, src, lse.typed_data(), mask.typed_data(), s.h, s.hc};
  auto* recv = static_cast<const uint4*>(mine.recv);
  auto* dst = static_cast<uint4*>(out->untyped_data());
  if (s.itemsize == 2) {
    LaunchCombine<true, true>(stream, recv, dst, lse_out->typed_data(), cs, in_chunks, wait);
  } else {
    LaunchCombine<false, true>(stream, recv, dst, lse_out->typed_data(), cs, in_chunks, wait);
  }
  return LaunchStatus("helix_exchange_peer combine launch");
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixExchangePeerCuda, ExchangePeerCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Ctx<ffi::RunId>()
                                  .Arg<ffi::AnyBuffer>()           // partial_out [T, H, D]
                                  .Arg<ffi::Buffer<ffi::F32>>()    // lse [T, H]
                                  .Arg<ffi::Buffer<ffi::PRED>>()   // zero_kv_mask [T]
                                  .Ret<ffi::AnyBuffer>()           // out [T, Hc, D] (this rank's head group)
                                  .Ret<ffi::Buffer<ffi::F32>>()    // lse [T, Hc]
                                  .Attr<ffi::Span<const int64_t>>("groups")  // [num_groups, cp] ordinals
                                  .Attr<int64_t>("cp")
                                  .Attr<double>("timeout_s"));

// For the Python side's transport choice (ctypes, host only): 1 when every device of `ordinals` can
// access every other one's memory directly (NVLink or PCIe peer-to-peer), else 0.
extern "C" int HelixPeerAccessible(const int64_t* ordinals, int n) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, static_cast<int>(ordinals[i]), static_cast<int>(ordinals[j])) != cudaSuccess) {
        cudaGetLastError();
        return 0;
      }
      if (!can) return 0;
    }
  }
  return 1;
}
