// CPU handlers of the helix_mla_decode{,_fp8,_nvfp4} FFI targets: plain C++, float32 accumulation.
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

// Bounded decode of sequence b over its gathered live rows kv_l [len, Dl], kv_r [len, Dr] (float, already
// dequantized), for every (g, h) row; writes o (q dtype) and lse. Shared by the three handlers.
void DecodeSequence(const MlaShape& s, int64_t b, const int32_t* bounds, const std::vector<float>& kv_l,
                    const std::vector<float>& kv_r, const Reader& ql, const Reader& qr, float softmax_scale,
                    ffi::DataType ot, void* o, float* lse_out) {
  const int64_t G = s.G, H = s.H, Dl = s.Dl, Dr = s.Dr, cap = s.npp * s.P;
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> qv(Dl + Dr), logits, acc(Dl);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t bound = std::clamp<int64_t>(bounds[b * G + g], 0, cap);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t r = (b * G + g) * H + h;
      if (bound == 0) {
        for (int64_t d = 0; d < Dl; ++d) Write(ot, o, r * Dl + d, 0.f);
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
      for (int64_t d = 0; d < Dl; ++d) Write(ot, o, r * Dl + d, acc[d] / sum);
      lse_out[r] = m + std::log(sum);
    }
  }
}

// Live length of sequence b (max over its tokens' bounds, clamped to the table's capacity).
int64_t SeqLive(const MlaShape& s, const int32_t* bounds, int64_t b) {
  int64_t len = 0;
  for (int64_t g = 0; g < s.G; ++g) len = std::max<int64_t>(len, std::clamp<int64_t>(bounds[b * s.G + g], 0, s.npp * s.P));
  return len;
}

// Pool row (page * P + offset) of local slot t of sequence b; page ids clamped into the pool.
int64_t PoolRow(const MlaShape& s, const int32_t* pt, int64_t b, int64_t t) {
  const int64_t page = std::clamp<int64_t>(pt[b * s.npp + t / s.P], 0, s.N - 1);
  return page * s.P + t % s.P;
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

  const int32_t* pt = page_table.typed_data();
  const int32_t* bounds = kv_bounds.typed_data();
  Reader ql{q_lat.element_type(), q_lat.untyped_data()}, qr{q_rope.element_type(), q_rope.untyped_data()};
  Reader cl{c_lat.element_type(), c_lat.untyped_data()}, kr{k_rope.element_type(), k_rope.untyped_data()};
  std::vector<float> kv_l, kv_r;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t len = SeqLive(s, bounds, b);
    // Gather this sequence's live KV once (only pages in the table, only slots < max bound).
    kv_l.assign(len * s.Dl, 0.f);
    kv_r.assign(len * s.Dr, 0.f);
    for (int64_t t = 0; t < len; ++t) {
      const int64_t row = PoolRow(s, pt, b, t);
      for (int64_t d = 0; d < s.Dl; ++d) kv_l[t * s.Dl + d] = cl(row * s.Dl + d);
      for (int64_t d = 0; d < s.Dr; ++d) kv_r[t * s.Dr + d] = kr(row * s.Dr + d);
    }
    DecodeSequence(s, b, bounds, kv_l, kv_r, ql, qr, softmax_scale, o->element_type(), o->untyped_data(),
                   lse->typed_data());
  }
  return ffi::Error::Success();
}

// -- quantized pages (HELIX_SEMANTICS.md §10; formulas of helix_jax/quant.py) -----------------------
// E4M3 (fn) byte -> float: s eeee mmm, bias 7, subnormals at e == 0, 0x7F/0xFF NaN, no infinity.
float E4m3ToFloat(uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  float mag;
  if (e == 15 && m == 7) mag = std::numeric_limits<float>::quiet_NaN();
  else if (e == 0) mag = std::ldexp(static_cast<float>(m), -9);          // m/8 * 2^-6
  else mag = std::ldexp(static_cast<float>(8 + m), e - 10);              // (1 + m/8) * 2^(e-7)
  return (v & 0x80) ? -mag : mag;
}

// E2M1 code (sign<<3 | exp<<1 | man) -> float.
constexpr float kE2m1[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

// fl32(1/scale) from a [1] float32 operand: the reciprocal every dequant multiplies by (quant.py).
std::string InvScale(const ffi::AnyBuffer& scale, const char* name, float* inv) {
  if (scale.element_type() != ffi::DataType::F32 || scale.element_count() != 1)
    return std::string(name) + " must be one float32 (shape [] or [1])";
  volatile float one = 1.f;  // an IEEE division, as XLA computes 1/scale
  *inv = one / *static_cast<const float*>(scale.untyped_data());
  return "";
}

ffi::Error CheckQ(const ffi::AnyBuffer& q_lat, const ffi::AnyBuffer& q_rope, const ffi::AnyBuffer& o, const char* tgt) {
  if (!Supported(q_lat.element_type()) || q_rope.element_type() != q_lat.element_type())
    return ffi::Error::InvalidArgument(std::string(tgt) + ": q_latent/q_rope must share one dtype of f32, bf16, f16");
  if (o.element_type() != q_lat.element_type())
    return ffi::Error::InvalidArgument(std::string(tgt) + ": o dtype must equal q_latent dtype");
  return ffi::Error::Success();
}

// FP8 E4M3 pages: c_latent [N, P, Dl] and k_rope [N, P, Dr] float8_e4m3fn, scale [1] f32;
// value = fl32(q * fl32(1/scale)).
ffi::Error MlaDecodeFp8Cpu(ffi::AnyBuffer q_lat, ffi::AnyBuffer q_rope, ffi::AnyBuffer c_lat, ffi::AnyBuffer k_rope,
                           ffi::AnyBuffer scale, ffi::Buffer<ffi::S32> page_table, ffi::Buffer<ffi::S32> kv_bounds,
                           float softmax_scale, ffi::Result<ffi::AnyBuffer> o,
                           ffi::Result<ffi::Buffer<ffi::F32>> lse, ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  const char* tgt = "helix_mla_decode_fp8";
  MlaShape s;
  std::string err = CheckQuantShapes(q_lat, q_rope, {&c_lat, &k_rope}, {1, 1}, page_table.dimensions(),
                                     kv_bounds.dimensions(), o->dimensions(), lse->dimensions(), &s);
  for (auto* x : {&c_lat, &k_rope})
    if (err.empty() && x->element_type() != ffi::DataType::F8E4M3FN) err = "c_latent/k_rope must be float8_e4m3fn";
  float inv = 0.f;
  if (err.empty()) err = InvScale(scale, "scale", &inv);
  if (!err.empty()) return ffi::Error::InvalidArgument(std::string(tgt) + ": " + err);
  if (auto e = CheckQ(q_lat, q_rope, *o, tgt); e.failure()) return e;

  float lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = E4m3ToFloat(static_cast<uint8_t>(v)) * inv;
  const auto* cl = static_cast<const uint8_t*>(c_lat.untyped_data());
  const auto* kr = static_cast<const uint8_t*>(k_rope.untyped_data());
  const int32_t* pt = page_table.typed_data();
  const int32_t* bounds = kv_bounds.typed_data();
  Reader ql{q_lat.element_type(), q_lat.untyped_data()}, qr{q_rope.element_type(), q_rope.untyped_data()};
  std::vector<float> kv_l, kv_r;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t len = SeqLive(s, bounds, b);
    kv_l.assign(len * s.Dl, 0.f);
    kv_r.assign(len * s.Dr, 0.f);
    for (int64_t t = 0; t < len; ++t) {
      const int64_t row = PoolRow(s, pt, b, t);
      for (int64_t d = 0; d < s.Dl; ++d) kv_l[t * s.Dl + d] = lut[cl[row * s.Dl + d]];
      for (int64_t d = 0; d < s.Dr; ++d) kv_r[t * s.Dr + d] = lut[kr[row * s.Dr + d]];
    }
    DecodeSequence(s, b, bounds, kv_l, kv_r, ql, qr, softmax_scale, o->element_type(), o->untyped_data(),
                   lse->typed_data());
  }
  return ffi::Error::Success();
}

// Dequantizes one NVFP4 row: codes [D/2] packed (element 2k low nibble), block scales [D/16] E4M3;
// value = fl32(e2m1 * sf) * fl32(1/global) (e2m1 * sf is exact in float32).
void DequantNvfp4Row(const uint8_t* codes, const uint8_t* sf, int64_t d, float inv, float* out) {
  for (int64_t k = 0; k < d / 2; ++k) {
    const float bs = E4m3ToFloat(sf[(2 * k) / 16]);
    out[2 * k] = (kE2m1[codes[k] & 15] * bs) * inv;
    out[2 * k + 1] = (kE2m1[codes[k] >> 4] * bs) * inv;
  }
}

// NVFP4 pages: c_latent [N, P, Dl/2], k_rope [N, P, Dr/2] uint8; c_latent_sf [N, P, Dl/16],
// k_rope_sf [N, P, Dr/16] float8_e4m3fn; global_scale [1] f32.
ffi::Error MlaDecodeNvfp4Cpu(ffi::AnyBuffer q_lat, ffi::AnyBuffer q_rope, ffi::AnyBuffer c_lat, ffi::AnyBuffer k_rope,
                             ffi::AnyBuffer c_lat_sf, ffi::AnyBuffer k_rope_sf, ffi::AnyBuffer global_scale,
                             ffi::Buffer<ffi::S32> page_table, ffi::Buffer<ffi::S32> kv_bounds, float softmax_scale,
                             ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                             ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  const char* tgt = "helix_mla_decode_nvfp4";
  MlaShape s;
  std::string err = CheckQuantShapes(q_lat, q_rope, {&c_lat, &k_rope, &c_lat_sf, &k_rope_sf}, {2, 2, 16, 16},
                                     page_table.dimensions(), kv_bounds.dimensions(), o->dimensions(),
                                     lse->dimensions(), &s);
  if (err.empty() && (c_lat.element_type() != ffi::DataType::U8 || k_rope.element_type() != ffi::DataType::U8))
    err = "c_latent/k_rope must be uint8 (two E2M1 codes per byte)";
  if (err.empty() && (c_lat_sf.element_type() != ffi::DataType::F8E4M3FN ||
                      k_rope_sf.element_type() != ffi::DataType::F8E4M3FN))
    err = "c_latent_sf/k_rope_sf must be float8_e4m3fn";
  float inv = 0.f;
  if (err.empty()) err = InvScale(global_scale, "global_scale", &inv);
  if (!err.empty()) return ffi::Error::InvalidArgument(std::string(tgt) + ": " + err);
  if (auto e = CheckQ(q_lat, q_rope, *o, tgt); e.failure()) return e;

  const auto* cl = static_cast<const uint8_t*>(c_lat.untyped_data());
  const auto* kr = static_cast<const uint8_t*>(k_rope.untyped_data());
  const auto* cls = static_cast<const uint8_t*>(c_lat_sf.untyped_data());
  const auto* krs = static_cast<const uint8_t*>(k_rope_sf.untyped_data());
  const int32_t* pt = page_table.typed_data();
  const int32_t* bounds = kv_bounds.typed_data();
  Reader ql{q_lat.element_type(), q_lat.untyped_data()}, qr{q_rope.element_type(), q_rope.untyped_data()};
  const int64_t Dl = s.Dl, Dr = s.Dr;
  std::vector<float> kv_l, kv_r;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t len = SeqLive(s, bounds, b);
    kv_l.assign(len * Dl, 0.f);
    kv_r.assign(len * Dr, 0.f);
    for (int64_t t = 0; t < len; ++t) {
      const int64_t row = PoolRow(s, pt, b, t);
      DequantNvfp4Row(cl + row * (Dl / 2), cls + row * (Dl / 16), Dl, inv, &kv_l[t * Dl]);
      DequantNvfp4Row(kr + row * (Dr / 2), krs + row * (Dr / 16), Dr, inv, &kv_r[t * Dr]);
    }
    DecodeSequence(s, b, bounds, kv_l, kv_r, ql, qr, softmax_scale, o->element_type(), o->untyped_data(),
                   lse->typed_data());
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace helix_ffi

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixMlaDecodeCpu, helix_ffi::MlaDecodeCpu,
                              helix_ffi::BindMlaDecode<helix_ffi::kMlaBuffersNative>(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixMlaDecodeFp8Cpu, helix_ffi::MlaDecodeFp8Cpu,
                              helix_ffi::BindMlaDecode<helix_ffi::kMlaBuffersFp8>(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixMlaDecodeNvfp4Cpu, helix_ffi::MlaDecodeNvfp4Cpu,
                              helix_ffi::BindMlaDecode<helix_ffi::kMlaBuffersNvfp4>(xla::ffi::Ffi::Bind()));
