// Helix exchange payload layout and shape checks shared by the CPU and CUDA handlers.
//
// One all-to-all payload per rank, head group first:
//   payload [cp, T, Hc, W]   unsigned int of the activation's width (u16 for bf16, u32 for f32),
//                            W = D + 16 / sizeof(dtype); an integer container so that no float pass
//                            (CPU bf16 normalisation, NaN canonicalisation) can touch the LSE bits
//   payload[g, t, hh, :D]    = partial output of token t, head g*Hc + hh
//   payload[g, t, hh, D:D+4 bytes] = that row's natural-log LSE, bit-cast float32
//   remaining pad bytes      = 0
// Every row stays 16-byte aligned for any Hc (odd head groups included, R13), and the LSE travels
// in the same all-to-all as the data. Splitting on the leading axis needs no XLA transpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "xla/ffi/api/ffi.h"
#include "peer_rendezvous.h"

namespace helix_exchange {

namespace ffi = xla::ffi;

inline int64_t PadElems(int64_t itemsize) { return 16 / itemsize; }

inline bool SupportedDtype(ffi::DataType t) {
  return t == ffi::DataType::BF16 || t == ffi::DataType::F32;
}

// The payload's integer container for an activation dtype.
inline ffi::DataType ContainerOf(ffi::DataType t) {
  return t == ffi::DataType::BF16 ? ffi::DataType::U16 : ffi::DataType::U32;
}

inline std::string DimsStr(ffi::AnyBuffer::Dimensions d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

struct PackShape {
  int64_t cp, t, h, hc, d, w, itemsize;
};

// o [T, H, D], lse [T, H] f32, mask [T] pred, payload [cp, T, Hc, W].
inline ffi::Error CheckPack(const ffi::AnyBuffer& o, ffi::AnyBuffer::Dimensions lse_dims,
                            ffi::AnyBuffer::Dimensions mask_dims, const ffi::AnyBuffer& payload,
                            PackShape* s) {
  if (!SupportedDtype(o.element_type()))
    return ffi::Error::InvalidArgument("helix_sanitize_pack: partial_out must be bf16 or f32");
  if (payload.element_type() != ContainerOf(o.element_type()))
    return ffi::Error::InvalidArgument("helix_sanitize_pack: payload must be u16 for bf16 and u32 for f32 partials");
  auto od = o.dimensions();
  auto pd = payload.dimensions();
  if (od.size() != 3 || pd.size() != 4 || lse_dims.size() != 2 || mask_dims.size() != 1)
    return ffi::Error::InvalidArgument("helix_sanitize_pack: expected partial_out [T,H,D], lse [T,H], mask [T], "
                                       "payload [cp,T,Hc,W]; got " + DimsStr(od) + ", " + DimsStr(lse_dims) +
                                       ", " + DimsStr(mask_dims) + ", " + DimsStr(pd));
  s->itemsize = static_cast<int64_t>(ffi::ByteWidth(o.element_type()));
  s->t = od[0]; s->h = od[1]; s->d = od[2];
  s->cp = pd[0]; s->hc = pd[2]; s->w = pd[3];
  if (lse_dims[0] != s->t || lse_dims[1] != s->h || mask_dims[0] != s->t)
    return ffi::Error::InvalidArgument("helix_sanitize_pack: lse must be [T,H] and mask [T] for partial_out " +
                                       DimsStr(od));
  if (s->cp < 1 || pd[1] != s->t || s->cp * s->hc != s->h || s->w != s->d + PadElems(s->itemsize))
    return ffi::Error::InvalidArgument("helix_sanitize_pack: payload must be [cp, T, H/cp, D + 16/itemsize], got " +
                                       DimsStr(pd) + " for partial_out " + DimsStr(od));
  if ((s->d * s->itemsize) % 16 != 0)
    return ffi::Error::InvalidArgument("helix_sanitize_pack: D * itemsize must be a multiple of 16 bytes");
  return ffi::Error::Success();
}

struct CombineShape {
  int64_t cp, t, hc, d, w, itemsize;
};

// payload [cp, T, Hc, W] -> out [T, Hc, D], lse [T, Hc] f32.
inline ffi::Error CheckCombine(const ffi::AnyBuffer& payload, const ffi::AnyBuffer& out,
                               ffi::AnyBuffer::Dimensions lse_dims, CombineShape* s) {
  if (!SupportedDtype(out.element_type()))
    return ffi::Error::InvalidArgument("helix_combine: out must be bf16 or f32");
  if (payload.element_type() != ContainerOf(out.element_type()))
    return ffi::Error::InvalidArgument("helix_combine: payload must be u16 for a bf16 out and u32 for f32");
  auto pd = payload.dimensions();
  auto od = out.dimensions();
  if (pd.size() != 4 || od.size() != 3 || lse_dims.size() != 2)
    return ffi::Error::InvalidArgument("helix_combine: expected payload [cp,T,Hc,W], out [T,Hc,D], lse [T,Hc]; got " +
                                       DimsStr(pd) + ", " + DimsStr(od) + ", " + DimsStr(lse_dims));
  s->itemsize = static_cast<int64_t>(ffi::ByteWidth(out.element_type()));
  s->cp = pd[0]; s->t = pd[1]; s->hc = pd[2]; s->w = pd[3];
  s->d = od[2];
  if (od[0] != s->t || od[1] != s->hc || lse_dims[0] != s->t || lse_dims[1] != s->hc ||
      s->w != s->d + PadElems(s->itemsize) || s->cp < 1)
    return ffi::Error::InvalidArgument("helix_combine: out must be [T, Hc, W - 16/itemsize] and lse [T, Hc] "
                                       "for payload " + DimsStr(pd) + "; got " + DimsStr(od) + ", " +
                                       DimsStr(lse_dims));
  if ((s->d * s->itemsize) % 16 != 0)
    return ffi::Error::InvalidArgument("helix_combine: D * itemsize must be a multiple of 16 bytes");
  return ffi::Error::Success();
}

// helix_exchange_peer: o [T, H, D], lse [T, H] f32, mask [T] -> out [T, H/cp, D] (o's dtype), lse [T, H/cp].
inline ffi::Error CheckPeerExchange(const ffi::AnyBuffer& o, ffi::AnyBuffer::Dimensions lse_dims,
                                    ffi::AnyBuffer::Dimensions mask_dims, const ffi::AnyBuffer& out,
                                    ffi::AnyBuffer::Dimensions lse_out_dims, int64_t cp, PackShape* s) {
  if (!SupportedDtype(o.element_type()) || out.element_type() != o.element_type())
    return ffi::Error::InvalidArgument("helix_exchange_peer: partial_out and out must both be bf16 or both f32");
  auto od = o.dimensions();
  auto outd = out.dimensions();
  if (od.size() != 3 || lse_dims.size() != 2 || mask_dims.size() != 1 || outd.size() != 3 || lse_out_dims.size() != 2)
    return ffi::Error::InvalidArgument("helix_exchange_peer: expected partial_out [T,H,D], lse [T,H], mask [T], "
                                       "out [T,Hc,D], lse_out [T,Hc]; got " + DimsStr(od) + ", " + DimsStr(lse_dims) +
                                       ", " + DimsStr(mask_dims) + ", " + DimsStr(outd) + ", " + DimsStr(lse_out_dims));
  s->itemsize = static_cast<int64_t>(ffi::ByteWidth(o.element_type()));
  s->t = od[0]; s->h = od[1]; s->d = od[2];
  s->cp = cp;
  if (cp < 1 || s->h % cp != 0)
    return ffi::Error::InvalidArgument("helix_exchange_peer: heads " + std::to_string(s->h) +
                                       " must be divisible by cp=" + std::to_string(cp));
  s->hc = s->h / cp;
  s->w = s->d + PadElems(s->itemsize);
  if (lse_dims[0] != s->t || lse_dims[1] != s->h || mask_dims[0] != s->t || outd[0] != s->t || outd[1] != s->hc ||
      outd[2] != s->d || lse_out_dims[0] != s->t || lse_out_dims[1] != s->hc)
    return ffi::Error::InvalidArgument("helix_exchange_peer: shapes disagree for partial_out " + DimsStr(od) +
                                       " and cp=" + std::to_string(cp) + ": lse " + DimsStr(lse_dims) + ", mask " +
                                       DimsStr(mask_dims) + ", out " + DimsStr(outd) + ", lse_out " +
                                       DimsStr(lse_out_dims));
  if ((s->d * s->itemsize) % 16 != 0)
    return ffi::Error::InvalidArgument("helix_exchange_peer: D * itemsize must be a multiple of 16 bytes");
  return ffi::Error::Success();
}

// Shapes and this device's peer group and rank, shared by the CPU and CUDA handlers.
inline ffi::Error FindPeerExchange(const ffi::AnyBuffer& o, ffi::AnyBuffer::Dimensions lse_dims,
                                   ffi::AnyBuffer::Dimensions mask_dims, const ffi::AnyBuffer& out,
                                   ffi::AnyBuffer::Dimensions lse_out_dims, ffi::Span<const int64_t> groups,
                                   int64_t cp, int32_t ordinal, PackShape* s, helix_peer::Group** group, int* rank) {
  if (auto e = CheckPeerExchange(o, lse_dims, mask_dims, out, lse_out_dims, cp, s); e.failure()) return e;
  std::string err =
      helix_peer::FindGroup(groups.begin(), static_cast<int64_t>(groups.size()), cp, ordinal, group, rank);
  return err.empty() ? ffi::Error::Success() : ffi::Error::InvalidArgument(err);
}

}  // namespace helix_exchange
