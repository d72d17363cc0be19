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
#include <vector>

#include "exchange_common.h"

namespace ffi = xla::ffi;
using helix_exchange::CheckCombine;
using helix_exchange::CheckPack;
using helix_exchange::CombineShape;
using helix_exchange::PackShape;

namespace {

constexpr int kThreads = 256;

// Head group `self_group` (if >= 0) goes to `self_dst` (the chunk's own [T, Hc, W] slot) instead of
// dst: the fused all-to-all packs its own chunk straight into the receive buffer.
template <typename Index>
__global__ void SanitizePackKernel(const uint4* __restrict__ src, const float* __restrict__ lse,
                                   const bool* __restrict__ mask, uint4* __restrict__ dst, Index t_len,
                                   Index heads, Index hc, Index in_chunks, int self_group = -1,
                                   uint4* __restrict__ self_dst = nullptr) {
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
    if (int(g) == self_group) {
      self_dst[(t * hc + hh) * out_chunks + c] = v;
    } else {
      dst[((g * t_len + t) * hc + hh) * out_chunks + c] = v;
    }
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

// ---------------------------------------------------------------------------------------------
// Experimental: sanitize + pack fused with the all-to-all itself (target helix_exchange_a2a).
// Uses XLA's FFI collectives extension to get this device's NCCL communicator for the cp group
// (prepare stage: request the clique; execute stage: get the communicator), then packs the own
// head group straight into the receive buffer and every other group into a workspace result that
// NCCL send/recv moves to its rank. NCCL is the instance XLA already loaded (dlopen RTLD_NOLOAD):
// a second copy must never see XLA's communicator.
// ---------------------------------------------------------------------------------------------
#include <dlfcn.h>

#include "xla/ffi/api/collectives_c_api.h"

namespace {

struct NcclApi {
  using Comm = void*;
  int (*send)(const void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  int (*recv)(void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int (*user_rank)(Comm, int*) = nullptr;
  int (*count)(Comm, int*) = nullptr;
  int (*async_error)(Comm, int*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  std::string load_error;
};

const NcclApi& Nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) {
      a.load_error = "libnccl.so.2 is not loaded in this process";
      return a;
    }
    a.send = reinterpret_cast<decltype(a.send)>(dlsym(h, "ncclSend"));
    a.recv = reinterpret_cast<decltype(a.recv)>(dlsym(h, "ncclRecv"));
    a.group_start = reinterpret_cast<decltype(a.group_start)>(dlsym(h, "ncclGroupStart"));
    a.group_end = reinterpret_cast<decltype(a.group_end)>(dlsym(h, "ncclGroupEnd"));
    a.user_rank = reinterpret_cast<decltype(a.user_rank)>(dlsym(h, "ncclCommUserRank"));
    a.count = reinterpret_cast<decltype(a.count)>(dlsym(h, "ncclCommCount"));
    a.error_string = reinterpret_cast<decltype(a.error_string)>(dlsym(h, "ncclGetErrorString"));
    a.async_error = reinterpret_cast<decltype(a.async_error)>(dlsym(h, "ncclCommGetAsyncError"));
    if (!a.send || !a.recv || !a.group_start || !a.group_end || !a.user_rank || !a.count || !a.error_string ||
        !a.async_error)
      a.load_error = "libnccl.so.2 lacks ncclSend/ncclRecv/ncclGroupStart/...";
    return a;
  }();
  return api;
}

constexpr int kNcclUint8 = 1;
constexpr int kNcclInProgress = 7;  // non-blocking communicators return this until the op is queued

// Waits (bounded) until a non-blocking communicator has queued the group; 0 on success.
int NcclSettle(const NcclApi& nccl, void* comm, int rc) {
  for (long spin = 0; rc == kNcclInProgress && spin < 100000000L; ++spin) {
    int state = 0;
    if (nccl.async_error(comm, &state) != 0) return -1;
    rc = state;
  }
  return rc;
}

struct CollectivesCtx {
  const XLA_FFI_Api* api;
  const XLA_FFI_Collectives_Extension* ext;
};

struct HelixCollectives {
  using Type = CollectivesCtx;
  using CExtension = XLA_FFI_Collectives_Extension;
  static constexpr const char* kName = "CollectivesExtension";
  static constexpr int64_t kExtensionType = XLA_FFI_Extension_Collectives;
  static constexpr int32_t kMajorVersion = XLA_FFI_Extension_Collectives_MajorVersion;
  static constexpr int32_t kMinorVersion = XLA_FFI_Extension_Collectives_MinorVersion;
  // Request/get keep their layout across minor versions (new fields are appended).
  static bool Support(int32_t major, int32_t minor) { return major == kMajorVersion && minor >= 1; }
  static Type Create(const XLA_FFI_Api* api, const CExtension* ext) { return {api, ext}; }
};

ffi::Error TakeError(const XLA_FFI_Api* api, XLA_FFI_Error* err, const char* what) {
  std::string msg = std::string(what) + ": " + std::string(ffi::internal::GetErrorMessage(api, err));
  ffi::internal::DestroyError(api, err);
  return ffi::Error::Internal(msg);
}

// The cp ranks of the program (flattened ids 0..cp-1: one replica, cp partitions).
struct Group {
  std::vector<int64_t> ids;
  XLA_FFI_ReplicaGroup raw;
  explicit Group(int64_t cp) : ids(cp) {
    for (int64_t i = 0; i < cp; ++i) ids[i] = i;
    raw = XLA_FFI_ReplicaGroup{ids.data(), ids.size()};
  }
};

ffi::Error A2APrepare(CollectivesCtx ctx, ffi::AnyBuffer, ffi::Buffer<ffi::F32>, ffi::Buffer<ffi::PRED>,
                      ffi::Result<ffi::AnyBuffer> recv, ffi::Result<ffi::AnyBuffer>) {
  Group g(recv->dimensions()[0]);
  XLA_FFI_Communicator_Request_Args args;
  args.struct_size = XLA_FFI_Communicator_Request_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.group_mode = XLA_FFI_GROUP_FLATTENED_ID;
  args.groups = &g.raw;
  args.num_groups = 1;
  args.communication_id = 0;
  if (XLA_FFI_Error* err = ctx.ext->request_communicator(ctx.ext, &args))
    return TakeError(ctx.api, err, "helix_exchange_a2a: request_communicator");
  return ffi::Error::Success();
}

ffi::Error A2AExecute(cudaStream_t stream, CollectivesCtx ctx, ffi::AnyBuffer o, ffi::Buffer<ffi::F32> lse,
                      ffi::Buffer<ffi::PRED> mask, ffi::Result<ffi::AnyBuffer> recv,
                      ffi::Result<ffi::AnyBuffer> send) {
  PackShape s{};
  if (auto e = CheckPack(o, lse.dimensions(), mask.dimensions(), *recv, &s); e.failure()) return e;
  if (send->size_bytes() != recv->size_bytes())
    return ffi::Error::InvalidArgument("helix_exchange_a2a: the send workspace must match the receive buffer");
  const NcclApi& nccl = Nccl();
  if (!nccl.load_error.empty()) return ffi::Error::Internal("helix_exchange_a2a: " + nccl.load_error);
  Group g(s.cp);
  XLA_FFI_Communicator_Get_Args args;
  args.struct_size = XLA_FFI_Communicator_Get_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.group_mode = XLA_FFI_GROUP_FLATTENED_ID;
  args.groups = &g.raw;
  args.num_groups = 1;
  args.communication_id = 0;
  args.communicator = nullptr;
  if (XLA_FFI_Error* err = ctx.ext->get_communicator(ctx.ext, &args))
    return TakeError(ctx.api, err, "helix_exchange_a2a: get_communicator");
  void* comm = args.communicator;
  int rank = -1, nranks = 0;
  if (nccl.user_rank(comm, &rank) != 0 || nccl.count(comm, &nranks) != 0 || nranks != s.cp)
    return ffi::Error::Internal("helix_exchange_a2a: communicator has " + std::to_string(nranks) +
                                " ranks, expected cp=" + std::to_string(s.cp));
  const int64_t in_chunks = s.d * s.itemsize / 16;
  const int64_t n = s.t * s.h * (in_chunks + 1);
  const size_t chunk = static_cast<size_t>(s.t * s.hc * s.w * s.itemsize);
  auto* rbuf = static_cast<char*>(recv->untyped_data());
  auto* sbuf = static_cast<char*>(send->untyped_data());
  if (n > 0) {
    if (n >= (1ll << 31)) return ffi::Error::InvalidArgument("helix_exchange_a2a: payload too large");
    SanitizePackKernel<uint32_t><<<Blocks(n), kThreads, 0, stream>>>(
        static_cast<const uint4*>(o.untyped_data()), lse.typed_data(), mask.typed_data(),
        reinterpret_cast<uint4*>(sbuf), uint32_t(s.t), uint32_t(s.h), uint32_t(s.hc), uint32_t(in_chunks), rank,
        reinterpret_cast<uint4*>(rbuf + rank * chunk));
    if (auto e = LaunchStatus("helix_exchange_a2a pack launch"); e.failure()) return e;
  }
  if (chunk == 0 || s.cp == 1) return ffi::Error::Success();
  auto ok = [](int r) { return r == 0 || r == kNcclInProgress; };
  int rc = nccl.group_start();
  for (int p = 0; p < s.cp && ok(rc); ++p) {
    if (p == rank) continue;
    rc = nccl.send(sbuf + p * chunk, chunk, kNcclUint8, p, comm, stream);
    if (ok(rc)) rc = nccl.recv(rbuf + p * chunk, chunk, kNcclUint8, p, comm, stream);
  }
  const int rc_end = NcclSettle(nccl, comm, nccl.group_end());
  if (!ok(rc) || rc_end != 0) {
    const int bad = ok(rc) ? rc_end : rc;
    return ffi::Error::Internal(std::string("helix_exchange_a2a: NCCL error ") + std::to_string(bad) + ": " +
                                (bad > 0 ? nccl.error_string(bad) : "async error query failed"));
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixExchangeA2APrepare, A2APrepare,
                              ffi::Ffi::BindPrepare()
                                  .Ctx<ffi::Extension<HelixCollectives>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixExchangeA2AExecute, A2AExecute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::Extension<HelixCollectives>>()
                                  .Arg<ffi::AnyBuffer>()          // partial_out [T, H, D]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // lse [T, H]
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // zero_kv_mask [T]
                                  .Ret<ffi::AnyBuffer>()          // received payload [cp, T, Hc, W]
                                  .Ret<ffi::AnyBuffer>());        // send workspace [cp, T, Hc, W]
