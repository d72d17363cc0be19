// CPU handler of the helix_mla_decode FFI target: plain C++, float32 accumulation.
// It exists so CI exercises the FFI binding, attribute passing, argument order and bound masking
// without a GPU; the CUDA handler (mla_decode_cuda.cu) implements the same contract.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mla_decode_common.h"

namespace helix_ffi {
namespace {

float Bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// Reads element i of a float buffer of a supported dtype as float.
struct Reader {
  ffi::DataType t;
  const void* p;
  float operator()(int64_t i) const {
    switch (t) {
      case ffi::DataType::F32: return static_cast<const float*>(p)[i];
      case ffi::DataType::BF16: return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
      case ffi::DataType::F16: return static_cast<float>(static_cast<const _Float16*>(p)[i]);
      default: return std::numeric_limits<float>::quiet_NaN();
    }
  }
};

void Write(ffi::DataType t, void* p, int64_t i, float v) {
  switch (t) {
    case ffi::DataType::F32: static_cast<float*>(p)[i] = v; break;
    case ffi::DataType::BF16: static_cast<uint16_t*>(p)[i] = FloatToBf16(v); break;
    case ffi::DataType::F16: static_cast<_Float16*>(p)[i] = static_cast<_Float16>(v); break;
    default: break;
  }
}

bool Supported(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

ffi::Error MlaDecodeCpu(ffi::AnyBuffer q_lat, ffi::AnyBuffer q_rope, ffi::AnyBuffer c_lat,
                        ffi::AnyBuffer k_rope, ffi::Buffer<ffi::S32> page_table,
                        ffi::Buffer<ffi::S32> kv_bounds, float softmax_scale,
                        ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                        ffi::Result<ffi::AnyBuffer> /*workspace: used by the CUDA handler only*/) {
  MlaShape s;
  std::string err = CheckMlaShapes(q_lat, q_rope, c_lat, k_rope, page_table.dimensions(),
                                   kv_bounds.dimensions(), o->dimensions(), lse->dimensions(), &s);
  if (!err.empty()) return ffi::Error::InvalidArgument("helix_mla_decode: " + err);
  for (auto t : {q_lat.element_type(), c_lat.element_type()})
    if (!Supported(t)) return ffi::Error::InvalidArgument("helix_mla_decode: dtypes must be f32, bf16 or f16");
  if (o->element_type() != q_lat.element_type())
    return ffi::Error::InvalidArgument("helix_mla_decode: o dtype must equal q_latent dtype");

  const int64_t B = s.B, G = s.G, H = s.H, Dl = s.Dl, Dr = s.Dr, P = s.P, npp = s.npp, N = s.N;
  const int32_t* pt = page_table.typed_data();
  const int32_t* bounds = kv_bounds.typed_data();
  Reader ql{q_lat.element_type(), q_lat.untyped_data()}, qr{q_rope.element_type(), q_rope.untyped_data()};
  Reader cl{c_lat.element_type(), c_lat.untyped_data()}, kr{k_rope.element_type(), k_rope.untyped_data()};
  float* lse_out = lse->typed_data();
  const float ninf = -std::numeric_limits<float>::infinity();

  std::vector<float> kv_l, kv_r, qv(Dl + Dr), logits, acc(Dl);
  for (int64_t b = 0; b < B; ++b) {
    int64_t len = 0;
    for (int64_t g = 0; g < G; ++g) len = std::max<int64_t>(len, std::clamp<int64_t>(bounds[b * G + g], 0, npp * P));
    // Gather this sequence's live KV once (only pages in the table, only slots < max bound).
    kv_l.assign(len * Dl, 0.f);
    kv_r.assign(len * Dr, 0.f);
    for (int64_t t = 0; t < len; ++t) {
      int64_t page = std::clamp<int64_t>(pt[b * npp + t / P], 0, N - 1);
      int64_t row = page * P + t % P;
      for (int64_t d = 0; d < Dl; ++d) kv_l[t * Dl + d] = cl(row * Dl + d);
      for (int64_t d = 0; d < Dr; ++d) kv_r[t * Dr + d] = kr(row * Dr + d);
    }
    for (int64_t g = 0; g < G; ++g) {
      const int64_t bound = std::clamp<int64_t>(bounds[b * G + g], 0, npp * P);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t r = (b * G + g) * H + h;
        if (bound == 0) {
          for (int64_t d = 0; d < Dl; ++d) Write(o->element_type(), o->untyped_data(), r * Dl + d, 0.f);
          lse_out[r] = ninf;
          continue;
        }
        for (int64_t d = 0; d < Dl; ++d) qv[d] = ql(r * Dl + d);
        for (int64_t d = 0; d < Dr; ++d) qv[Dl + d] = qr(r * Dr + d);
        logits.assign(bound, 0.f);
        float m = ninf;
        for (int64_t t = 0; t < bound; ++t) {
          float dot = 0.f;
          for (int64_t d = 0; d < Dl; ++d) dot += qv[d] * kv_l[t * Dl + d];
          for (int64_t d = 0; d < Dr; ++d) dot += qv[Dl + d] * kv_r[t * Dr + d];
          logits[t] = dot * softmax_scale;
          m = std::max(m, logits[t]);
        }
        std::fill(acc.begin(), acc.end(), 0.f);
        float sum = 0.f;
        for (int64_t t = 0; t < bound; ++t) {
          float p = std::exp(logits[t] - m);
          sum += p;
          for (int64_t d = 0; d < Dl; ++d) acc[d] += p * kv_l[t * Dl + d];
        }
        for (int64_t d = 0; d < Dl; ++d) Write(o->element_type(), o->untyped_data(), r * Dl + d, acc[d] / sum);
        lse_out[r] = m + std::log(sum);
      }
    }
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace helix_ffi

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixMlaDecodeCpu, helix_ffi::MlaDecodeCpu,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()                 // q_latent
                                  .Arg<xla::ffi::AnyBuffer>()                 // q_rope
                                  .Arg<xla::ffi::AnyBuffer>()                 // c_latent
                                  .Arg<xla::ffi::AnyBuffer>()                 // k_rope
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()     // page_table
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()     // kv_bounds
                                  .Attr<float>("softmax_scale")
                                  .Ret<xla::ffi::AnyBuffer>()                 // o
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()     // lse
                                  .Ret<xla::ffi::AnyBuffer>());               // workspace (CUDA only)
