// CUDA handlers of the Helix exchange custom calls (layout: exchange_common.h).
//   helix_sanitize_pack : partial_out [T,H,D], lse [T,H] f32, zero_kv_mask [T] -> payload [cp,T,Hc,W]
//   helix_combine       : payload [cp(src),T,Hc,W] -> out [T,Hc,D], lse [T,Hc] f32
// Both are memory-bound byte movers: every thread moves one 16-byte chunk (rows are 16-byte aligned
// by construction), so they should run near copy bandwidth.
#include "xla/ffi/api/ffi.h"  // before any other CUDA header that could pull in CUTLASS

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "exchange_common.h"

namespace ffi = xla::ffi;
using helix_exchange::CheckCombine;
using helix_exchange::CheckPack;
using helix_exchange::CombineShape;
using helix_exchange::PackShape;

namespace {

constexpr int kThreads = 256;

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
    const bool m = mask[t];
    uint4 v;
    if (c < in_chunks) {
      v = m ? make_uint4(0u, 0u, 0u, 0u) : __ldg(src + r * in_chunks + c);  // masked: never read garbage
    } else {
      v = make_uint4(__float_as_uint(m ? -INFINITY : __ldg(lse + r)), 0u, 0u, 0u);
    }
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
