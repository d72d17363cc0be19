// CPU handlers of the Helix exchange custom calls (layout: exchange_common.h).
//   helix_sanitize_pack : partial_out [T,H,D], lse [T,H] f32, zero_kv_mask [T] -> payload [cp,T,Hc,W]
//   helix_combine       : payload [cp(src),T,Hc,W] -> out [T,Hc,D], lse [T,Hc] f32
//   helix_exchange_peer : the whole exchange for the devices of one process: sanitize + pack stored
//                         straight into the peers' receive buffers, then the combine -> out [T,Hc,D],
//                         lse [T,Hc] (the peer transport; rendezvous in peer_rendezvous.h)
// Semantics: HELIX_SEMANTICS.md §6.3 (sanitize overwrites NaN garbage) and §7 (fp32 LSE combine,
// all-empty rows give 0 and -inf).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "exchange_common.h"
#include "peer_rendezvous.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using helix_exchange::CheckCombine;
using helix_exchange::CheckPack;
using helix_exchange::FindPeerExchange;
using helix_exchange::CombineShape;
using helix_exchange::PackShape;

namespace {

inline float Bf16ToF32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN kept quiet (matches XLA's f32 -> bf16 convert).
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float LoadElem(const uint8_t* p, int64_t i, int64_t itemsize) {
  if (itemsize == 2) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return Bf16ToF32(v);
  }
  float f;
  std::memcpy(&f, p + 4 * i, 4);
  return f;
}

inline void StoreElem(uint8_t* p, int64_t i, float f, int64_t itemsize) {
  if (itemsize == 2) {
    uint16_t v = F32ToBf16(f);
    std::memcpy(p + 2 * i, &v, 2);
  } else {
    std::memcpy(p + 4 * i, &f, 4);
  }
}

// Sanitize + pack every (token, head) row of `o` into `dst(g, t, hh)` (a row of W elements).
template <typename Dst>
void PackRows(const PackShape& s, const uint8_t* src, const float* lse_p, const bool* m, Dst dst) {
  const int64_t row_bytes = s.d * s.itemsize, out_row_bytes = s.w * s.itemsize;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < s.t; ++t) {
    for (int64_t h = 0; h < s.h; ++h) {
      uint8_t* out = dst(h / s.hc, t, h % s.hc);
      if (m[t]) {
        std::memset(out, 0, row_bytes);
      } else {
        std::memcpy(out, src + (t * s.h + h) * row_bytes, row_bytes);
      }
      std::memset(out + row_bytes, 0, out_row_bytes - row_bytes);
      const float l = m[t] ? neg_inf : lse_p[t * s.h + h];
      std::memcpy(out + row_bytes, &l, 4);
    }
  }
}

ffi::Error SanitizePackCpu(ffi::AnyBuffer o, ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::PRED> mask,
                           ffi::Result<ffi::AnyBuffer> payload) {
  PackShape s{};
  if (auto e = CheckPack(o, lse.dimensions(), mask.dimensions(), *payload, &s); e.failure()) return e;
  auto* dst = static_cast<uint8_t*>(payload->untyped_data());
  const int64_t out_row_bytes = s.w * s.itemsize;
  PackRows(s, static_cast<const uint8_t*>(o.untyped_data()), lse.typed_data(), mask.typed_data(),
           [&](int64_t g, int64_t t, int64_t hh) { return dst + ((g * s.t + t) * s.hc + hh) * out_row_bytes; });
  return ffi::Error::Success();
}

// LSE combine of a received payload (src [cp, T*Hc, W] bytes) into dst [T*Hc, D] and lse_p [T*Hc].
void CombineRows(const uint8_t* src, const CombineShape& s, uint8_t* dst, float* lse_p) {
  const int64_t rows = s.t * s.hc, row_bytes = s.d * s.itemsize, in_row_bytes = s.w * s.itemsize;
  std::vector<float> w(s.cp), acc(s.d);
  for (int64_t r = 0; r < rows; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < s.cp; ++c) {
      float l;
      std::memcpy(&l, src + (c * rows + r) * in_row_bytes + row_bytes, 4);
      w[c] = l;
      mx = std::fmax(mx, l);
    }
    if (!std::isfinite(mx)) mx = 0.f;  // all-empty row: keep exp() finite
    float total = 0.f;
    for (int64_t c = 0; c < s.cp; ++c) {
      w[c] = std::exp(w[c] - mx);  // exp(-inf) = 0: empty partials drop out
      total += w[c];
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t c = 0; c < s.cp; ++c) {
      const float wc = w[c] * inv;
      if (!(wc > 0.f)) continue;  // never multiply an empty partial's bytes (0 * NaN)
      const uint8_t* row = src + (c * rows + r) * in_row_bytes;
      for (int64_t i = 0; i < s.d; ++i) acc[i] += wc * LoadElem(row, i, s.itemsize);
    }
    uint8_t* orow = dst + r * row_bytes;
    for (int64_t i = 0; i < s.d; ++i) StoreElem(orow, i, acc[i], s.itemsize);
    lse_p[r] = total > 0.f ? mx + std::log(total) : -std::numeric_limits<float>::infinity();
  }
}

ffi::Error CombineCpu(ffi::AnyBuffer payload, ffi::Result<ffi::AnyBuffer> out,
                      ffi::Result<ffi::Buffer<ffi::F32>> lse_out) {
  CombineShape s{};
  if (auto e = CheckCombine(payload, *out, lse_out->dimensions(), &s); e.failure()) return e;
  CombineRows(static_cast<const uint8_t*>(payload.untyped_data()), s, static_cast<uint8_t*>(out->untyped_data()),
              lse_out->typed_data());
  return ffi::Error::Success();
}

// helix_exchange_peer on CPU devices of one process: the GPU handler's protocol with host memory
// (each rank publishes a receive buffer, stores its rows straight into the peers', waits until
// every rank has stored, combines its own buffer), so CI runs the rendezvous on virtual devices.
// Output = combine(lax.all_to_all(sanitize_pack(...))), bit for bit.
ffi::Error ExchangePeerCpu(int32_t ordinal, ffi::RunId run, ffi::AnyBuffer o, ffi::Buffer<ffi::F32> lse,
                           ffi::Buffer<ffi::PRED> mask, ffi::Result<ffi::AnyBuffer> out,
                           ffi::Result<ffi::Buffer<ffi::F32>> lse_out, ffi::Span<const int64_t> groups, int64_t cp,
                           double timeout_s) {
  PackShape s{};
  helix_peer::Group* group = nullptr;
  int rank = 0;
  if (auto e = FindPeerExchange(o, lse.dimensions(), mask.dimensions(), *out, lse_out->dimensions(), groups, cp,
                                ordinal, &s, &group, &rank);
      e.failure())
    return e;
  const int64_t out_row_bytes = s.w * s.itemsize;
  std::vector<uint8_t> recv(static_cast<size_t>(s.cp * s.t * s.hc * out_row_bytes));
  helix_peer::Entry all[helix_peer::kMaxRanks];
  helix_peer::Entry mine;
  mine.recv = recv.data();
  std::pair<int64_t, uint64_t> key;
  if (auto err = group->Publish(rank, run.run_id, mine, timeout_s, all, &key); !err.empty())
    return ffi::Error::Internal(err);
  PackRows(s, static_cast<const uint8_t*>(o.untyped_data()), lse.typed_data(), mask.typed_data(),
           [&](int64_t g, int64_t t, int64_t hh) {
             return static_cast<uint8_t*>(all[g].recv) + ((rank * s.t + t) * s.hc + hh) * out_row_bytes;
           });
  if (auto err = group->Finish(rank, key, timeout_s); !err.empty()) return ffi::Error::Internal(err);
  const CombineShape cs{s.cp, s.t, s.hc, s.d, s.w, s.itemsize};
  CombineRows(recv.data(), cs, static_cast<uint8_t*>(out->untyped_data()), lse_out->typed_data());
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixSanitizePackCpu, SanitizePackCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()          // partial_out [T, H, D]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // lse [T, H]
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // zero_kv_mask [T]
                                  .Ret<ffi::AnyBuffer>());        // payload [cp, T, Hc, W]

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixCombineCpu, CombineCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()          // payload [cp, T, Hc, W]
                                  .Ret<ffi::AnyBuffer>()          // out [T, Hc, D]
                                  .Ret<ffi::Buffer<ffi::F32>>());  // lse [T, Hc]

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixExchangePeerCpu, ExchangePeerCpu,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Ctx<ffi::RunId>()
                                  .Arg<ffi::AnyBuffer>()           // partial_out [T, H, D]
                                  .Arg<ffi::Buffer<ffi::F32>>()    // lse [T, H]
                                  .Arg<ffi::Buffer<ffi::PRED>>()   // zero_kv_mask [T]
                                  .Ret<ffi::AnyBuffer>()           // out [T, Hc, D]
                                  .Ret<ffi::Buffer<ffi::F32>>()    // lse [T, Hc]
                                  .Attr<ffi::Span<const int64_t>>("groups")  // [num_groups, cp] ordinals
                                  .Attr<int64_t>("cp")
                                  .Attr<double>("timeout_s"));
