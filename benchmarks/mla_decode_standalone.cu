// Standalone driver of the helix_mla_decode CUDA kernels (no XLA): checks each kernel variant against a
// double-precision CPU reference on a small unbalanced case, then times them on larger ones with CUDA
// events. Used on the H200 for compute-sanitizer (racecheck crashes under the JAX process) and to pick
// the variant. Build (from the repo root):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -diag-suppress 940,2473 -Xcompiler -Wno-return-type \
//     -I$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())') -Iffi/src \
//     benchmarks/mla_decode_standalone.cu -o /tmp/mla_standalone
//   /tmp/mla_standalone [small]      (small: correctness only, for the sanitizers)
//   -DHELIX_SS_TRACE: "load" first prints a clock64 timeline of the seesaw kernel (one CTA, tiles 40..47), and mode
//   "s8trace" one of mla_mid_q8s (one CTA's two consumers, tiles 40..51, and the mean step per tile)
//   m8rep V [N [ws|out|none]]: an fp8 mid kernel variant rerun N times on the ring-wrapping case, bitwise against the
//     first run; a differing run is traced to the segments (and CTAs) whose partials differ
//   load [H [path]]: only the timing shapes with this H, only this load path
//   combchk: the combine at 8 / 4 / 2 / 1 warps a row on small cases, against the double reference (for compute-sanitizer
//     with --kernel-name kns=mla_combine)
//   spread (-DHELIX_SS_TRACE): every seesaw CTA's start / end (globaltimer) and SM in one call per shape, the slowest named
// Quantized pages (fp8 / nvfp4, variants tile and pipe) are checked on random codes: the CPU reference
// dequantizes them with the float32 formulas of helix_jax/quant.py, then runs the same double decode.
#include "../ffi/src/mla_decode_cuda.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace helix_ffi;

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e = (x);                                                                    \
    if (e != cudaSuccess) { std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); std::exit(2); } \
  } while (0)

static uint16_t F2Bf(float f) { uint32_t b; std::memcpy(&b, &f, 4); b += 0x7FFF + ((b >> 16) & 1); return b >> 16; }
static float Bf2F(uint16_t v) { uint32_t b = (uint32_t)v << 16; float f; std::memcpy(&f, &b, 4); return f; }

struct Case {
  int B, G, H, P, npp, N;
  std::vector<int> bounds, table;
  std::vector<uint16_t> ql, qr, cl, kr;
  std::vector<float> dl, dr;  // KV values the reference uses: bf16 pool, or the dequantized codes
  std::vector<float> qlf, qrf;  // query values the reference uses: bf16 queries, or their fp8 round trip
};

static Case MakeCase(int B, int G, int H, int P, const std::vector<int>& lens, unsigned seed) {
  Case c{B, G, H, P, 0, 0};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  int maxlen = 1;
  for (int l : lens) maxlen = std::max(maxlen, l);
  c.npp = (maxlen + P - 1) / P;
  c.N = B * c.npp;
  c.bounds.resize(B * G);
  for (int b = 0; b < B; ++b)
    for (int g = 0; g < G; ++g) c.bounds[b * G + g] = std::max(0, lens[b] - (G - 1) + g - (b % 3 == 2 && g == 0 ? lens[b] : 0));
  c.table.resize(B * c.npp);
  for (int i = 0; i < B * c.npp; ++i) c.table[i] = i;
  std::shuffle(c.table.begin(), c.table.end(), rng);
  auto fill = [&](std::vector<uint16_t>& v, size_t n) { v.resize(n); for (auto& x : v) x = F2Bf(nd(rng)); };
  fill(c.ql, (size_t)B * G * H * 512); fill(c.qr, (size_t)B * G * H * 64);
  fill(c.cl, (size_t)c.N * P * 512); fill(c.kr, (size_t)c.N * P * 64);
  c.dl.resize(c.cl.size()); c.dr.resize(c.kr.size());
  for (size_t i = 0; i < c.cl.size(); ++i) c.dl[i] = Bf2F(c.cl[i]);
  for (size_t i = 0; i < c.kr.size(); ++i) c.dr[i] = Bf2F(c.kr[i]);
  c.qlf.resize(c.ql.size()); c.qrf.resize(c.qr.size());
  for (size_t i = 0; i < c.ql.size(); ++i) c.qlf[i] = Bf2F(c.ql[i]);
  for (size_t i = 0; i < c.qr.size(); ++i) c.qrf[i] = Bf2F(c.qr[i]);
  // Poison every pool slot past its sequence's bound with NaN (the kernels must never let one reach the
  // output); the reference reads only slots below the bounds (dl / dr keep the random values).
  for (int b = 0; b < B; ++b) {
    int len = 0;
    for (int g = 0; g < G; ++g) len = std::max(len, c.bounds[b * G + g]);
    for (int t = len; t < c.npp * P; ++t) {
      const size_t row = (size_t)c.table[b * c.npp + t / P] * P + t % P;
      for (int e = 0; e < 512; ++e) c.cl[row * 512 + e] = 0x7FC0;
      for (int e = 0; e < 64; ++e) c.kr[row * 64 + e] = 0x7FC0;
    }
  }
  return c;
}

// -- quantized pages: random codes (no NaN code), host dequant as in helix_jax/quant.py ----------
static float HostE4m3(uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  const float mag = e == 0 ? std::ldexp((float)m, -9) : std::ldexp((float)(8 + m), e - 10);
  return (v & 0x80) ? -mag : mag;
}
static const float kHostE2m1[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

// Host/device code generators: fp8 codes avoid the NaN pattern; nvfp4 block scales are positive E4M3
// with exponent field 4..10 (0.125 .. 15) so values stay O(1..100).
__host__ __device__ inline uint8_t GenFp8(uint32_t h) { uint8_t b = h & 0xFF; return (b & 0x7F) == 0x7F ? b ^ 1 : b; }
__host__ __device__ inline uint8_t GenSf(uint32_t h) { return (uint8_t)((((h & 0xFF) % 7 + 4) << 3) | ((h >> 8) & 7)); }

// Round-to-nearest-even E4M3 (saturating at 448) by search over the 127 finite magnitudes.
static uint8_t HostToE4m3(float x) {
  const float a = std::fabs(x);
  int best = 0;
  for (int v = 1; v < 0x7F; ++v) {
    const float dv = std::fabs(HostE4m3((uint8_t)v) - a), db = std::fabs(HostE4m3((uint8_t)best) - a);
    if (dv < db || (dv == db && (v & 1) == 0)) best = v;
  }
  return (uint8_t)(best | (x < 0 ? 0x80 : 0));
}

// kWgmmaFp8Qk reference queries: per query row (576 values) s = 448/amax, q -> E4M3(q*s) * fl32(1/s).
static void QuantizeQueriesFp8(Case& c) {
  const size_t rows = c.ql.size() / 512;
  volatile float one = 1.f;
  for (size_t r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int k = 0; k < 512; ++k) amax = std::max(amax, std::fabs(Bf2F(c.ql[r * 512 + k])));
    for (int k = 0; k < 64; ++k) amax = std::max(amax, std::fabs(Bf2F(c.qr[r * 64 + k])));
    const float sc = amax > 0.f ? 448.f / amax : 1.f, inv = one / sc;
    for (int k = 0; k < 512; ++k) c.qlf[r * 512 + k] = HostE4m3(HostToE4m3(Bf2F(c.ql[r * 512 + k]) * sc)) * inv;
    for (int k = 0; k < 64; ++k) c.qrf[r * 64 + k] = HostE4m3(HostToE4m3(Bf2F(c.qr[r * 64 + k]) * sc)) * inv;
  }
}

// mla_small_q8's queries: two E4M3 terms per row (Q8FromQ): x = q*s_hi (f32), s_hi = 448/amax, hi = RNE_sat(x),
// lo = RNE_sat((x - hi)*s_lo), s_lo = 448/max|x - hi|; the kernel's value hi*fl32(1/s_hi) + lo*fl32(1/(s_hi*s_lo)).
// Checking against it is rounding-level (the unquantized-Q accuracy is the GPU format tests' business).
static void QuantizeQueriesFp8Two(Case& c) {
  const size_t rows = c.ql.size() / 512;
  volatile float v448 = 448.f, one = 1.f;
  std::vector<float> x(576);
  for (size_t r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int k = 0; k < 576; ++k) {
      x[k] = k < 512 ? Bf2F(c.ql[r * 512 + k]) : Bf2F(c.qr[r * 64 + k - 512]);
      amax = std::max(amax, std::fabs(x[k]));
    }
    const float s_hi = amax > 0.f ? v448 / amax : 1.f;
    float rmax = 0.f;
    std::vector<float> xs(576), hi(576);
    for (int k = 0; k < 576; ++k) {
      xs[k] = x[k] * s_hi;
      hi[k] = HostE4m3(HostToE4m3(xs[k]));
      rmax = std::max(rmax, std::fabs(xs[k] - hi[k]));
    }
    const float s_lo = rmax > 0.f ? v448 / rmax : 1.f;
    const float f_hi = one / s_hi, f_lo = one / (s_hi * s_lo);
    for (int k = 0; k < 576; ++k) {
      const float lo = HostE4m3(HostToE4m3((xs[k] - hi[k]) * s_lo));
      const float q = (float)((double)hi[k] * f_hi + (double)lo * f_lo);
      if (k < 512) c.qlf[r * 512 + k] = q; else c.qrf[r * 64 + k - 512] = q;
    }
  }
}

struct QHost {
  int fmt;
  float scale;
  std::vector<uint8_t> lat, rope, lat_sf, rope_sf;
};

// Replaces the case's reference values by the dequantized random codes of `fmt`.
static QHost MakeQuant(Case& c, int fmt, unsigned seed) {
  std::mt19937 rng(seed);
  QHost q{fmt, fmt == kFmtFp8 ? 37.f : 60.f, {}, {}, {}, {}};
  const size_t rows = (size_t)c.N * c.P;
  volatile float one = 1.f;
  const float inv = one / q.scale;
  if (fmt == kFmtFp8) {
    q.lat.resize(rows * 512); q.rope.resize(rows * 64);
    for (auto& x : q.lat) x = GenFp8(rng());
    for (auto& x : q.rope) x = GenFp8(rng());
    for (size_t i = 0; i < q.lat.size(); ++i) c.dl[i] = HostE4m3(q.lat[i]) * inv;
    for (size_t i = 0; i < q.rope.size(); ++i) c.dr[i] = HostE4m3(q.rope[i]) * inv;
  } else {
    q.lat.resize(rows * 256); q.rope.resize(rows * 32); q.lat_sf.resize(rows * 32); q.rope_sf.resize(rows * 4);
    for (auto* v : {&q.lat, &q.rope}) for (auto& x : *v) x = rng() & 0xFF;
    for (auto* v : {&q.lat_sf, &q.rope_sf}) for (auto& x : *v) x = GenSf(rng());
    auto deq = [&](const std::vector<uint8_t>& codes, const std::vector<uint8_t>& sf, int d, std::vector<float>& out) {
      for (size_t r = 0; r < rows; ++r)
        for (int k = 0; k < d; ++k) {
          const uint8_t byte = codes[r * (d / 2) + k / 2];
          const float e = kHostE2m1[(k & 1) ? byte >> 4 : byte & 15];
          out[r * d + k] = (e * HostE4m3(sf[r * (d / 16) + k / 16])) * inv;
        }
    };
    deq(q.lat, q.lat_sf, 512, c.dl);
    deq(q.rope, q.rope_sf, 64, c.dr);
  }
  return q;
}

static QParams UploadQuant(const QHost& q) {
  QParams qp{};
  auto up = [](const std::vector<uint8_t>& v) -> const uint8_t* {
    if (v.empty()) return nullptr;
    uint8_t* p; CK(cudaMalloc(&p, v.size())); CK(cudaMemcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice)); return p; };
  qp.kv_lat8 = up(q.lat); qp.kv_rope8 = up(q.rope); qp.lat_sf = up(q.lat_sf); qp.rope_sf = up(q.rope_sf);
  float* sc; CK(cudaMalloc(&sc, 4)); CK(cudaMemcpy(sc, &q.scale, 4, cudaMemcpyHostToDevice));
  qp.kv_scale = sc;
  return qp;
}

static void FreeQuant(QParams& qp) {
  for (const void* p : {(const void*)qp.kv_lat8, (const void*)qp.kv_rope8, (const void*)qp.lat_sf, (const void*)qp.rope_sf,
                        (const void*)qp.kv_scale})
    if (p) CK(cudaFree(const_cast<void*>(p)));
}

struct Dev {
  uint16_t *ql, *qr, *cl, *kr, *o; int *pt, *bd; float* lse; char* ws; Params p; int num_sms;
};

static Dev Upload(const Case& c, float scale) {
  Dev d{};
  auto up = [](auto*& dst, const auto& v) { CK(cudaMalloc(&dst, v.size() * sizeof(v[0]))); CK(cudaMemcpy(dst, v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice)); };
  up(d.ql, c.ql); up(d.qr, c.qr); up(d.cl, c.cl); up(d.kr, c.kr); up(d.pt, c.table); up(d.bd, c.bounds);
  const int GH = c.G * c.H;
  CK(cudaMalloc(&d.o, (size_t)c.B * GH * 512 * 2)); CK(cudaMalloc(&d.lse, (size_t)c.B * GH * 4));
  CK(cudaMalloc(&d.ws, Layout(c.B, GH).total));
  d.p = Params{d.ql, d.qr, d.cl, d.kr, d.pt, d.bd, nullptr, nullptr, c.B, c.G, c.H, GH, c.P, c.npp, c.N, c.npp * c.P, scale * kLog2e};
  CK(cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, 0));
  return d;
}

static void Free(Dev& d) {
  for (void* p : {(void*)d.ql, (void*)d.qr, (void*)d.cl, (void*)d.kr, (void*)d.o, (void*)d.pt, (void*)d.bd, (void*)d.lse, (void*)d.ws}) CK(cudaFree(p));
}

// part: 0 = whole call (main + combine), 1 = main kernel only, 3 = the combine alone (after a whole call
// wrote the partials and the per-sequence segment ranges). g_wide: the combine kernel (-1: Launch's rule, 0 / 1: force).
static int g_wide = -1;
template <int kMode, int kFmt = kFmtNative, int kVar = 0>
static void Run(Dev& d, const QParams& qp = QParams{}, int part = 0) {
  Params p = d.p;
  const int mtiles = (p.GH + kRowsTile - 1) / kRowsTile;
  const int num_parts = MainParts<true>(p, d.num_sms, mtiles, kMode == kSeesaw && kFmt == kFmtNative, kVar);
  const WsLayout l = Layout(p.B, p.GH);
  Sched s{reinterpret_cast<int4*>(d.ws + l.seg), reinterpret_cast<int2*>(d.ws + l.part), reinterpret_cast<int2*>(d.ws + l.batch),
          num_parts, SegCost(false)};  // (auto: 1 for every kernel here)
  p.lse_part = reinterpret_cast<float*>(d.ws + l.lse);
  p.o_part = reinterpret_cast<uint16_t*>(d.ws + l.o);
  if (part <= 1) CK((LaunchMain<true, kMode, kFmt, kVar>(p, s, num_parts, mtiles, 0, qp)));
  if (part == 0 || part == 3) LaunchCombine<true>(p, s, num_parts, d.num_sms, d.o, d.lse, 0, g_wide);
  CK(cudaGetLastError());
}

// lse tolerance of Check (absolute, natural log). 2e-2 everywhere except mla_small_q8's default S accumulation, whose
// budget on full-range E4M3 codes is 3e-2 (the fp8 tensor cores' accumulator; see the q8 mode).
static double g_lse_tol = 2e-2;

static double Check(const Case& c, const Dev& d, float scale) {
  const int GH = c.G * c.H;
  std::vector<uint16_t> o((size_t)c.B * GH * 512);
  std::vector<float> lse((size_t)c.B * GH);
  CK(cudaMemcpy(o.data(), d.o, o.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse.data(), d.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0, lse_err = 0;
  bool bad = false;
  std::vector<double> lg, acc(512);
  for (int b = 0; b < c.B; ++b)
    for (int g = 0; g < c.G; ++g) {
      const int n = c.bounds[b * c.G + g];
      for (int h = 0; h < c.H; ++h) {
        const size_t r = ((size_t)b * c.G + g) * c.H + h;
        if (n == 0) {
          bad |= !(std::isinf(lse[r]) && lse[r] < 0);
          for (int k = 0; k < 512; ++k) bad |= Bf2F(o[r * 512 + k]) != 0.f;
          continue;
        }
        lg.assign(n, 0);
        double m = -1e300;
        for (int t = 0; t < n; ++t) {
          const size_t row = (size_t)c.table[b * c.npp + t / c.P] * c.P + t % c.P;
          double dot = 0;
          for (int k = 0; k < 512; ++k) dot += (double)c.qlf[r * 512 + k] * c.dl[row * 512 + k];
          for (int k = 0; k < 64; ++k) dot += (double)c.qrf[r * 64 + k] * c.dr[row * 64 + k];
          lg[t] = dot * scale;
          m = std::max(m, lg[t]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t = 0; t < n; ++t) {
          const size_t row = (size_t)c.table[b * c.npp + t / c.P] * c.P + t % c.P;
          const double w = std::exp(lg[t] - m);
          sum += w;
          for (int k = 0; k < 512; ++k) acc[k] += w * c.dl[row * 512 + k];
        }
        for (int k = 0; k < 512; ++k) {
          const double ref = acc[k] / sum, got = Bf2F(o[r * 512 + k]);
          if (std::isnan(got)) bad = true;
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
        lse_err = std::max(lse_err, std::fabs(lse[r] - (m + std::log(sum))));
      }
    }
  const double err = std::sqrt(num / std::max(den, 1e-300));
  std::printf("  o rel err %.2e, lse max err %.2e, identity rows %s\n", err, lse_err, bad ? "WRONG" : "ok");
  return (bad || !(lse_err < g_lse_tol)) ? 1.0 : err;
}

// Poisons the outputs (NaN), runs `run`, checks against the double reference; true on PASS.
template <typename F>
static bool RunChecked(const Case& c, Dev& d, float scale, F run, const char* note = "") {
  CK(cudaMemset(d.o, 0xFF, (size_t)c.B * c.G * c.H * 512 * 2));
  CK(cudaMemset(d.lse, 0xFF, (size_t)c.B * c.G * c.H * 4));
  run();
  CK(cudaDeviceSynchronize());
  const bool ok = Check(c, d, scale) < 2e-2;
  std::printf("  %s%s\n", ok ? "PASS" : "FAIL", note);
  return ok;
}

// The fp8 G*H > 16 kernels by the driver's variant number V (modes m8chk, m8rep): 0 / 128 mla_mid_q8 (TMA / cp.async
// tiles), 16384 / 16512 mla_mid_q8s (TMA / cp.async), 16896 / 17920 mla_mid_q8s with S chains added in f32 (four / two
// per 32-token half). Returns false (and runs nothing) for any other V.
static bool RunMidVariant(int V, Dev& d, const QParams& qp) {
  switch (V) {
    case 0: Run<kMidQ8, kFmtFp8>(d, qp); return true;
    case 128: Run<kMidQ8, kFmtFp8, 128>(d, qp); return true;
    case 16384: Run<kMidQ8, kFmtFp8, 16384>(d, qp); return true;
    case 16512: Run<kMidQ8, kFmtFp8, 16384 | 128>(d, qp); return true;
    case 16896: Run<kMidQ8, kFmtFp8, 16384 | 512>(d, qp); return true;
    case 17920: Run<kMidQ8, kFmtFp8, 16384 | 512 | 1024>(d, qp); return true;
    default: return false;
  }
}
static bool IsMidVariant(int V) { return V == 0 || V == 128 || V == 16384 || V == 16512 || V == 16896 || V == 17920; }

#ifdef HELIX_SS_TRACE
// One traced call: clears the kernel's clock64 stamp table `sym` ([E][kTrTiles]), runs `run`, copies the table into tr;
// returns the SM clock attribute (kHz) to convert stamps to time.
template <int E, typename Sym, typename F>
static int TraceCall(const Sym& sym, long long (&tr)[E][kTrTiles], F run) {
  static long long zero[E][kTrTiles] = {};
  CK(cudaMemcpyToSymbol(sym, zero, sizeof(zero)));
  run();
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpyFromSymbol(tr, sym, sizeof(tr)));
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  return khz;
}
// Tiles k0 .. k1 - 1 of a stamp table, one column per event (width w), in us from tile k0's stamp of event e0; -1: not
// stamped.
template <int E>
static void PrintTimeline(const long long (&tr)[E][kTrTiles], const char* const (&names)[E], int khz, int e0, int k0, int k1,
                          int w) {
  std::printf("tile");
  for (int e = 0; e < E; ++e) std::printf(" %*s", w, names[e]);
  std::printf("\n");
  const long long t0 = tr[e0][k0];
  for (int k = k0; k < k1; ++k) {
    std::printf("%4d", k);
    for (int e = 0; e < E; ++e) std::printf(" %*.2f", w, tr[e][k] ? (tr[e][k] - t0) * 1e3 / khz : -1.0);
    std::printf("\n");
  }
}
#endif

// One warp per part, as the main kernels plan: its range into part[q], its segments into seg[]; part 0 writes batch[].
__global__ void PlanCheck(const int* bounds, int B, int G, int cap, int parts, int4* seg, int2* part, int2* batch, int ov) {
  const int2 range = PlanPart(bounds, B, G, cap, parts, blockIdx.x, seg, blockIdx.x == 0 ? batch : nullptr, ov);
  if (threadIdx.x == 0) part[blockIdx.x] = range;
}

__global__ void FillRandom(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = __bfloat16_as_ushort(__float2bfloat16(((h & 0xFFFF) / 65536.f - 0.5f) * 4.f));
  }
}

// Timing case: data generated on the device (host RNG over gigabytes would dominate the run).
// l2: every page-table entry points into the first 64 pages (4.7 MB, L2-resident): the kernel's
// ceiling without HBM latency or bandwidth.
static Dev UploadTiming(int B, int G, int H, int P, int L, float scale, bool l2 = false) {
  Case c{B, G, H, P, (L + P - 1) / P, 0};
  c.N = B * c.npp;
  c.bounds.assign(B * G, L);
  c.table.resize(B * c.npp);
  for (int i = 0; i < B * c.npp; ++i) c.table[i] = i;
  std::shuffle(c.table.begin(), c.table.end(), std::mt19937(3));
  if (l2) for (int& x : c.table) x %= 64;
  Dev d{};
  auto alloc = [](uint16_t*& p, size_t n, uint32_t seed) { CK(cudaMalloc(&p, n * 2)); FillRandom<<<1024, 256>>>(p, n, seed); CK(cudaGetLastError()); };
  const int GH = G * H;
  alloc(d.ql, (size_t)B * GH * 512, 1); alloc(d.qr, (size_t)B * GH * 64, 2);
  alloc(d.cl, (size_t)c.N * P * 512, 3); alloc(d.kr, (size_t)c.N * P * 64, 4);
  CK(cudaMalloc(&d.pt, c.table.size() * 4)); CK(cudaMemcpy(d.pt, c.table.data(), c.table.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&d.bd, c.bounds.size() * 4)); CK(cudaMemcpy(d.bd, c.bounds.data(), c.bounds.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&d.o, (size_t)B * GH * 512 * 2)); CK(cudaMalloc(&d.lse, (size_t)B * GH * 4));
  CK(cudaMalloc(&d.ws, Layout(B, GH).total));
  d.p = Params{d.ql, d.qr, d.cl, d.kr, d.pt, d.bd, nullptr, nullptr, B, G, H, GH, P, c.npp, c.N, c.npp * P, scale * kLog2e};
  CK(cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, 0));
  return d;
}

__global__ void FillCodes(uint8_t* x, size_t n, uint32_t seed, int kind) {  // kind 0: fp8, 1: raw byte, 2: block scale
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = kind == 0 ? GenFp8(h) : kind == 1 ? (uint8_t)(h & 0xFF) : GenSf(h);
  }
}

// Device-generated quantized pools for the timing shapes (same row count as the bf16 pools of `d`).
static QParams QuantTiming(const Dev& d, int fmt) {
  const size_t rows = (size_t)d.p.N * d.p.P;
  QParams qp{};
  auto alloc = [](size_t n, uint32_t seed, int kind) -> const uint8_t* {
    uint8_t* p; CK(cudaMalloc(&p, n)); FillCodes<<<1024, 256>>>(p, n, seed, kind); CK(cudaGetLastError()); return p; };
  if (fmt == kFmtFp8) {
    qp.kv_lat8 = alloc(rows * 512, 5, 0); qp.kv_rope8 = alloc(rows * 64, 6, 0);
  } else {
    qp.kv_lat8 = alloc(rows * 256, 5, 1); qp.kv_rope8 = alloc(rows * 32, 6, 1);
    qp.lat_sf = alloc(rows * 32, 7, 2); qp.rope_sf = alloc(rows * 4, 8, 2);
  }
  const float scale = 37.f;
  float* sc; CK(cudaMalloc(&sc, 4)); CK(cudaMemcpy(sc, &scale, 4, cudaMemcpyHostToDevice));
  qp.kv_scale = sc;
  return qp;
}

// The decoding seesaws' L=64K timing case (P=64) of one shape with pages of format fmt: quantized parameters with
// (q1) and without (q0) the next raw tile's L2 prefetch.
struct DsCase { Dev d; QParams q1, q0; };
static DsCase DsTimingCase(int B, int G, int H, int fmt, float scale) {
  DsCase c{UploadTiming(B, G, H, 64, 65536, scale), {}, {}};
  c.q1 = c.q0 = QuantTiming(c.d, fmt);
  c.q1.l2_next = 1;
  c.q0.l2_next = 0;
  return c;
}

template <int kMode, int kFmt = kFmtNative, int kVar = 0>
static float TimeMs(Dev& d, int iters, const QParams& qp = QParams{}, int part = 0) {
  Run<kMode, kFmt, kVar>(d, qp);
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) Run<kMode, kFmt, kVar>(d, qp, part);
  CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / iters;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered: a hang or timeout keeps what was printed
  const bool small = argc > 1 && std::strcmp(argv[1], "small") == 0;
  const bool qsmall = argc > 1 && std::strcmp(argv[1], "qsmall") == 0;  // checks + quantized small-G*H timing only
  const bool load = argc > 1 && std::strcmp(argv[1], "load") == 0;      // checks + seesaw load-path timings only
  const float scale = 0.0721f;
  struct CaseDef { int B, G, H, P; std::vector<int> lens; };
  // The fp8 G*H > 16 check cases of the "m8" (mla_mid_q8) and "s8" (mla_mid_q8s) modes.
  const std::vector<CaseDef> mid_cases = {
        {4, 4, 16, 64, {1000, 0, 77, 130}},
        {5, 2, 12, 16, {1, 64, 3000, 129, 191}},      // G*H = 24; 16-token pages: cp.async tiles
        {3, 5, 8, 128, {4097, 65, 2}},                // G*H = 40; TMA inside 128-token pages
        {2, 1, 17, 32, {700, 33}},                    // G*H = 17
        {16, 4, 16, 64, std::vector<int>(16, 8192)},  // ~15 tiles per CTA: the ring wraps
        // G*H > 64: one CTA per 64 query rows (grid y), each with its own Q, over the same KV tiles
        {3, 1, 128, 64, {5000, 1, 300}},              // G*H = 128: two full row tiles
        {2, 5, 16, 16, {3000, 70}},                   // G*H = 80: the second row tile has 16 rows; cp.async tiles
        {2, 4, 64, 128, {2500, 129}},                 // G*H = 256: four row tiles, 128-token pages
    };
  if (argc > 1 && std::strcmp(argv[1], "combchk") == 0) {
    // mla_combine with 8 / 4 / 2 / 1 warps a row (CombWarpsPerRowLog2 of the seesaw's parts), each case checked against
    // the double reference; small enough for compute-sanitizer (--kernel-name kns=mla_combine) (session 43).
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const std::vector<CaseDef> cases = {
        {4, 4, 16, 64, {2000, 700, 65, 3000}},                       // 1 row tile, 132 parts: 8 warps a row
        {6, 1, 128, 64, {900, 1, 640, 2049, 300, 77}},               // 2 row tiles: 4 warps a row
        {12, 1, 128, 64, {500, 64, 1000, 3, 700, 128, 129, 90, 400, 2000, 10, 260}},  // 2 warps a row
        {40, 2, 64, 64, std::vector<int>(40, 150)},                  // 1 warp a row
    };
    bool all = true;
    for (const CaseDef& cd : cases) {
      Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 11);
      Dev d = Upload(c, scale);
      const int mtiles = (cd.G * cd.H + kRowsTile - 1) / kRowsTile;
      const int parts = MainParts<true>(d.p, d.num_sms, mtiles, true);
      std::printf("combchk B=%d G=%d H=%d: parts %d, %d warps a row, %s\n", cd.B, cd.G, cd.H, parts,
                  1 << CombWarpsPerRowLog2(cd.B, parts), CombineWide(cd.B, cd.G * cd.H, parts, sms) ? "wide" : "narrow");
      all &= RunChecked(c, d, scale, [&] { Run<kSeesaw>(d); });
      Free(d);
    }
    std::printf("combchk: %s\n", all ? "all PASS" : "NOT ALL");
    return all ? 0 : 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "comb") == 0) {  // the two combine kernels alone, per shape (L=64K, P=64)
    struct S { int B, G, H; };
    for (S sh : {S{1, 1, 128}, S{1, 4, 64}, S{1, 4, 16}, S{1, 1, 16}, S{4, 1, 128}, S{4, 4, 16}, S{8, 1, 16}, S{8, 1, 128},
                 S{16, 1, 128}, S{16, 4, 16}, S{16, 1, 16}, S{16, 4, 64}, S{32, 1, 16}, S{32, 4, 16}, S{64, 1, 16}}) {
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale);
      const bool small = sh.G * sh.H <= kSmRows;
      const int mtiles = (sh.G * sh.H + kRowsTile - 1) / kRowsTile;
      // the load path auto picks: multicast (64) where row tiles pair, else TMA evict-first (32)
      const int parts = MainParts<true>(d.p, d.num_sms, mtiles, !small, mtiles >= 2 ? 64 : 32);
      float t[2];
      for (int w = 0; w < 2; ++w) {
        g_wide = w;
        t[w] = small ? TimeMs<kSmallGh, kFmtNative, 32>(d, 50, QParams{}, 3)
               : mtiles >= 2 ? TimeMs<kSeesaw, kFmtNative, 64>(d, 50, QParams{}, 3)
                             : TimeMs<kSeesaw, kFmtNative, 32>(d, 50, QParams{}, 3);
      }
      g_wide = -1;
      std::printf("comb B=%d G=%d H=%d parts %d rows %d: narrow %.1f us, wide %.1f us (rule picks %s)\n", sh.B, sh.G, sh.H,
                  parts, sh.B * sh.G * sh.H, t[0] * 1e3, t[1] * 1e3, CombineWide(sh.B, sh.G * sh.H, parts, d.num_sms) ? "wide" : "narrow");
      Free(d);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "q8var") == 0) {  // raw-tile kernel variants, alternating, 5 rounds
    // bf16 small kernel | mla_small_q8: default, 256 (every consumer thread arrives on empty), 512 (S promoted to f32
    // per block) | mla_small_q4: default, 256.
    for (int B : {64, 128}) {
      Dev d = UploadTiming(B, 1, 16, 64, 65536, scale);
      QParams qp = QuantTiming(d, kFmtFp8), qp4 = QuantTiming(d, kFmtNvfp4);
      for (int r = 0; r < 5; ++r) {
        const float bf = TimeMs<kSmallGh, kFmtNative, 32>(d, 10);
        const float t0 = TimeMs<kSmallQ8, kFmtFp8>(d, 10, qp), t256 = TimeMs<kSmallQ8, kFmtFp8, 256>(d, 10, qp),
                    t512 = TimeMs<kSmallQ8, kFmtFp8, 512>(d, 10, qp);
        const float f0 = TimeMs<kSmallQ4, kFmtNvfp4>(d, 10, qp4), f256 = TimeMs<kSmallQ4, kFmtNvfp4, 256>(d, 10, qp4);
        std::printf("q8var B=%d round %d: bf16 %.4f | q8 %.4f (%.3fx) | all-lane (256) %.4f (%.3fx) | S promoted (512) %.4f (%.3fx)"
                    " | q4 %.4f (%.3fx) | q4 all-lane (256) %.4f (%.3fx)\n",
                    B, r, bf, t0, bf / t0, t256, bf / t256, t512, bf / t512, f0, bf / f0, f256, bf / f256);
      }
      FreeQuant(qp);
      FreeQuant(qp4);
      Free(d);
    }
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "m8rep") == 0) {
    // Determinism of the fp8 G*H > 16 kernels on the ring-wrapping case (16 x 8192 tokens, G=4, H=16): "m8rep V [N [poison]]"
    // checks the first run against the double reference, then reruns N times and counts the runs whose o / lse differ
    // bitwise from the first. poison: "ws" (default: outputs and the workspace poisoned before every run, the workspace
    // alternately with NaN bytes and zeros: under XLA it is a scratch buffer with whatever an earlier computation left),
    // "out" (outputs only) or "none". A differing run is traced to the segment partials: each segment's o / lse partial is
    // compared with the first run's, and the segments that differ are printed with their part (CTA), place in the part,
    // tile counts and the tile index range (kbase) the CTA's ring had reached. compute-sanitizer's racecheck does not see
    // TMA (async-proxy) writes, so a release that lets a refill overwrite bytes still being read shows up here, not there.
    // V: as m8chk (RunMidVariant).
    const int V = std::atoi(argv[2]), N = argc > 3 ? std::atoi(argv[3]) : 20;
    const char* poison = argc > 4 ? argv[4] : "ws";
    const bool pois_ws = std::strcmp(poison, "ws") == 0, pois_out = pois_ws || std::strcmp(poison, "out") == 0;
    if (!IsMidVariant(V) || !(pois_out || std::strcmp(poison, "none") == 0)) {
      std::printf("m8rep V [N [ws|out|none]]: unknown variant %d (0, 128, 16384, 16512, 16896, 17920) or poison %s\n", V, poison);
      return 2;
    }
    Case c = MakeCase(16, 4, 16, 64, std::vector<int>(16, 8192), 65);
    QHost qh = MakeQuant(c, kFmtFp8, 67);
    if (V < 16384) QuantizeQueriesFp8Two(c);
    Dev d = Upload(c, scale);
    QParams qp = UploadQuant(qh);
    g_lse_tol = 3e-2;
    auto run = [&] { RunMidVariant(V, d, qp); };
    const int GH = c.G * c.H;
    const WsLayout l = Layout(c.B, GH);
    CK(cudaMemset(d.ws, 0xFF, l.total));
    const bool ok = RunChecked(c, d, scale, run);
    const size_t no = (size_t)c.B * GH * 512, nl = (size_t)c.B * GH;
    std::vector<uint16_t> o0(no), o1(no);
    std::vector<float> l0(nl), l1(nl);
    CK(cudaMemcpy(o0.data(), d.o, no * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(l0.data(), d.lse, nl * 4, cudaMemcpyDeviceToHost));
    // The first run's plan and segment partials (the plan is the same every run: bounds and SM count fixed).
    std::vector<int2> batch(c.B), part(kMaxParts);
    std::vector<int4> seg(c.B + kMaxParts);
    CK(cudaMemcpy(batch.data(), d.ws + l.batch, c.B * sizeof(int2), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(part.data(), d.ws + l.part, kMaxParts * sizeof(int2), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(seg.data(), d.ws + l.seg, seg.size() * sizeof(int4), cudaMemcpyDeviceToHost));
    const int nseg = batch[c.B - 1].x + batch[c.B - 1].y;
    std::vector<uint16_t> po0((size_t)nseg * GH * 512), po1(po0.size());
    std::vector<float> pl0((size_t)nseg * GH), pl1(pl0.size());
    auto get_parts = [&](std::vector<uint16_t>& po, std::vector<float>& pl) {
      CK(cudaMemcpy(po.data(), d.ws + l.o, po.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(pl.data(), d.ws + l.lse, pl.size() * 4, cudaMemcpyDeviceToHost));
    };
    get_parts(po0, pl0);
    int differ = 0;
    for (int r = 0; r < N; ++r) {
      if (pois_out) {
        CK(cudaMemset(d.o, 0xFF, no * 2));
        CK(cudaMemset(d.lse, 0xFF, nl * 4));
      }
      if (pois_ws) CK(cudaMemset(d.ws, r & 1 ? 0x00 : 0xFF, l.total));  // alternately zero and NaN bytes
      run();
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(o1.data(), d.o, no * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(l1.data(), d.lse, nl * 4, cudaMemcpyDeviceToHost));
      if (std::memcmp(o0.data(), o1.data(), no * 2) == 0 && std::memcmp(l0.data(), l1.data(), nl * 4) == 0) continue;
      if (++differ > 12) continue;  // the first 12 differing runs are traced
      get_parts(po1, pl1);
      std::printf("run %d differs; segments whose partials differ:\n", r + 1);
      for (int si = 0; si < nseg; ++si) {
        int rows = 0;
        double dmax = 0, lmax = 0;
        for (int q = 0; q < GH; ++q) {
          const size_t row = (size_t)si * GH + q;
          bool rd = std::memcmp(&pl0[row], &pl1[row], 4) != 0;
          if (rd && std::isfinite(pl0[row]) && std::isfinite(pl1[row])) lmax = std::max(lmax, (double)std::fabs(pl0[row] - pl1[row]));
          for (int k = 0; k < 512; ++k) {
            const float a = Bf2F(po0[row * 512 + k]), b = Bf2F(po1[row * 512 + k]);
            if (po0[row * 512 + k] != po1[row * 512 + k]) rd = true, dmax = std::max(dmax, (double)std::fabs(a - b));
          }
          rows += rd;
        }
        if (rows == 0) continue;
        int q = 0;
        while (q < kMaxParts && !(part[q].x <= si && si < part[q].y)) ++q;
        int kbase = 0;
        std::string segs;
        for (int i = part[q].x; i < part[q].y; ++i) {
          if (i < si) kbase += seg[i].z - seg[i].y;
          segs += (segs.empty() ? "" : ",") + std::to_string(seg[i].z - seg[i].y);
        }
        std::printf("  segment %d (b %d, tiles %d..%d): part %d, place %d of [%s] tiles, kbase %d; %d rows differ, "
                    "max |o diff| %.3g, max |lse diff| %.3g\n", si, seg[si].x, seg[si].y, seg[si].z, q, si - part[q].x,
                    segs.c_str(), kbase, rows, dmax, lmax);
      }
    }
    std::printf("m8rep %d (poison %s): reference check %s, %d of %d reruns differ bitwise from the first\n", V, poison,
                ok ? "PASS" : "FAIL", differ, N);
    FreeQuant(qp);
    Free(d);
    return ok && differ == 0 ? 0 : 1;
  }
  if (argc > 2 && std::strcmp(argv[1], "m8chk") == 0) {
    // One variant V of the fp8 G*H > 16 kernels (RunMidVariant) on a ring-wrapping case (16 x 8192 tokens, G=4, H=16),
    // for the sanitizers. mla_mid_q8's reference uses its two-scale Q terms; mla_mid_q8s's the unquantized queries.
    // "m8chk V G H": G x H query rows over 4 x 4096 tokens instead (G*H > 64: several row tiles).
    const int V = std::atoi(argv[2]);
    if (!IsMidVariant(V)) {
      std::printf("m8chk: unknown variant %d (0, 128, 16384, 16512, 16896, 17920)\n", V);
      return 2;
    }
    Case c = argc > 4 ? MakeCase(4, std::atoi(argv[3]), std::atoi(argv[4]), 64, std::vector<int>(4, 4096), 65)
                      : MakeCase(16, 4, 16, 64, std::vector<int>(16, 8192), 65);
    QHost qh = MakeQuant(c, kFmtFp8, 67);
    if (V < 16384) QuantizeQueriesFp8Two(c);
    Dev d = Upload(c, scale);
    QParams qp = UploadQuant(qh);
    g_lse_tol = 3e-2;
    const bool ok = RunChecked(c, d, scale, [&] { RunMidVariant(V, d, qp); });
    FreeQuant(qp);
    Free(d);
    return ok ? 0 : 1;
  }
  if (argc > 2 && (std::strcmp(argv[1], "q4chk") == 0 || std::strcmp(argv[1], "q8chk") == 0)) {
    // One variant V (0, 128, 256, 384) of mla_small_q4 / _q8 on the ring-wrapping check case (16 x 8192 tokens), for
    // the sanitizers: "q4chk V", "q8chk V".
    const bool q4 = argv[1][1] == '4';
    const int V = std::atoi(argv[2]);
    Case c = MakeCase(16, 1, 16, 64, std::vector<int>(16, 8192), 61);
    QHost qh = MakeQuant(c, q4 ? kFmtNvfp4 : kFmtFp8, 63);
    if (!q4) QuantizeQueriesFp8Two(c);
    Dev d = Upload(c, scale);
    QParams qp = UploadQuant(qh);
    bool ok = false;
    auto go = [&](auto v) {
      constexpr int kV = decltype(v)::value;
      ok = q4 ? RunChecked(c, d, scale, [&] { Run<kSmallQ4, kFmtNvfp4, kV>(d, qp); })
              : RunChecked(c, d, scale, [&] { Run<kSmallQ8, kFmtFp8, kV>(d, qp); });
    };
    switch (V) {
      case 0: go(std::integral_constant<int, 0>{}); break;
      case 128: go(std::integral_constant<int, 128>{}); break;
      case 256: go(std::integral_constant<int, 256>{}); break;
      case 384: go(std::integral_constant<int, 384>{}); break;
      default: std::printf("unknown variant\n"); return 2;
    }
    std::printf("%s V=%d: %s\n", argv[1], V, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  }
  if (argc > 2 && std::strcmp(argv[1], "dschk") == 0) {
    // The decoding seesaws (mla_seesaw with a decoding producer) on the ring-wrapping check case (16 x 8192 tokens,
    // G=4, H=16), for the sanitizers: "dschk nv4" (kLoad 6: f16 math, the default for bf16 queries), "dschk nv4bf16"
    // (kLoad 4: bf16 tiles), "dschk nv4stage" / "nv4stagebf16" (the staging slot, HELIX_MLA_DECODE_NV4_STAGE, on kLoad 6 /
    // 4), "dschk fp8" (kLoad 5: E4M3 tiles converted in place to f16); "dschk bf16": the bf16
    // seesaw on the same case (the consumers' code is the same: a control for racecheck's reports on their hand-offs).
    // "dschk pair" / "pairp": the bf16 seesaw under the pair schedule (HELIX_MLA_DECODE_SCHED=pair) with consumer-issued
    // copies (evict-first TMA) / with the producer's (TMA); "pairtail": consumer-issued copies on sequences whose last
    // tile is partial (the pool's NaN rows past each bound land in the tile and are zeroed before the PVs); "pairmc" /
    // "pairmctail": the pair form with multicast over two row tiles, issued by producer warps 0-1 (attempt 72; G = 8:
    // 128 rows).
    const std::string v = argv[2];
    const bool mc = v == "pairmc" || v == "pairmctail";
    const bool fp8 = v == "fp8", bf16 = v == "bf16", pair = v == "pair" || v == "pairp" || v == "pairtail" || mc;
    if (!fp8 && !bf16 && !pair && v != "nv4" && v != "nv4bf16" && v != "nv4stage" && v != "nv4stagebf16") {
      std::printf("dschk: unknown variant %s (nv4, nv4bf16, nv4stage, nv4stagebf16, fp8, bf16, pair, pairp, pairtail, "
                  "pairmc, pairmctail)\n",
                  argv[2]);
      return 2;
    }
    std::vector<int> lens(16, 8192);
    if (v == "pairtail" || v == "pairmctail") lens = {8000, 100, 63, 8191, 65, 1, 4097, 129, 8192, 7, 64, 191, 5000, 2, 3333, 127};
    Case c = MakeCase(16, mc ? 8 : 4, 16, 64, lens, 65);
    // (MakeQuant replaces the reference values by the dequantized codes: the bf16 control keeps the case's own)
    QParams qp{};
    if (!bf16 && !pair) {
      qp = UploadQuant(MakeQuant(c, fp8 ? kFmtFp8 : kFmtNvfp4, 67));
      qp.l2_next = 1;
    }
    Dev d = Upload(c, scale);
    const bool ok = RunChecked(c, d, scale, [&] {
      if (bf16) Run<kSeesaw>(d);
      else if (v == "pairp") Run<kSeesaw, kFmtNative, 2048 | 16>(d);  // (LaunchMain kVar 16: TMA, the producer's copies)
      else if (mc) Run<kSeesaw, kFmtNative, 2048 | 64>(d);            // (64: multicast TMA, producer warps 0-1's copies)
      else if (pair) Run<kSeesaw, kFmtNative, 2048 | 32>(d);          // (32: evict-first TMA, the consumers' copies)
      else if (fp8) Run<kSeesaw, kFmtFp8>(d, qp);
      else if (v == "nv4") Run<kSeesaw, kFmtNvfp4, 8>(d, qp);
      else if (v == "nv4stage") Run<kSeesaw, kFmtNvfp4, 8 | 16>(d, qp);
      else if (v == "nv4stagebf16") Run<kSeesaw, kFmtNvfp4, 16>(d, qp);
      else Run<kSeesaw, kFmtNvfp4>(d, qp);
    });
    std::printf("dschk %s: %s\n", argv[2], ok ? "PASS" : "FAIL");
    if (!bf16 && !pair) FreeQuant(qp);
    Free(d);
    return ok ? 0 : 1;
  }
  if (argc > 4 && std::strcmp(argv[1], "q4one") == 0) {
    // One whole mla_small_q4 call of variant V (0, 32, 64, 96, 128) at batch B, length L (G=1, H=16), synchronised:
    // "ok" or the CUDA error (a fault poisons the process: one variant per process).
    const int V = std::atoi(argv[2]), B = std::atoi(argv[3]), L = std::atoi(argv[4]);
    Dev d = UploadTiming(B, 1, 16, 64, L, scale);
    QParams qp = QuantTiming(d, kFmtNvfp4);
    CK(cudaDeviceSynchronize());
    switch (V) {
      case 0: Run<kSmallQ4, kFmtNvfp4, 0>(d, qp); break;
      case 32: Run<kSmallQ4, kFmtNvfp4, 32>(d, qp); break;
      case 64: Run<kSmallQ4, kFmtNvfp4, 64>(d, qp); break;
      case 96: Run<kSmallQ4, kFmtNvfp4, 96>(d, qp); break;
      case 128: Run<kSmallQ4, kFmtNvfp4, 128>(d, qp); break;
      default: std::printf("unknown variant\n"); return 2;
    }
    const cudaError_t e = cudaDeviceSynchronize();
    std::printf("q4one V=%d B=%d L=%d: %s\n", V, B, L, e == cudaSuccess ? "ok" : cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "q4") == 0) {
    // nvfp4 pages through mla_small_q4 (raw E2M1 tiles, both products' A operands decoded in registers): checks
    // against the double reference (block scales of every pool row past a bound poisoned with NaN), then timings
    // at H=16, G=1 against the bf16 small kernel and the producer-dequantizing nvfp4 kernel. "q4 999": checks only.
    const bool checks_only = argc > 2 && std::atoi(argv[2]) == 999;
    const std::vector<CaseDef> q4_cases = {
        {4, 1, 16, 64, {1000, 0, 77, 130}},
        {5, 2, 5, 16, {1, 64, 3000, 129, 191}},
        {3, 4, 4, 128, {4097, 65, 2}},
        {2, 1, 1, 32, {700, 33}},
        {2, 16, 1, 64, {5000, 64}},
        // ~15 tiles per CTA, segments of two sequences in one CTA: the ring wraps (an odd ring broke here)
        {16, 1, 16, 64, std::vector<int>(16, 8192)},
    };
    bool all = true;
    const int only = argc > 3 ? std::atoi(argv[3]) : -1;  // "q4 999 C": case C only
    for (size_t ci = 0; ci < q4_cases.size(); ++ci) {
      if (only >= 0 && (int)ci != only) continue;
      const CaseDef& cd = q4_cases[ci];
      Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 51 + (unsigned)ci);
      QHost qh = MakeQuant(c, kFmtNvfp4, 53 + (unsigned)ci);
      for (int b = 0; b < c.B; ++b) {  // NaN block scales (E4M3 0x7F) in every row past the sequence's bound
        int len = 0;
        for (int g = 0; g < c.G; ++g) len = std::max(len, c.bounds[b * c.G + g]);
        for (int t = len; t < c.npp * c.P; ++t) {
          const size_t row = (size_t)c.table[b * c.npp + t / c.P] * c.P + t % c.P;
          for (int k = 0; k < 32; ++k) qh.lat_sf[row * 32 + k] = 0x7F;
          for (int k = 0; k < 4; ++k) qh.rope_sf[row * 4 + k] = 0x7F;
        }
      }
      Dev d = Upload(c, scale);
      QParams qp = UploadQuant(qh);
      std::printf("q4 case %zu (B=%d G=%d H=%d P=%d):\n", ci, cd.B, cd.G, cd.H, cd.P);
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ4, kFmtNvfp4>(d, qp); });
      std::printf("  variants 128 (cp.async producer), 32 / 64 / 96 (S / PV / both decoded by permutes), 224:\n");
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ4, kFmtNvfp4, 128>(d, qp); });
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ4, kFmtNvfp4, 32>(d, qp); });
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ4, kFmtNvfp4, 64>(d, qp); });
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ4, kFmtNvfp4, 96>(d, qp); });
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ4, kFmtNvfp4, 224>(d, qp); });
      FreeQuant(qp);
      Free(d);
    }
    std::printf("q4 checks passing: %s\n", all ? "yes" : "NO");
    if (!all || checks_only) return all ? 0 : 1;
    // "q4 B": timings at that batch only (default 64, 1, 128).
    std::vector<int> Bs = {64, 1, 128};
    if (argc > 2) Bs = {std::atoi(argv[2])};
    for (int B : Bs) {
      Dev d = UploadTiming(B, 1, 16, 64, 65536, scale);
      const double tok = (double)B * 65536;
      const float bf = TimeMs<kSmallGh, kFmtNative, 32>(d, 10);
      QParams qp = QuantTiming(d, kFmtNvfp4);
      const float old = TimeMs<kSmallGh, kFmtNvfp4, 32 | 256>(d, 10, qp);
      std::printf("q4 B=%d G=1 H=16: bf16 %.4f ms (%.2f TB/s) | nvfp4 2c2p %.4f ms = %.2fx\n", B, bf, tok * 1152 / bf / 1e9, old, bf / old);
      auto line = [&](const char* name, float t, float m, float pr) {
        std::printf("q4 B=%d %s: %.4f ms = %.2fx bf16 (%.2f TB/s; math alone %.4f, producer alone %.4f)\n", B, name, t, bf / t,
                    tok * 324 / t / 1e9, m, pr);
      };
#define Q4L(NAME, V) line(NAME, TimeMs<kSmallQ4, kFmtNvfp4, V>(d, 10, qp), TimeMs<kSmallQ4, kFmtNvfp4, 1 | V>(d, 10, qp, 1), \
                          TimeMs<kSmallQ4, kFmtNvfp4, 2 | V>(d, 10, qp, 1))
      Q4L("table decode (0)", 0);
      Q4L("S by permutes (32)", 32);
      Q4L("PV by permutes (64)", 64);
      Q4L("both by permutes (96)", 96);
#undef Q4L
      if (B == 64) {  // math alone without: the decode, the S wgmmas, the PV wgmmas
        const float nc = TimeMs<kSmallQ4, kFmtNvfp4, 1 | 4>(d, 10, qp, 1), ns = TimeMs<kSmallQ4, kFmtNvfp4, 1 | 8>(d, 10, qp, 1),
                    np = TimeMs<kSmallQ4, kFmtNvfp4, 1 | 16>(d, 10, qp, 1), nn = TimeMs<kSmallQ4, kFmtNvfp4, 1 | 4 | 8 | 16>(d, 10, qp, 1);
        std::printf("q4 B=64 math-alone probes: no decode %.4f, no S wgmma %.4f, no PV wgmma %.4f, none of them %.4f\n",
                    nc, ns, np, nn);
        const float v128 = TimeMs<kSmallQ4, kFmtNvfp4, 128>(d, 10, qp);
        std::printf("q4 B=64 variant 128 (cp.async producer) %.4f = %.2fx\n", v128, bf / v128);
        for (int r = 0; r < 3; ++r) {  // alternating rounds (the clocks drift over a run)
          const float b0 = TimeMs<kSmallGh, kFmtNative, 32>(d, 10), a0 = TimeMs<kSmallQ4, kFmtNvfp4>(d, 10, qp),
                      a32 = TimeMs<kSmallQ4, kFmtNvfp4, 32>(d, 10, qp), a64 = TimeMs<kSmallQ4, kFmtNvfp4, 64>(d, 10, qp),
                      a256 = TimeMs<kSmallQ4, kFmtNvfp4, 256>(d, 10, qp);
          std::printf("q4 B=64 round %d: bf16 %.4f | table %.4f (%.3fx) | S permutes %.4f (%.3fx) | PV permutes %.4f (%.3fx) | "
                      "all-lane release %.4f (%.3fx)\n", r, b0, a0, b0 / a0, a32, b0 / a32, a64, b0 / a64, a256, b0 / a256);
        }
      }
      FreeQuant(qp);
      Free(d);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "s8big") == 0) {
    // mla_mid_q8s's S accumulation forms at two shapes (L=64K): fast, f32 with four / two chains per 32-token half,
    // against the bf16 seesaw (default load path); two alternating rounds.
    struct Sh { int B, G, H; };
    for (const Sh& sh : {Sh{64, 1, 128}, Sh{64, 4, 16}}) {
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale);
      QParams qp = QuantTiming(d, kFmtFp8);
      for (int round = 0; round < 2; ++round) {
        const float bf = TimeMs<kSeesaw, kFmtNative>(d, 10), fa = TimeMs<kMidQ8, kFmtFp8, 16384>(d, 10, qp),
                    f4 = TimeMs<kMidQ8, kFmtFp8, 16384 | 512>(d, 10, qp), f2 = TimeMs<kMidQ8, kFmtFp8, 16384 | 512 | 1024>(d, 10, qp);
        std::printf("s8big B=%d G=%d H=%d round %d: bf16 %.4f ms | fast %.4f = %.2fx | f32x4 %.4f = %.2fx | f32x2 %.4f = %.2fx\n",
                    sh.B, sh.G, sh.H, round, bf, fa, bf / fa, f4, bf / f4, f2, bf / f2);
      }
      FreeQuant(qp);
      Free(d);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "s8one") == 0) {
    // mla_mid_q8s with one E4M3 term of Q (kVar 65536, HELIX_MLA_DECODE_FP8_Q=one, fast S) against two terms: the main
    // kernel whole, math alone and the producer alone, two alternating rounds; then its timeline (with -DHELIX_SS_TRACE).
    struct Sh { int B, G, H; };
    for (const Sh& sh : {Sh{64, 4, 16}, Sh{64, 1, 128}}) {
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale);
      QParams qp = QuantTiming(d, kFmtFp8);
      for (int round = 0; round < 2; ++round) {
        const float two = TimeMs<kMidQ8, kFmtFp8, 16384>(d, 10, qp, 1), one = TimeMs<kMidQ8, kFmtFp8, 16384 | 65536>(d, 10, qp, 1),
                    math = TimeMs<kMidQ8, kFmtFp8, 16384 | 65536 | 1>(d, 10, qp, 1),
                    math2 = TimeMs<kMidQ8, kFmtFp8, 16384 | 1>(d, 10, qp, 1),
                    prod = TimeMs<kMidQ8, kFmtFp8, 16384 | 65536 | 2>(d, 10, qp, 1);
        std::printf("s8one B=%d G=%d H=%d round %d (main kernel): two terms %.4f ms | one %.4f | one math alone %.4f | two math "
                    "alone %.4f | producer alone %.4f\n", sh.B, sh.G, sh.H, round, two, one, math, math2, prod);
      }
#ifdef HELIX_SS_TRACE
      for (int rep = 0; rep < 2; ++rep) {
        static long long tr[kS8TrEvents][kTrTiles];
        const int khz = TraceCall(g_s8_trace, tr, [&] { Run<kMidQ8, kFmtFp8, 16384 | 65536>(d, qp); });
        static const char* const names[kS8TrEvents] = {"step", "landed", "S iss", "othP", "S done", "smax", "PV1 iss", "PV1 done", "PV2 iss"};
        std::printf("s8one trace B=%d G=%d H=%d rep %d (clock attr %d MHz), us from tile 40's step start:\n", sh.B, sh.G, sh.H, rep,
                    khz / 1000);
        PrintTimeline(tr, names, khz, kS8TrStep, 40, 52, 8);
        std::printf("s8one trace B=%d G=%d H=%d rep %d: tiles 40..199 step-to-step per tile %.3f us\n", sh.B, sh.G, sh.H, rep,
                    (tr[kS8TrStep][198] - tr[kS8TrStep][40]) * 1e3 / khz / 158.0);
      }
#endif
      FreeQuant(qp);
      Free(d);
    }
    return 0;
  }
#ifdef HELIX_SS_TRACE
  if (argc > 1 && std::strcmp(argv[1], "spread") == 0) {
    // Every CTA's start and end (globaltimer) in one call of the 16-bit seesaw (default load path), per shape: how far
    // the CTAs' end times spread, i.e. what a perfectly balanced split would save (session 43).
    struct Sh { int B, G, H; };
    for (const Sh& sh : {Sh{64, 1, 128}, Sh{16, 1, 128}, Sh{16, 4, 128}, Sh{64, 4, 128}, Sh{64, 4, 64}}) {
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale);
      for (int rep = 0; rep < 3; ++rep) {
        static unsigned long long st[3][16 * kMaxParts];
        static const unsigned long long zero[3][16 * kMaxParts] = {};
        CK(cudaMemcpyToSymbol(g_ss_cta, zero, sizeof(zero)));
        Run<kSeesaw>(d, QParams{}, 1);  // the main kernel alone
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpyFromSymbol(st, g_ss_cta, sizeof(st)));
        // Each stamped CTA's start (sorted) and (end, index), sorted by end, in us from the first start.
        std::vector<double> s0;
        std::vector<std::pair<double, int>> ends;
        unsigned long long t0 = ~0ull;
        for (int i = 0; i < 16 * kMaxParts; ++i)
          if (st[0][i] && st[1][i]) t0 = std::min(t0, st[0][i]);
        for (int i = 0; i < 16 * kMaxParts; ++i)
          if (st[0][i] && st[1][i]) s0.push_back((st[0][i] - t0) * 1e-3), ends.push_back({(st[1][i] - t0) * 1e-3, i});
        std::sort(s0.begin(), s0.end());
        std::sort(ends.begin(), ends.end());
        const size_t n = ends.size();
        if (n == 0) { std::printf("spread B=%d G=%d H=%d: no stamps\n", sh.B, sh.G, sh.H); break; }
        std::vector<double> e0(n);
        double mean = 0;
        for (size_t j = 0; j < n; ++j) mean += e0[j] = ends[j].first;
        mean /= n;
        std::printf("spread B=%d G=%d H=%d rep %d: %zu CTAs, start max %.1f us; end min %.1f p10 %.1f median %.1f mean %.1f p90 %.1f max "
                    "%.1f us (max / mean %.4f)\n", sh.B, sh.G, sh.H, rep, n, s0.back(), e0[0], e0[n / 10], e0[n / 2], mean,
                    e0[n * 9 / 10], e0[n - 1], e0[n - 1] / mean);
        // the slowest and fastest CTAs: (part x, row tile y), SM, end
        std::printf("spread B=%d G=%d H=%d rep %d: slowest", sh.B, sh.G, sh.H, rep);
        for (size_t j = ends.size(); j-- > 0 && j + 8 >= ends.size();)
          std::printf(" (%d,%d) sm%llu %.1f", ends[j].second % kMaxParts, ends[j].second / kMaxParts, st[2][ends[j].second],
                      ends[j].first);
        std::printf("; fastest");
        for (size_t j = 0; j < 4 && j < ends.size(); ++j)
          std::printf(" (%d,%d) sm%llu %.1f", ends[j].second % kMaxParts, ends[j].second / kMaxParts, st[2][ends[j].second],
                      ends[j].first);
        std::printf("\n");
      }
      Free(d);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "s8trace") == 0) {
    // Timeline of mla_mid_q8s (fast S; "s8trace one": one E4M3 term of Q) in CTA (0, 0) of a whole call, tiles 40..51, in
    // us from tile 40's step start:
    // per tile (its owner's step): step start, last block landed, S issued, the other consumer's softmax of the tile
    // before available, S (+ this consumer's PV of tile - 2) retired, softmax published, PV of tile - 1 issued / retired,
    // PV of the tile issued.
    struct Sh { int B, G, H; };
    for (const Sh& sh : {Sh{64, 4, 16}, Sh{64, 1, 128}}) {
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale);
      QParams qp = QuantTiming(d, kFmtFp8);
      for (int rep = 0; rep < 2; ++rep) {
        static long long tr[kS8TrEvents][kTrTiles];
        const bool one = argc > 2 && std::strcmp(argv[2], "one") == 0;
        const int khz = TraceCall(g_s8_trace, tr, [&] {
          if (one) Run<kMidQ8, kFmtFp8, 16384 | 65536>(d, qp);
          else Run<kMidQ8, kFmtFp8, 16384>(d, qp);
        });
        static const char* const names[kS8TrEvents] = {"step", "landed", "S iss", "othP", "S done", "smax", "PV1 iss", "PV1 done", "PV2 iss"};
        std::printf("s8trace%s B=%d G=%d H=%d rep %d (clock attr %d MHz), us from tile 40's step start:\n", one ? " one" : "", sh.B,
                    sh.G, sh.H, rep, khz / 1000);
        PrintTimeline(tr, names, khz, kS8TrStep, 40, 52, 8);
        std::printf("s8trace B=%d G=%d H=%d rep %d: tiles 40..199 step-to-step per tile %.3f us\n", sh.B, sh.G, sh.H, rep,
                    (tr[kS8TrStep][198] - tr[kS8TrStep][40]) * 1e3 / khz / 158.0);
        // The whole call: every CTA's consumer start / end (globaltimer), tiles and segments; CTA 0's early steps and
        // its segment boundaries.
        static long long cta[6][kMaxParts], sg[4][16];
        CK(cudaMemcpyFromSymbol(cta, g_s8_cta, sizeof(cta)));
        CK(cudaMemcpyFromSymbol(sg, g_s8_seg, sizeof(sg)));
        const int np = MainParts<true>(d.p, d.num_sms, (sh.G * sh.H + 63) / 64, false);
        long long t0 = cta[0][0], t1 = cta[1][0];
        for (int q = 0; q < np; ++q) t0 = std::min(t0, cta[0][q]), t1 = std::max(t1, cta[1][q]);
        std::vector<std::pair<long long, int>> ends;
        long long smax = 0;
        for (int q = 0; q < np; ++q) ends.push_back({cta[1][q] - t0, q}), smax = std::max(smax, cta[0][q] - t0);
        std::sort(ends.begin(), ends.end());
        std::printf("s8cta B=%d G=%d H=%d rep %d: %d CTAs, first start to last end %.1f us; starts spread %.1f us; ends (us from the "
                    "first start) min %.1f p10 %.1f median %.1f p90 %.1f max %.1f\n", sh.B, sh.G, sh.H, rep, np, (t1 - t0) * 1e-3,
                    smax * 1e-3, ends[0].first * 1e-3, ends[np / 10].first * 1e-3, ends[np / 2].first * 1e-3,
                    ends[np * 9 / 10].first * 1e-3, ends[np - 1].first * 1e-3);
        for (int i : {0, 1, 2, np / 2, np - 3, np - 2, np - 1}) {
          const int q = ends[i].second;
          std::printf("  CTA %3d: start %.1f end %.1f us, %lld tiles, %lld segments, %.3f us per tile, mean SM clock %.0f MHz\n", q,
                      (cta[0][q] - t0) * 1e-3, (cta[1][q] - t0) * 1e-3, cta[2][q], cta[3][q],
                      (cta[1][q] - cta[0][q]) * 1e-3 / std::max(1LL, cta[2][q]),
                      (double)(cta[5][q] - cta[4][q]) * 1e3 / std::max(1LL, cta[1][q] - cta[0][q]));
        }
        for (int i = 0; i < (int)cta[3][0] && i < 16; ++i)
          std::printf("  CTA 0 segment %d: start %.2f, Q ready %.2f, last step done %.2f, o stored %.2f us\n", i, (sg[0][i] - t0) * 1e-3,
                      (sg[1][i] - t0) * 1e-3, (sg[2][i] - t0) * 1e-3, (sg[3][i] - t0) * 1e-3);
        std::printf("  CTA 0 steps (us from its tile 0's step):");
        for (int k : {0, 1, 2, 3, 4, 8, 16, 32, 40, 100, 200, 255}) std::printf(" %d:%.2f", k, (tr[kS8TrStep][k] - tr[kS8TrStep][0]) * 1e3 / khz);
        std::printf("\n");
      }
      FreeQuant(qp);
      Free(d);
    }
    return 0;
  }
#endif
  if (argc > 1 && std::strcmp(argv[1], "ss8") == 0) {
    // fp8 pages through the seesaw kernel with a decoding producer (mla_seesaw kLoad 5: E4M3 tiles converted in place to
    // f16, f16 math, bf16 Q rewritten as f16): checks on the mid cases with P % 64 == 0 against the double reference
    // (the next tile's L2 prefetch on and off), then main-kernel timings at L=64K beside the bf16 seesaw and mla_mid_q8s
    // (its default S accumulation), with the load + decode pipeline alone and the math alone. "ss8 999": checks only.
    const bool checks_only = argc > 2 && std::atoi(argv[2]) == 999;
    bool all = true;
    for (size_t ci = 0; ci < mid_cases.size(); ++ci) {
      const CaseDef& cd = mid_cases[ci];
      if (cd.P % kTokTile != 0) continue;
      Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 61 + (unsigned)ci);
      QHost qh = MakeQuant(c, kFmtFp8, 63 + (unsigned)ci);
      Dev d = Upload(c, scale);
      QParams qp = UploadQuant(qh);
      std::printf("ss8 case %zu (B=%d G=%d H=%d P=%d):\n", ci, cd.B, cd.G, cd.H, cd.P);
      for (int on = 1; on >= 0; --on) {
        qp.l2_next = on;
        all &= RunChecked(c, d, scale, [&] { Run<kSeesaw, kFmtFp8>(d, qp); });
      }
      FreeQuant(qp);
      Free(d);
    }
    std::printf("ss8 checks passing: %s\n", all ? "yes" : "NO");
    if (!all || checks_only) return all ? 0 : 1;
    struct S { int B, G, H; };
    for (S sh : {S{64, 4, 16}, S{16, 4, 16}, S{64, 1, 128}}) {
      DsCase ds = DsTimingCase(sh.B, sh.G, sh.H, kFmtFp8, scale);
      Dev& d = ds.d;
      QParams &q1 = ds.q1, &q0 = ds.q0;
      const int it = 5;
      const float bf = TimeMs<kSeesaw, kFmtNative, 0>(d, it, QParams{}, 1);
      const float mid = sh.G * sh.H > 64 ? TimeMs<kMidQ8, kFmtFp8, 16384 | 512>(d, it, q1, 1) : TimeMs<kMidQ8, kFmtFp8, 16384>(d, it, q1, 1);
      const float a1 = TimeMs<kSeesaw, kFmtFp8, 0>(d, it, q1, 1), a0 = TimeMs<kSeesaw, kFmtFp8, 0>(d, it, q0, 1);
      const float l1 = TimeMs<kSeesaw, kFmtFp8, 2>(d, it, q1, 1), mt = TimeMs<kSeesaw, kFmtFp8, 4>(d, it, q1, 1);
      std::printf("ss8 B=%d G=%d H=%d main kernel ms: bf16 %.4f | mla_mid_q8s %.4f (%.2fx bf16) | fp8 decoding seesaw l2 on "
                  "%.4f (%.2fx) off %.4f (%.2fx) | load+decode alone %.4f | math alone %.4f\n", sh.B, sh.G, sh.H, bf, mid,
                  bf / mid, a1, bf / a1, a0, bf / a0, l1, mt);
      FreeQuant(q1);
      Free(d);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "ss4") == 0) {
    // The nvfp4 decoding seesaw at L=64K, main kernel only: bf16 tiles (mla_seesaw kLoad 4) with / without the next raw
    // tile's L2 prefetch, the load + decode pipeline alone (consumers wait and release), the math alone (no raw copies,
    // no decode), and f16 tiles (kLoad 6, the default for bf16 queries since session 20), beside the bf16 seesaw; with
    // -DHELIX_SS_TRACE also a timeline of CTA (0, 0) (tiles 40..48, kLoad 4).
    struct S { int B, G, H; };
    for (S sh : {S{64, 4, 16}, S{16, 4, 16}, S{64, 1, 128}}) {
      DsCase ds = DsTimingCase(sh.B, sh.G, sh.H, kFmtNvfp4, scale);
      Dev& d = ds.d;
      QParams &q1 = ds.q1, &q0 = ds.q0;
      const int it = 5;
      const float bf = TimeMs<kSeesaw, kFmtNative, 0>(d, it, QParams{}, 1);
      const float a1 = TimeMs<kSeesaw, kFmtNvfp4, 0>(d, it, q1, 1), a0 = TimeMs<kSeesaw, kFmtNvfp4, 0>(d, it, q0, 1);
      const float l1 = TimeMs<kSeesaw, kFmtNvfp4, 2>(d, it, q1, 1), l0 = TimeMs<kSeesaw, kFmtNvfp4, 2>(d, it, q0, 1);
      const float mt = TimeMs<kSeesaw, kFmtNvfp4, 4>(d, it, q1, 1);
      const float f1 = TimeMs<kSeesaw, kFmtNvfp4, 8>(d, it, q1, 1), fl = TimeMs<kSeesaw, kFmtNvfp4, 8 | 2>(d, it, q1, 1);
      // The staging slot (HELIX_MLA_DECODE_NV4_STAGE, kVar bit 16), f16 math, alternating with kLoad 6 twice.
      float st[2], f6[2];
      for (int r = 0; r < 2; ++r) {
        st[r] = TimeMs<kSeesaw, kFmtNvfp4, 8 | 16>(d, it, q1, 1);
        f6[r] = TimeMs<kSeesaw, kFmtNvfp4, 8>(d, it, q1, 1);
      }
      std::printf("ss4 B=%d G=%d H=%d main kernel ms: bf16 %.4f | nvfp4 l2 on %.4f (%.2fx bf16) off %.4f (%.2fx) | "
                  "load+decode alone on %.4f off %.4f | math alone %.4f | f16 math (kLoad 6) %.4f (%.2fx), its load+decode "
                  "alone %.4f | staged %.4f %.4f vs %.4f %.4f (%.2fx bf16)\n", sh.B, sh.G, sh.H, bf, a1, bf / a1, a0,
                  bf / a0, l1, l0, mt, f1, bf / f1, fl, st[0], st[1], f6[0], f6[1], bf / std::min(st[0], st[1]));
#ifdef HELIX_SS_TRACE
      static long long tr[kTrEvents][kTrTiles];
      static const char* const names[kTrEvents] = {"P:iss", "P:raw", "P:dec", "start", "rel", "first", "last", "Sdone", "smax", "PViss", "ofetch", "late"};
      for (int on = 1; on >= 0; --on) {
        const int khz = TraceCall(g_ss_trace, tr, [&] { Run<kSeesaw, kFmtNvfp4, 0>(d, on ? q1 : q0); });
        const int k1 = sh.B >= 64 ? 200 : 100;
        std::printf("ss4 trace B=%d G=%d H=%d l2 %s (clock %d MHz), us from tile 40's raw issue; tiles 40..%d per tile %.3f us\n",
                    sh.B, sh.G, sh.H, on ? "on" : "off", khz / 1000, k1, (tr[kTrPart0][k1] - tr[kTrPart0][40]) * 1e3 / khz / (k1 - 40));
        PrintTimeline(tr, names, khz, kTrPart0, 40, 48, 7);
      }
#endif
      FreeQuant(q1);
      Free(d);
    }
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "s8prof") == 0) {
    // One main-kernel launch of mla_mid_q8s at B=64 G=4 H=16 L=64K after one warm-up launch, for Nsight Compute
    // (--launch-skip 1 --launch-count 1): "s8prof 1" mla_mid_q8s, "s8prof 0" mla_mid_q8.
    const int v = std::atoi(argv[2]);
    Dev d = UploadTiming(64, 4, 16, 64, 65536, scale);
    QParams qp = QuantTiming(d, kFmtFp8);
    for (int i = 0; i < 2; ++i) {
      if (v == 1) Run<kMidQ8, kFmtFp8, 16384>(d, qp, 1);
      else Run<kMidQ8, kFmtFp8>(d, qp, 1);
      CK(cudaDeviceSynchronize());
    }
    std::printf("s8prof %d done\n", v);
    FreeQuant(qp);
    Free(d);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "s8") == 0) {
    // fp8 pages at G*H > 16 through mla_mid_q8s (the seesaw form: consumers alternate tiles, S with the query rows
    // as M, PV on E4M3 tensor cores) against the double reference of the unquantized queries: TMA tiles (variant 16384),
    // cp.async tiles (| 128), the alternative A-register order (| 32768: must FAIL when the default passes; a check of
    // the fragment layout). Then timings at H=16, G=4 against the bf16 seesaw and mla_mid_q8. "s8 999": checks only.
    const bool checks_only = argc > 2 && std::atoi(argv[2]) == 999;
    bool all = true, alt_any = false;
    for (size_t ci = 0; ci < mid_cases.size(); ++ci) {
      const CaseDef& cd = mid_cases[ci];
      Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 61 + (unsigned)ci);
      QHost qh = MakeQuant(c, kFmtFp8, 63 + (unsigned)ci);
      Dev d = Upload(c, scale);
      QParams qp = UploadQuant(qh);
      std::printf("s8 case %zu (B=%d G=%d H=%d P=%d):\n", ci, cd.B, cd.G, cd.H, cd.P);
      g_lse_tol = 3e-2;  // the default S accumulation's budget on full-range codes (as mla_small_q8)
      std::printf("  mla_mid_q8 (lockstep, reference point):\n");
      RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8>(d, qp); });
      std::printf("  mla_mid_q8s:\n");
      all &= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 16384>(d, qp); });
      std::printf("  mla_mid_q8s, cp.async tiles:\n");
      all &= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 16384 | 128>(d, qp); });
      // One E4M3 term of Q (V^T by ldmatrix, P^T in its k order): its own rounding of Q is outside this reference's
      // bound (the GPU tests compare it with the rounded-Q oracle), so a reference point, and a case for the sanitizers.
      std::printf("  mla_mid_q8s, one E4M3 term of Q (reference point, not counted):\n");
      RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 16384 | 65536>(d, qp); }, " (a FAIL here is Q's own rounding)");
      std::printf("  mla_mid_q8s, alternative A-register order (expected to FAIL):\n");
      alt_any |= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 16384 | 32768>(d, qp); });
      // S chains added in f32: the driver's standard bound (the one-scale Q terms' rounding stays: measured 0.7-1.8e-2)
      g_lse_tol = 2e-2;
      std::printf("  mla_mid_q8s variant 512 (S chains added in f32), TMA / cp.async tiles (lse bound 2e-2):\n");
      all &= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 16384 | 512>(d, qp); });
      all &= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 16384 | 512 | 128>(d, qp); });
      g_lse_tol = 2e-2;
      FreeQuant(qp);
      Free(d);
    }
    all &= !alt_any;
    std::printf("s8 checks passing: %s (alternative register order passed somewhere: %s)\n", all ? "yes" : "NO", alt_any ? "yes" : "no");
    if (checks_only) return all ? 0 : 1;  // (timings follow even after a failed check: a probe)
    for (int B : {1, 16, 64, 128}) {
      Dev d = UploadTiming(B, 4, 16, 64, 65536, scale);
      const double tok = (double)B * 65536;
      const float bf = TimeMs<kSeesaw, kFmtNative, 32>(d, 10);
      QParams qp = QuantTiming(d, kFmtFp8);
      for (int round = 0; round < 2; ++round) {
        const float lk = TimeMs<kMidQ8, kFmtFp8>(d, 10, qp), t1 = TimeMs<kMidQ8, kFmtFp8, 16384>(d, 10, qp),
                    te = TimeMs<kMidQ8, kFmtFp8, 16384 | 32>(d, 10, qp), tf = TimeMs<kMidQ8, kFmtFp8, 16384 | 512>(d, 10, qp);
        std::printf("s8 B=%d G=4 H=16 round %d: bf16 %.4f ms (%.2f TB/s) | lockstep %.4f = %.2fx | seesaw %.4f = %.2fx "
                    "(%.2f TB/s) | seesaw evict-first %.4f = %.2fx | seesaw f32 S %.4f = %.2fx\n", B, round, bf,
                    tok * 1152 / bf / 1e9, lk, bf / lk, t1, bf / t1, tok * 576 / t1 / 1e9, te, bf / te, tf, bf / tf);
      }
      if (B == 64) {
        const float mo = TimeMs<kMidQ8, kFmtFp8, 16384>(d, 10, qp, 1), math = TimeMs<kMidQ8, kFmtFp8, 16384 | 1>(d, 10, qp, 1),
                    prod = TimeMs<kMidQ8, kFmtFp8, 16384 | 2>(d, 10, qp, 1);
        std::printf("s8 B=64 seesaw: main-only %.4f, math alone %.4f, producer alone %.4f\n", mo, math, prod);
      }
      FreeQuant(qp);
      Free(d);
    }
    // G*H > 64 (one CTA per 64 rows): the bf16 seesaw on its default load path against the fp8 pipe kernel (the path
    // before row tiles) and both mid kernels.
    struct Big { int B, G, H; };
    for (const Big& bg : {Big{64, 1, 128}, Big{16, 4, 128}, Big{64, 4, 64}, Big{1, 1, 128}, Big{64, 2, 64}}) {
      Dev d = UploadTiming(bg.B, bg.G, bg.H, 64, 65536, scale);
      const float bf = TimeMs<kSeesaw, kFmtNative>(d, 10);
      QParams qp = QuantTiming(d, kFmtFp8);
      const float pipe = TimeMs<kWgmmaPipe, kFmtFp8>(d, 10, qp), lk = TimeMs<kMidQ8, kFmtFp8>(d, 10, qp),
                  ss = TimeMs<kMidQ8, kFmtFp8, 16384>(d, 10, qp), sf = TimeMs<kMidQ8, kFmtFp8, 16384 | 512>(d, 10, qp),
                  lf = TimeMs<kMidQ8, kFmtFp8, 512>(d, 10, qp);
      std::printf("s8 big B=%d G=%d H=%d: bf16 %.4f ms | fp8 pipe %.4f = %.2fx | lockstep %.4f = %.2fx | seesaw %.4f = %.2fx"
                  " | seesaw f32 S %.4f = %.2fx | lockstep f32 S %.4f = %.2fx\n", bg.B, bg.G, bg.H, bf, pipe, bf / pipe, lk,
                  bf / lk, ss, bf / ss, sf, bf / sf, lf, bf / lf);
      FreeQuant(qp);
      Free(d);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "m8") == 0) {
    // fp8 pages at G*H > 16 through mla_mid_q8 (both consumers on every raw tile): checks against the double
    // reference of the two-term E4M3 queries, then timings at H=16, G=4 against the bf16 seesaw (TMA evict-first, the
    // auto path of one row tile) and the producer-dequantizing fp8 pipe kernel it replaces. "m8 999": checks only.
    const bool checks_only = argc > 2 && std::atoi(argv[2]) == 999;
    bool all = true;
    for (size_t ci = 0; ci < mid_cases.size(); ++ci) {
      const CaseDef& cd = mid_cases[ci];
      Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 61 + (unsigned)ci);
      QHost qh = MakeQuant(c, kFmtFp8, 63 + (unsigned)ci);
      QuantizeQueriesFp8Two(c);
      Dev d = Upload(c, scale);
      QParams qp = UploadQuant(qh);
      std::printf("m8 case %zu (B=%d G=%d H=%d P=%d):\n", ci, cd.B, cd.G, cd.H, cd.P);
      g_lse_tol = 3e-2;  // the default S accumulation's budget on full-range codes (as mla_small_q8)
      all &= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8>(d, qp); }, " (lse bound 3e-2)");
      std::printf("  variant 128 (cp.async tiles):\n");
      all &= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 128>(d, qp); });
      std::printf("  variant 512 (S promoted to f32 per 128-feature block):\n");
      g_lse_tol = 1e-2;
      all &= RunChecked(c, d, scale, [&] { Run<kMidQ8, kFmtFp8, 512>(d, qp); }, " (lse bound 1e-2)");
      g_lse_tol = 2e-2;
      FreeQuant(qp);
      Free(d);
    }
    std::printf("m8 checks passing: %s\n", all ? "yes" : "NO");
    if (!all || checks_only) return all ? 0 : 1;
    for (int B : {1, 64, 128}) {
      Dev d = UploadTiming(B, 4, 16, 64, 65536, scale);
      const double tok = (double)B * 65536;
      const float bf = TimeMs<kSeesaw, kFmtNative, 32>(d, 10);
      QParams qp = QuantTiming(d, kFmtFp8);
      const float pipe = TimeMs<kWgmmaPipe, kFmtFp8>(d, 10, qp);
      for (int round = 0; round < 2; ++round) {
        const float t = TimeMs<kMidQ8, kFmtFp8>(d, 10, qp), t512 = TimeMs<kMidQ8, kFmtFp8, 512>(d, 10, qp);
        std::printf("m8 B=%d G=4 H=16 round %d: bf16 %.4f ms (%.2f TB/s) | fp8 pipe %.4f = %.2fx | mid %.4f = %.2fx (%.2f TB/s) "
                    "| 512 %.4f = %.2fx\n", B, round, bf, tok * 1152 / bf / 1e9, pipe, bf / pipe, t, bf / t,
                    tok * 576 / t / 1e9, t512, bf / t512);
      }
      const float mo = TimeMs<kMidQ8, kFmtFp8>(d, 10, qp, 1), math = TimeMs<kMidQ8, kFmtFp8, 1>(d, 10, qp, 1),
                  prod = TimeMs<kMidQ8, kFmtFp8, 2>(d, 10, qp, 1);
      std::printf("m8 B=%d main-only %.4f, math alone %.4f, producer alone %.4f\n", B, mo, math, prod);
      if (B == 64) {  // math alone without: the V^T conversion, the S wgmmas, the PV wgmmas, all three
        const float nc = TimeMs<kMidQ8, kFmtFp8, 1 | 4>(d, 10, qp, 1), ns = TimeMs<kMidQ8, kFmtFp8, 1 | 8>(d, 10, qp, 1),
                    np = TimeMs<kMidQ8, kFmtFp8, 1 | 16>(d, 10, qp, 1), nn = TimeMs<kMidQ8, kFmtFp8, 1 | 4 | 8 | 16>(d, 10, qp, 1);
        std::printf("m8 B=64 math-alone probes: no conversion %.4f, no S wgmma %.4f, no PV wgmma %.4f, none of them %.4f\n",
                    nc, ns, np, nn);
      }
      FreeQuant(qp);
      Free(d);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "q8") == 0) {
    // fp8 pages through mla_small_q8 (S on E4M3 tensor cores with Q as two E4M3 terms, V^T converted in
    // registers): checks against the double reference of the unquantized queries, then timings at H=16, G=1
    // against the bf16 small kernel and the producer-dequantizing fp8 kernel. "q8 999": checks only.
    const bool checks_only = argc > 2 && std::atoi(argv[2]) == 999;
    const std::vector<CaseDef> q8_cases = {
        {4, 1, 16, 64, {1000, 0, 77, 130}},
        {5, 2, 5, 16, {1, 64, 3000, 129, 191}},
        {3, 4, 4, 128, {4097, 65, 2}},
        {2, 1, 1, 32, {700, 33}},
        {16, 1, 16, 64, std::vector<int>(16, 8192)},  // ~15 tiles per CTA: the ring wraps
    };
    bool all = true;
    const int only = argc > 3 ? std::atoi(argv[3]) : -1;  // "q8 999 C": case C only
    for (size_t ci = 0; ci < q8_cases.size(); ++ci) {
      if (only >= 0 && (int)ci != only) continue;
      const CaseDef& cd = q8_cases[ci];
      Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 41 + (unsigned)ci);
      QHost qh = MakeQuant(c, kFmtFp8, 43 + (unsigned)ci);
      QuantizeQueriesFp8Two(c);  // reference: the kernel's two-term E4M3 queries
      Dev d = Upload(c, scale);
      QParams qp = UploadQuant(qh);
      std::printf("q8 case %zu (B=%d G=%d H=%d P=%d):\n", ci, cd.B, cd.G, cd.H, cd.P);
      // The default S accumulation (one fp8 tensor-core chain over 576 features) is held to lse 3e-2 on these
      // full-range codes (measured up to 2.07e-2, session 9-10); variant 512 (HELIX_MLA_DECODE_FP8_S=f32) to 1e-2.
      g_lse_tol = 3e-2;
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ8, kFmtFp8>(d, qp); }, " (lse bound 3e-2)");
      std::printf("  variants 128 (cp.async producer), 64 (one fence per tile), 96 (evict-first TMA + one fence):\n");
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ8, kFmtFp8, 128>(d, qp); });
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ8, kFmtFp8, 64>(d, qp); });
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ8, kFmtFp8, 96>(d, qp); });
      std::printf("  variant 512 (S promoted to f32 per 128-feature block, HELIX_MLA_DECODE_FP8_S=f32):\n");
      g_lse_tol = 1e-2;
      all &= RunChecked(c, d, scale, [&] { Run<kSmallQ8, kFmtFp8, 512>(d, qp); }, " (lse bound 1e-2)");
      g_lse_tol = 2e-2;
      FreeQuant(qp);
      Free(d);
    }
    std::printf("q8 checks passing: %s\n", all ? "yes" : "NO");
    if (!all || checks_only) return all ? 0 : 1;
    for (int B : {1, 64, 128}) {
      Dev d = UploadTiming(B, 1, 16, 64, 65536, scale);
      const double tok = (double)B * 65536;
      const float bf = TimeMs<kSmallGh, kFmtNative, 32>(d, 10);
      QParams qp = QuantTiming(d, kFmtFp8);
      const float old = TimeMs<kSmallGh, kFmtFp8, 32 | 256>(d, 10, qp);
      const float t = TimeMs<kSmallQ8, kFmtFp8>(d, 10, qp);
      const float mo = TimeMs<kSmallQ8, kFmtFp8>(d, 10, qp, 1);
      const float math = TimeMs<kSmallQ8, kFmtFp8, 1>(d, 10, qp, 1), prod = TimeMs<kSmallQ8, kFmtFp8, 2>(d, 10, qp, 1);
      std::printf("q8 B=%d G=1 H=16: bf16 %.4f ms (%.2f TB/s) | fp8 2c2p %.4f ms = %.2fx | q8 %.4f ms = %.2fx bf16 "
                  "(%.2f TB/s; main-only %.4f, math alone %.4f, producer alone %.4f)\n",
                  B, bf, tok * 1152 / bf / 1e9, old, bf / old, t, bf / t, tok * 576 / t / 1e9, mo, math, prod);
      if (B == 64) {  // math alone without: the V^T conversion, the S wgmmas, the PV wgmmas
        const float nc = TimeMs<kSmallQ8, kFmtFp8, 1 | 4>(d, 10, qp, 1), ns = TimeMs<kSmallQ8, kFmtFp8, 1 | 8>(d, 10, qp, 1),
                    np = TimeMs<kSmallQ8, kFmtFp8, 1 | 16>(d, 10, qp, 1), nn = TimeMs<kSmallQ8, kFmtFp8, 1 | 4 | 8 | 16>(d, 10, qp, 1);
        std::printf("q8 B=64 math-alone probes: no conversion %.4f, no S wgmma %.4f, no PV wgmma %.4f, none of them %.4f\n",
                    nc, ns, np, nn);
        const float v128 = TimeMs<kSmallQ8, kFmtFp8, 128>(d, 10, qp), v64 = TimeMs<kSmallQ8, kFmtFp8, 64>(d, 10, qp),
                    p128 = TimeMs<kSmallQ8, kFmtFp8, 2 | 128>(d, 10, qp, 1), m64 = TimeMs<kSmallQ8, kFmtFp8, 1 | 64>(d, 10, qp, 1),
                    n64 = TimeMs<kSmallQ8, kFmtFp8, 1 | 4 | 8 | 16 | 64>(d, 10, qp, 1);
        std::printf("q8 B=64 variants: 128 (cp.async producer) %.4f = %.2fx (producer alone %.4f) | 64 (one fence) %.4f = %.2fx "
                    "(math alone %.4f, none %.4f)\n", v128, bf / v128, p128, v64, bf / v64, m64, n64);
      }
      FreeQuant(qp);
      Free(d);
    }
    return 0;
  }
  const char* names[3] = {"mma", "wgmma", "seesaw"};
  const char* load_names[4] = {"cpasync", "tma", "tma_evict_first", "tma_multicast"};
  bool load_ok = true;
  int ok_mask = 7;
  // Unbalanced lengths, zero-length sequences and zero-bound rows, a partial second row tile (G*H = 80),
  // single-tile and odd/even tile-count segments (seesaw ownership), page sizes 64 and 16.
  const std::vector<CaseDef> cases = {
      {4, 2, 40, 64, {1000, 0, 77, 130}},
      {9, 4, 16, 16, {1, 64, 65, 3000, 128, 129, 0, 191, 5000}},
      {3, 1, 128, 64, {8000, 64, 1}},
      {5, 4, 16, 128, {129, 4000, 64, 255, 2}},
      {5, 2, 128, 128, {130, 7000, 0, 64, 2049}},  // four row tiles (two clusters per part), P = 128
  };
  {  // every part's plan on the device (PlanPart, one warp per part) equals the host's table
    std::mt19937 rng(77);
    bool same = true;
    int n = 0;
    for (int it = 0; it < 300 && same; ++it, ++n) {
      const int B = 1 + rng() % (it % 10 == 0 ? 3000 : it % 3 == 0 ? 300 : 40), G = 1 + rng() % 8;
      const int parts = 1 + rng() % kMaxParts, cap = 64 * (1 + rng() % 2048);
      const int ov = it % 3 == 0 ? kSegOverhead : 1 + (int)(rng() % kMaxSegOverhead);
      std::vector<int> bounds(B * G);
      for (auto& v : bounds) v = it % 4 == 0 ? (int)(rng() % (cap + 1)) : rng() % 3 == 0 ? 0 : (int)(rng() % 5000) - 2;
      std::vector<int4> seg(B + kMaxParts), dseg(B + kMaxParts);
      std::vector<int2> part(parts), dpart(parts), batch(B), dbatch(B);
      std::vector<int> scratch(B + kMaxParts);
      BuildSchedule(bounds.data(), B, G, cap, parts, SchedTable{seg.data(), part.data(), batch.data()}, scratch.data(), ov);
      int* db;
      int4* dsg;
      int2 *dpt, *dbt;
      CK(cudaMalloc(&db, bounds.size() * 4));
      CK(cudaMalloc(&dsg, seg.size() * 16)); CK(cudaMalloc(&dpt, parts * 8)); CK(cudaMalloc(&dbt, B * 8));
      CK(cudaMemcpy(db, bounds.data(), bounds.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemset(dsg, 0xff, seg.size() * 16));
      PlanCheck<<<parts, 32>>>(db, B, G, cap, parts, dsg, dpt, dbt, ov);
      CK(cudaGetLastError());
      CK(cudaMemcpy(dpart.data(), dpt, parts * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(dbatch.data(), dbt, B * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(dseg.data(), dsg, seg.size() * 16, cudaMemcpyDeviceToHost));
      const int nseg = part[parts - 1].y;
      for (int q = 0; q < parts; ++q) same &= part[q].x == dpart[q].x && part[q].y == dpart[q].y;
      for (int b = 0; b < B; ++b) same &= batch[b].x == dbatch[b].x && batch[b].y == dbatch[b].y;
      for (int i = 0; i < nseg; ++i) same &= seg[i].x == dseg[i].x && seg[i].y == dseg[i].y && seg[i].z == dseg[i].z;
      if (!same) std::printf("plans differ: B=%d G=%d parts=%d ov=%d (batch %d)\n", B, G, parts, ov, it);
      CK(cudaFree(db)); CK(cudaFree(dsg)); CK(cudaFree(dpt)); CK(cudaFree(dbt));
    }
    std::printf("device part plans equal the host's schedule: %s (%d batches)\n", same ? "yes" : "NO", n);
    if (!same) return 1;
  }
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const CaseDef& cd = cases[ci];
    Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 1 + (unsigned)ci);
    Dev d = Upload(c, scale);
    for (int mode = 0; mode < 3; ++mode) {
      std::printf("case %zu (B=%d G=%d H=%d P=%d) %s:\n", ci, cd.B, cd.G, cd.H, cd.P, names[mode]);
      const bool ok = RunChecked(c, d, scale, [&] {
        if (mode == 0) Run<kMma>(d); else if (mode == 1) Run<kWgmma>(d); else Run<kSeesaw>(d);
      });
      if (!ok) ok_mask &= ~(1 << mode);
    }
    // Seesaw KV load paths forced (kVar 8 / 16 / 32 / 64: cp.async / TMA / TMA evict-first / multicast; TMA
    // needs P % 64 == 0, so the P = 16 case runs cp.async under every flag; multicast an even row-tile count).
    for (int ld = 0; ld < 4; ++ld) {
      std::printf("case %zu (B=%d G=%d H=%d P=%d) seesaw load=%s:\n", ci, cd.B, cd.G, cd.H, cd.P, load_names[ld]);
      const bool ok = RunChecked(c, d, scale, [&] {
        if (ld == 0) Run<kSeesaw, kFmtNative, 8>(d); else if (ld == 1) Run<kSeesaw, kFmtNative, 16>(d);
        else if (ld == 2) Run<kSeesaw, kFmtNative, 32>(d);
        else Run<kSeesaw, kFmtNative, 64>(d);
      });
      if (!ok) load_ok = false;
    }
    for (int wide = 0; wide < 2; ++wide) {  // both combine kernels, whichever Launch's rule picks here
      std::printf("case %zu (B=%d G=%d H=%d P=%d) seesaw combine=%s:\n", ci, cd.B, cd.G, cd.H, cd.P, wide ? "wide" : "narrow");
      g_wide = wide;
      if (!RunChecked(c, d, scale, [&] { Run<kSeesaw>(d); })) load_ok = false;
      g_wide = -1;
    }
    Free(d);
  }
  std::printf("seesaw load paths passing: %s\n", load_ok ? "all" : "NOT ALL");
  if (!load_ok) ok_mask &= ~4;
  if (load) {  // seesaw load paths: whole call, main kernel alone, loads alone, math alone (L = 64K, P = 64)
    struct S { int B, G, H; };
    {
      int sms = 0;
      CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      std::printf("multicast: parts for 2 / 8 row tiles = %d / %d (SMs %d)\n", SeesawClusterParts<true>(2, sms / 2),
                  SeesawClusterParts<true>(8, sms / 8), sms);
    }
    // argv[2] (optional): only shapes with this H; argv[3]: only the load path of this name.
    const int only_h = argc > 2 ? std::atoi(argv[2]) : 0;
    const char* only_load = argc > 3 ? argv[3] : nullptr;
#ifdef HELIX_SS_TRACE
    // Timeline of CTA (0, 0) of a whole call (TMA evict-first loads), tiles 40..47, in us from tile 40's first
    // producer stamp: producer part waits done (own V half, rope, other half), consumer (owner WG) own_tile
    // start, previous PVs done + released, first / last block landed, S done, softmax published, PV issued,
    // and when the other WG received this tile's softmax.
    for (S sh : {S{64, 1, 128}, S{64, 4, 16}}) {
      if (only_h && sh.H != only_h) continue;
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale);
      for (int mc = 0; mc < 2; ++mc) {  // TMA evict-first, then multicast (the default where row tiles pair)
        static long long tr[kTrEvents][kTrTiles];
        const char* const path = mc ? "tma_multicast" : "tma_evict_first";
        const int khz = TraceCall(g_ss_trace, tr, [&] {
          if (mc) Run<kSeesaw, kFmtNative, 64>(d); else Run<kSeesaw, kFmtNative, 32>(d);
        });
        static const char* const names[kTrEvents] = {"P:own", "P:rope", "P:oth", "start", "rel", "first", "last", "Sdone", "smax", "PViss", "ofetch", "late"};
        std::printf("trace B=%d G=%d H=%d %s (clock %d MHz), us from tile 40's P:own:\n", sh.B, sh.G, sh.H, path, khz / 1000);
        PrintTimeline(tr, names, khz, kTrPart0, 40, 52, 7);
        std::printf("trace B=%d G=%d H=%d %s: tiles 40..200 per tile %.3f us\n", sh.B, sh.G, sh.H, path,
                    (tr[kTrStart][200] - tr[kTrStart][40]) * 1e3 / khz / 160);
      }
      Free(d);
    }
#endif
    for (S sh : {S{64, 1, 128}, S{16, 4, 128}, S{64, 4, 64}, S{64, 4, 16}, S{64, 1, 16}, S{1, 1, 128}}) {
      if (only_h && sh.H != only_h) continue;
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale);
      const double flops = 2.0 * sh.B * sh.G * sh.H * 65536.0 * 1088, bytes = (double)sh.B * 65536 * 576 * 2;
      auto line = [&](const char* name, auto var) {
        constexpr int kV = decltype(var)::value;
        if (only_load && std::strcmp(only_load, name) != 0) return;
        const int it = sh.B == 1 ? 50 : 5;
        const float a = TimeMs<kSeesaw, kFmtNative, kV>(d, it), m = TimeMs<kSeesaw, kFmtNative, kV>(d, it, QParams{}, 1);
        const float ld = TimeMs<kSeesaw, kFmtNative, kV | 2>(d, it, QParams{}, 1), mt = TimeMs<kSeesaw, kFmtNative, kV | 4>(d, it, QParams{}, 1);
        std::printf("load B=%d G=%d H=%d %-15s: %.4f ms (%.1f TFLOP/s, %.2f TB/s)  main-only %.4f  loads-only %.4f (%.2f TB/s into SMs)"
                    "  math-only %.4f (%.1f TFLOP/s)\n", sh.B, sh.G, sh.H, name, a, flops / a / 1e9, bytes / a / 1e9, m, ld,
                    bytes * ((sh.G * sh.H + 63) / 64) / ld / 1e9, mt, flops / mt / 1e9);
      };
      line("cpasync", std::integral_constant<int, 8>{});
      line("tma", std::integral_constant<int, 16>{});
      line("tma_evict_first", std::integral_constant<int, 32>{});
      line("tma_multicast", std::integral_constant<int, 64>{});
      {  // the combine alone (after a whole call wrote the partials)
        const int it = 50;
        g_wide = 0;
        const float cn = TimeMs<kSeesaw, kFmtNative, 32>(d, it, QParams{}, 3);
        g_wide = 1;
        const float cw = TimeMs<kSeesaw, kFmtNative, 32>(d, it, QParams{}, 3);
        g_wide = -1;
        std::printf("load B=%d G=%d H=%d combine-only narrow %.4f wide %.4f (Launch picks %s)\n", sh.B,
                    sh.G, sh.H, cn, cw, CombineWide(sh.B, sh.G * sh.H, std::min(d.num_sms / ((sh.G * sh.H + 63) / 64), kMaxParts), d.num_sms) ? "wide" : "narrow");
      }
      Free(d);
    }
    return (ok_mask & 4) ? 0 : 1;
  }
  // Small-G*H kernel (G*H <= 16): tokens as the wgmma M dimension. Bit 3 of ok_mask.
  {
    const std::vector<CaseDef> small_cases = {
        {4, 1, 16, 64, {1000, 0, 77, 130}},
        {5, 2, 5, 16, {1, 64, 3000, 129, 191}},
    };
    ok_mask |= 8;
    for (size_t ci = 0; ci < small_cases.size(); ++ci) {
      const CaseDef& cd = small_cases[ci];
      Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 11 + (unsigned)ci);
      Dev d = Upload(c, scale);
      std::printf("small case %zu (B=%d G=%d H=%d P=%d) small, 1 consumer:\n", ci, cd.B, cd.G, cd.H, cd.P);
      if (!RunChecked(c, d, scale, [&] { Run<kSmallGh, kFmtNative, 64>(d); })) ok_mask &= ~8;
      std::printf("small case %zu (B=%d G=%d H=%d P=%d) small, 2 consumers:\n", ci, cd.B, cd.G, cd.H, cd.P);
      if (!RunChecked(c, d, scale, [&] { Run<kSmallGh, kFmtNative, 32>(d); })) ok_mask &= ~8;
      Free(d);
    }
  }
  std::printf("variants passing: mask=%d\n", ok_mask);
  // Quantized pages: {fp8, nvfp4} x {tile, pipe}; bit 2*f + v of qmask.
  int qmask = 0;
  const char* fnames[2] = {"fp8", "nvfp4"};
  const char* vnames[2] = {"tile", "pipe"};
  for (int f = 0; f < 2; ++f) {
    Case c = MakeCase(4, 2, 40, 64, {1000, 0, 77, 130}, 2);
    QHost qh = MakeQuant(c, f == 0 ? kFmtFp8 : kFmtNvfp4, 7 + f);
    Dev d = Upload(c, scale);
    QParams qp = UploadQuant(qh);
    for (int v = 0; v < 2; ++v) {
      std::printf("%s %s:\n", fnames[f], vnames[v]);
      const bool ok = RunChecked(c, d, scale, [&] {
        if (f == 0) { if (v == 0) Run<kWgmma, kFmtFp8>(d, qp); else Run<kWgmmaPipe, kFmtFp8>(d, qp); }
        else { if (v == 0) Run<kWgmma, kFmtNvfp4>(d, qp); else Run<kWgmmaPipe, kFmtNvfp4>(d, qp); }
      });
      if (ok) qmask |= 1 << (2 * f + v);
    }
    FreeQuant(qp);
    Free(d);
  }
  std::printf("quantized pages passing: qmask=%d (15 = fp8, nvfp4 x tile, pipe)\n", qmask);
  {  // quantized pages through the small-G*H kernel (producer dequantization): bits 32 (fp8), 64 (nvfp4)
    const std::vector<CaseDef> small_cases = {
        {4, 1, 16, 64, {1000, 0, 77, 130}},
        {5, 2, 5, 16, {1, 64, 3000, 129, 191}},
    };
    for (int f = 0; f < 2; ++f) {
      bool all = true;
      for (size_t ci = 0; ci < small_cases.size(); ++ci) {
        const CaseDef& cd = small_cases[ci];
        Case c = MakeCase(cd.B, cd.G, cd.H, cd.P, cd.lens, 21 + (unsigned)ci);
        QHost qh = MakeQuant(c, f == 0 ? kFmtFp8 : kFmtNvfp4, 17 + f);
        Dev d = Upload(c, scale);
        QParams qp = UploadQuant(qh);
        // Every variant the timings below run (kVar bits: 64 / 32 = 1 / 2 consumers, 128 / 256 = 1 / 2
        // producers, 8 = two raw tiles in flight).
        auto check = [&](auto var, const char* what) {
          constexpr int kV = decltype(var)::value;
          std::printf("%s small case %zu (B=%d G=%d H=%d P=%d), %s:\n", fnames[f], ci, cd.B, cd.G, cd.H, cd.P, what);
          all &= RunChecked(c, d, scale, [&] {
            if (f == 0) Run<kSmallGh, kFmtFp8, kV>(d, qp); else Run<kSmallGh, kFmtNvfp4, kV>(d, qp);
          });
        };
        check(std::integral_constant<int, 64 | 128>{}, "1 consumer, 1 producer");
        check(std::integral_constant<int, 32 | 128>{}, "2 consumers, 1 producer");
        check(std::integral_constant<int, 64 | 256>{}, "1 consumer, 2 producers");
        check(std::integral_constant<int, 32 | 256>{}, "2 consumers, 2 producers");
        check(std::integral_constant<int, 32 | 256 | 8>{}, "2 consumers, 2 producers, two tiles in flight");
        FreeQuant(qp);
        Free(d);
      }
      if (all) qmask |= 32 << f;
    }
    std::printf("quantized small-G*H passing: %s fp8, %s nvfp4\n", (qmask & 32) ? "yes" : "NO", (qmask & 64) ? "yes" : "NO");
  }
  {  // fp8 QK variant (opt-in): reference with the queries' per-row fp8 round trip
    Case c = MakeCase(4, 2, 40, 64, {1000, 0, 77, 130}, 2);
    QHost qh = MakeQuant(c, kFmtFp8, 7);
    QuantizeQueriesFp8(c);
    Dev d = Upload(c, scale);
    QParams qp = UploadQuant(qh);
    std::printf("fp8 fp8qk:\n");
    if (RunChecked(c, d, scale, [&] { Run<kWgmmaFp8Qk, kFmtFp8>(d, qp); }, " (opt-in variant: does not gate the exit code)"))
      qmask |= 16;
    FreeQuant(qp);
    Free(d);
  }
  if (small) return ((ok_mask & 2) && (qmask & 15) == 15 && (qmask & 96) == 96) ? 0 : 1;
  if ((ok_mask & 8) && (qmask & 96) == 96) {  // small-G*H: consumers x producers, bf16 / fp8 / nvfp4 at H=16, G=1
    for (int B : {1, 64, 128}) {
      Dev d = UploadTiming(B, 1, 16, 64, 65536, scale);
      const double tok = (double)B * 65536;
      const float b1 = TimeMs<kSmallGh, kFmtNative, 64>(d, 10), b2 = TimeMs<kSmallGh, kFmtNative, 32>(d, 10);
      std::printf("qsmall B=%d G=1 H=16: bf16 1c %.4f ms (%.2f TB/s) 2c %.4f ms (%.2f TB/s)\n", B, b1, tok * 1152 / b1 / 1e9,
                  b2, tok * 1152 / b2 / 1e9);
      const float bf = std::min(b1, b2);
      for (int f = 0; f < 2; ++f) {
        QParams qp = QuantTiming(d, f == 0 ? kFmtFp8 : kFmtNvfp4);
        const int bpt = f == 0 ? 576 : 324;
        // kVar as in the checks above; part 1 = main kernel only (the probes time no schedule / combine).
        auto time = [&](auto var, int part = 0) {
          constexpr int kV = decltype(var)::value;
          return f == 0 ? TimeMs<kSmallGh, kFmtFp8, kV>(d, 10, qp, part) : TimeMs<kSmallGh, kFmtNvfp4, kV>(d, 10, qp, part);
        };
        using std::integral_constant;
        const float t[4] = {time(integral_constant<int, 64 | 128>{}), time(integral_constant<int, 32 | 128>{}),
                            time(integral_constant<int, 64 | 256>{}), time(integral_constant<int, 32 | 256>{})};
        const float po[4] = {time(integral_constant<int, 64 | 128 | 2>{}, 1), time(integral_constant<int, 32 | 128 | 2>{}, 1),
                             time(integral_constant<int, 64 | 256 | 2>{}, 1), time(integral_constant<int, 32 | 256 | 2>{}, 1)};
        const char* vn[4] = {"1c1p", "2c1p", "1c2p", "2c2p"};
        for (int v = 0; v < 4; ++v)
          std::printf("qsmall B=%d G=1 H=16 %s %s: %.4f ms = %.2fx best bf16 (%.2f TB/s; producer alone %.4f)\n", B, fnames[f],
                      vn[v], t[v], bf / t[v], tok * bpt / t[v] / 1e9, po[v]);
        // 2c2p: conversion alone (no loads, no math); two tiles in flight: whole, producer alone
        const float x[3] = {time(integral_constant<int, 32 | 256 | 2 | 4>{}, 1), time(integral_constant<int, 32 | 256 | 8>{}),
                            time(integral_constant<int, 32 | 256 | 8 | 2>{}, 1)};
        std::printf("qsmall B=%d G=1 H=16 %s 2c2p: conversion alone %.4f ms; two tiles in flight %.4f ms = %.2fx (producer alone %.4f)\n",
                    B, fnames[f], x[0], x[1], bf / x[1], x[2]);
        FreeQuant(qp);
      }
      Free(d);
    }
  }
  if (qsmall) return ((ok_mask & 2) && (qmask & 15) == 15 && (qmask & 96) == 96) ? 0 : 1;
  {  // seesaw probes: HBM vs L2-resident tables, proxy fence on/off, main kernel alone at B=1
    struct P { int B, G, H; bool l2; };
    for (P sh : {P{64, 1, 128, false}, P{64, 1, 128, true}, P{64, 1, 16, false}, P{64, 1, 16, true}, P{1, 1, 128, false}}) {
      Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, 65536, scale, sh.l2);
      const double flops = 2.0 * sh.B * sh.G * sh.H * 65536.0 * 1088, bytes = (double)sh.B * 65536 * 576 * 2;
      const float a = TimeMs<kSeesaw>(d, 5), f = TimeMs<kSeesaw, kFmtNative, 1>(d, 5), m = TimeMs<kSeesaw>(d, 5, QParams{}, 1);
      const float ld = TimeMs<kSeesaw, kFmtNative, 2>(d, 5, QParams{}, 1), mt = TimeMs<kSeesaw, kFmtNative, 4>(d, 5, QParams{}, 1);
      std::printf("probe B=%d H=%d %s: seesaw %.4f ms (%.1f TFLOP/s, %.2f TB/s)  no-proxy-fence %.4f ms  main-only %.4f ms"
                  "  loads-only %.4f ms (%.2f TB/s)  math-only %.4f ms (%.1f TFLOP/s)\n",
                  sh.B, sh.H, sh.l2 ? "L2-resident" : "HBM", a, flops / a / 1e9, bytes / a / 1e9, f, m, ld,
                  bytes * (sh.H > 64 ? 2 : 1) / ld / 1e9, mt, flops / mt / 1e9);
      Free(d);
    }
  }
  if (ok_mask & 8) {  // small-G*H kernel vs seesaw at H=16, G=1
    for (int B : {1, 64, 128}) {
      Dev d = UploadTiming(B, 1, 16, 64, 65536, scale);
      const double bytes = (double)B * 65536 * 576 * 2;
      const float a = TimeMs<kSmallGh>(d, 5), b = TimeMs<kSeesaw>(d, 5), m = TimeMs<kSmallGh>(d, 5, QParams{}, 1);
      std::printf("small B=%d H=16 G=1: small %.4f ms (%.2f TB/s, main-only %.4f)  seesaw %.4f ms (%.2f TB/s)\n", B, a,
                  bytes / a / 1e9, m, b, bytes / b / 1e9);
      Free(d);
    }
  }
  struct Shape { int B, G, H, L; };
  for (Shape sh : {Shape{64, 1, 128, 65536}, Shape{64, 4, 128, 65536}, Shape{1, 1, 128, 65536}, Shape{64, 1, 16, 65536}}) {
    Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, sh.L, scale);
    const double flops = 2.0 * sh.B * sh.G * sh.H * (double)sh.L * 1088, bytes = (double)sh.B * sh.L * 576 * 2;
    for (int mode = 0; mode < 3; ++mode) {
      if (!(ok_mask & (1 << mode))) continue;
      const float ms = mode == 0 ? TimeMs<kMma>(d, 5) : mode == 1 ? TimeMs<kWgmma>(d, 5) : TimeMs<kSeesaw>(d, 5);
      std::printf("B=%d G=%d H=%d L=%d %-9s %.4f ms  %.1f TFLOP/s  %.2f TB/s\n", sh.B, sh.G, sh.H, sh.L, names[mode], ms,
                  flops / ms / 1e9, bytes / ms / 1e9);
    }
    if (sh.B == 64 && sh.G == 1) {  // quantized pages on the memory-bound and the compute-bound shape
      for (int f = 0; f < 2; ++f) {
        QParams qp = QuantTiming(d, f == 0 ? kFmtFp8 : kFmtNvfp4);
        const double qbytes = (double)sh.B * sh.L * (f == 0 ? 576 : 324);
        if (f == 0 && (qmask & 16)) {
          const float ms = TimeMs<kWgmmaFp8Qk, kFmtFp8>(d, 5, qp);
          std::printf("B=%d G=%d H=%d L=%d fp8-fp8qk %.4f ms  %.1f TFLOP/s  %.2f TB/s (576 B/token)\n", sh.B, sh.G, sh.H,
                      sh.L, ms, flops / ms / 1e9, qbytes / ms / 1e9);
        }
        for (int v = 0; v < 2; ++v) {
          if (!(qmask & (1 << (2 * f + v)))) continue;
          const float ms = f == 0 ? (v == 0 ? TimeMs<kWgmma, kFmtFp8>(d, 5, qp) : TimeMs<kWgmmaPipe, kFmtFp8>(d, 5, qp))
                                  : (v == 0 ? TimeMs<kWgmma, kFmtNvfp4>(d, 5, qp) : TimeMs<kWgmmaPipe, kFmtNvfp4>(d, 5, qp));
          std::printf("B=%d G=%d H=%d L=%d %s-%-5s %.4f ms  %.1f TFLOP/s  %.2f TB/s (%d B/token)\n", sh.B, sh.G, sh.H, sh.L,
                      fnames[f], vnames[v], ms, flops / ms / 1e9, qbytes / ms / 1e9, f == 0 ? 576 : 324);
        }
        FreeQuant(qp);
      }
    }
    Free(d);
  }
  return ((ok_mask & 2) && (qmask & 15) == 15) ? 0 : 1;
}
