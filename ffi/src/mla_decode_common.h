// Shared host-side shape checks for the helix_mla_decode FFI target (CPU and CUDA handlers).
//
// Operands (HELIX_SEMANTICS.md §5.1; query rows = G*H folded together, row r = g*H + h):
//   q_latent [B, G, H, Dl]   q_rope [B, G, H, Dr]            activation dtype
//   c_latent [N, P, Dl]      k_rope [N, P, Dr]               KV dtype (paged pool of this rank)
//   page_table [B, npp] s32  kv_bounds [B, G] s32             token (b, g) sees local slots [0, bound)
// Attribute: softmax_scale (f32).
// Results:  o [B, G, H, Dl] in the q dtype, lse [B, G, H] f32 natural log; (0, -inf) when bound == 0.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace helix_ffi {

namespace ffi = xla::ffi;

struct MlaShape {
  int64_t B = 0, G = 0, H = 0, Dl = 0, Dr = 0, N = 0, P = 0, npp = 0;
  int64_t rows() const { return G * H; }
};

inline std::string DimsStr(ffi::Span<const int64_t> d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Queries: fills B, G, H, Dl, Dr.
inline std::string CheckQueries(ffi::Span<const int64_t> qd, ffi::Span<const int64_t> rd, MlaShape* s) {
  if (qd.size() != 4) return "q_latent must be [B, G, H, Dl], got " + DimsStr(qd);
  s->B = qd[0]; s->G = qd[1]; s->H = qd[2]; s->Dl = qd[3];
  if (rd.size() != 4 || rd[0] != s->B || rd[1] != s->G || rd[2] != s->H)
    return "q_rope must be [B, G, H, Dr] matching q_latent " + DimsStr(qd) + ", got " + DimsStr(rd);
  s->Dr = rd[3];
  return "";
}

// Page table, bounds and results against the queries' B, G, H, Dl; fills npp.
inline std::string CheckTablesAndResults(ffi::Span<const int64_t> pt_dims, ffi::Span<const int64_t> bd_dims,
                                         ffi::Span<const int64_t> o_dims, ffi::Span<const int64_t> lse_dims,
                                         MlaShape* s) {
  if (pt_dims.size() != 2 || pt_dims[0] != s->B) return "page_table must be [B, pages_per_seq], got " + DimsStr(pt_dims);
  s->npp = pt_dims[1];
  if (bd_dims.size() != 2 || bd_dims[0] != s->B || bd_dims[1] != s->G) return "kv_bounds must be [B, G], got " + DimsStr(bd_dims);
  if (o_dims.size() != 4 || o_dims[0] != s->B || o_dims[1] != s->G || o_dims[2] != s->H || o_dims[3] != s->Dl)
    return "o must be [B, G, H, Dl], got " + DimsStr(o_dims);
  if (lse_dims.size() != 3 || lse_dims[0] != s->B || lse_dims[1] != s->G || lse_dims[2] != s->H)
    return "lse must be [B, G, H], got " + DimsStr(lse_dims);
  return "";
}

// Fills *shape from the operands; returns a non-empty message naming the bad operand otherwise.
inline std::string CheckMlaShapes(const ffi::AnyBuffer& q_lat, const ffi::AnyBuffer& q_rope,
                                  const ffi::AnyBuffer& c_lat, const ffi::AnyBuffer& k_rope,
                                  ffi::Span<const int64_t> pt_dims, ffi::Span<const int64_t> bd_dims,
                                  ffi::Span<const int64_t> o_dims, ffi::Span<const int64_t> lse_dims,
                                  MlaShape* s) {
  auto qd = q_lat.dimensions(), rd = q_rope.dimensions(), cd = c_lat.dimensions(), kd = k_rope.dimensions();
  if (std::string e = CheckQueries(qd, rd, s); !e.empty()) return e;
  if (cd.size() != 3 || cd[2] != s->Dl) return "c_latent must be [N, P, Dl=" + std::to_string(s->Dl) + "], got " + DimsStr(cd);
  s->N = cd[0]; s->P = cd[1];
  if (kd.size() != 3 || kd[0] != s->N || kd[1] != s->P || kd[2] != s->Dr)
    return "k_rope must be [N, P, Dr] = [" + std::to_string(s->N) + ", " + std::to_string(s->P) + ", " +
           std::to_string(s->Dr) + "], got " + DimsStr(kd);
  if (std::string e = CheckTablesAndResults(pt_dims, bd_dims, o_dims, lse_dims, s); !e.empty()) return e;
  if (q_rope.element_type() != q_lat.element_type()) return "q_rope dtype must equal q_latent dtype";
  if (k_rope.element_type() != c_lat.element_type()) return "k_rope dtype must equal c_latent dtype";
  if (s->P <= 0) return "page size must be positive";
  return "";
}

// Quantized pages (helix_mla_decode_fp8 / _nvfp4): pools alternate latent / rope fields, each
// [N, P, D / div] with D = Dl for fields 0, 2 and Dr for fields 1, 3 (fp8: {c_latent, k_rope} with
// div {1, 1}; nvfp4: {c_latent, k_rope, c_latent_sf, k_rope_sf} with div {2, 2, 16, 16}).
// Dl, Dr come from the queries. Fills *s (N, P from the first pool) like CheckMlaShapes.
inline std::string CheckQuantShapes(const ffi::AnyBuffer& q_lat, const ffi::AnyBuffer& q_rope,
                                    std::initializer_list<const ffi::AnyBuffer*> pools,
                                    std::initializer_list<int> divs, ffi::Span<const int64_t> pt_dims,
                                    ffi::Span<const int64_t> bd_dims, ffi::Span<const int64_t> o_dims,
                                    ffi::Span<const int64_t> lse_dims, MlaShape* s) {
  auto qd = q_lat.dimensions(), rd = q_rope.dimensions();
  if (std::string e = CheckQueries(qd, rd, s); !e.empty()) return e;
  std::vector<const ffi::AnyBuffer*> pv(pools);
  std::vector<int> dv(divs);
  static const char* kNames[] = {"c_latent", "k_rope", "c_latent_sf", "k_rope_sf"};
  auto d0 = pv[0]->dimensions();
  if (d0.size() != 3) return "c_latent must be [N, P, .], got " + DimsStr(d0);
  s->N = d0[0]; s->P = d0[1];
  for (size_t i = 0; i < pv.size(); ++i) {
    const int64_t full = (i % 2 == 0) ? s->Dl : s->Dr;
    auto d = pv[i]->dimensions();
    if (full % dv[i] != 0 || d.size() != 3 || d[0] != s->N || d[1] != s->P || d[2] != full / dv[i])
      return std::string(kNames[i]) + " must be [N, P, " + std::to_string(full) + "/" + std::to_string(dv[i]) +
             "] = [" + std::to_string(s->N) + ", " + std::to_string(s->P) + ", " + std::to_string(full / dv[i]) +
             "], got " + DimsStr(d);
  }
  if (std::string e = CheckTablesAndResults(pt_dims, bd_dims, o_dims, lse_dims, s); !e.empty()) return e;
  if (s->P <= 0) return "page size must be positive";
  return "";
}

// The operand list of a helix_mla_decode target, from `b` (ffi::Ffi::Bind(), or with the CUDA stream context first):
// kBuffers untyped buffers — q_latent, q_rope, then the pool's arrays (native: c_latent, k_rope; fp8: those in E4M3 and
// the scale [1] f32; nvfp4: packed E2M1 c_latent, k_rope, their E4M3 block scales c_latent_sf, k_rope_sf and the
// global scale [1] f32) — then page_table [B, npp] s32, kv_bounds [B, G] s32, attribute softmax_scale, results o, lse
// [B, G, H] f32 and the workspace (split-KV partials on CUDA; unused on CPU). The CPU and CUDA handlers of one target
// name are built from the same list, so their bindings cannot drift apart.
template <int kBuffers, class Binding>
auto BindMlaDecode(Binding b) {
  if constexpr (kBuffers == 0) {
    return std::move(b)
        .template Arg<ffi::Buffer<ffi::S32>>()  // page_table
        .template Arg<ffi::Buffer<ffi::S32>>()  // kv_bounds
        .template Attr<float>("softmax_scale")
        .template Ret<ffi::AnyBuffer>()         // o
        .template Ret<ffi::Buffer<ffi::F32>>()  // lse
        .template Ret<ffi::AnyBuffer>();        // workspace
  } else {
    return BindMlaDecode<kBuffers - 1>(std::move(b).template Arg<ffi::AnyBuffer>());  // (a binding's steps are &&)
  }
}
// Untyped buffers of each page format's target: the two query arrays and the pool's.
constexpr int kMlaBuffersNative = 4, kMlaBuffersFp8 = 5, kMlaBuffersNvfp4 = 7;

}  // namespace helix_ffi
