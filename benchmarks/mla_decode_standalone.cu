// Standalone driver of the helix_mla_decode CUDA kernels (no XLA): checks each kernel variant against a
// double-precision CPU reference on a small unbalanced case, then times them on larger ones with CUDA
// events. Used on the H200 for compute-sanitizer (racecheck crashes under the JAX process) and to pick
// the variant. Build (from the repo root):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -diag-suppress 940,2473 -Xcompiler -Wno-return-type \
//     -I$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())') -Iffi/src \
//     benchmarks/mla_decode_standalone.cu -o /tmp/mla_standalone
//   /tmp/mla_standalone [small]      (small: correctness only, for the sanitizers)
#include "../ffi/src/mla_decode_cuda.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
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
  return c;
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

template <int kMode>
static void Run(Dev& d) {
  Params p = d.p;
  const int mtiles = (p.GH + kRowsTile - 1) / kRowsTile;
  const int num_parts = std::min(std::max(d.num_sms / mtiles, 1), kMaxParts);
  const WsLayout l = Layout(p.B, p.GH);
  Sched s{reinterpret_cast<int4*>(d.ws + l.seg), reinterpret_cast<int2*>(d.ws + l.part), reinterpret_cast<int2*>(d.ws + l.batch)};
  p.lse_part = reinterpret_cast<float*>(d.ws + l.lse);
  p.o_part = reinterpret_cast<float*>(d.ws + l.o);
  mla_schedule<<<1, 1>>>(p.bounds, p.B, p.G, p.cap, num_parts, s);
  CK(cudaGetLastError());
  CK((LaunchMain<true, kMode>(p, s, num_parts, mtiles, 0)));
  mla_combine<true><<<(unsigned)(p.B * p.GH), 128>>>(p.o_part, p.lse_part, s, p.GH, d.o, d.lse);
  CK(cudaGetLastError());
}

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
          for (int k = 0; k < 512; ++k) dot += (double)Bf2F(c.ql[r * 512 + k]) * Bf2F(c.cl[row * 512 + k]);
          for (int k = 0; k < 64; ++k) dot += (double)Bf2F(c.qr[r * 64 + k]) * Bf2F(c.kr[row * 64 + k]);
          lg[t] = dot * scale;
          m = std::max(m, lg[t]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t = 0; t < n; ++t) {
          const size_t row = (size_t)c.table[b * c.npp + t / c.P] * c.P + t % c.P;
          const double w = std::exp(lg[t] - m);
          sum += w;
          for (int k = 0; k < 512; ++k) acc[k] += w * Bf2F(c.cl[row * 512 + k]);
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
  return (bad || !(lse_err < 2e-2)) ? 1.0 : err;
}

__global__ void FillRandom(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = __bfloat16_as_ushort(__float2bfloat16(((h & 0xFFFF) / 65536.f - 0.5f) * 4.f));
  }
}

// Timing case: data generated on the device (host RNG over gigabytes would dominate the run).
static Dev UploadTiming(int B, int G, int H, int P, int L, float scale) {
  Case c{B, G, H, P, (L + P - 1) / P, 0};
  c.N = B * c.npp;
  c.bounds.assign(B * G, L);
  c.table.resize(B * c.npp);
  for (int i = 0; i < B * c.npp; ++i) c.table[i] = i;
  std::shuffle(c.table.begin(), c.table.end(), std::mt19937(3));
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

template <int kMode>
static float TimeMs(Dev& d, int iters) {
  Run<kMode>(d);
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) Run<kMode>(d);
  CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / iters;
}

int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "small") == 0;
  const float scale = 0.0721f;
  const char* names[2] = {"mma", "wgmma"};
  int ok_mask = 0;
  {
    Case c = MakeCase(4, 2, 40, 64, {1000, 0, 77, 130}, 1);
    Dev d = Upload(c, scale);
    for (int mode = 0; mode < 2; ++mode) {
      std::printf("%s:\n", names[mode]);
      CK(cudaMemset(d.o, 0xFF, (size_t)c.B * c.G * c.H * 512 * 2));  // poison (NaN)
      CK(cudaMemset(d.lse, 0xFF, (size_t)c.B * c.G * c.H * 4));
      if (mode == 0) Run<kMma>(d); else Run<kWgmma>(d);
      CK(cudaDeviceSynchronize());
      const double e = Check(c, d, scale);
      if (e < 2e-2) ok_mask |= 1 << mode;
      std::printf("  %s\n", e < 2e-2 ? "PASS" : "FAIL");
    }
    Free(d);
  }
  std::printf("variants passing: mask=%d\n", ok_mask);
  if (small) return (ok_mask & 2) ? 0 : 1;
  struct Shape { int B, G, H, L; };
  for (Shape sh : {Shape{64, 1, 128, 65536}, Shape{64, 4, 128, 65536}, Shape{1, 1, 128, 65536}, Shape{64, 1, 16, 65536}}) {
    Dev d = UploadTiming(sh.B, sh.G, sh.H, 64, sh.L, scale);
    const double flops = 2.0 * sh.B * sh.G * sh.H * (double)sh.L * 1088, bytes = (double)sh.B * sh.L * 576 * 2;
    for (int mode = 0; mode < 2; ++mode) {
      if (!(ok_mask & (1 << mode))) continue;
      const float ms = mode == 0 ? TimeMs<kMma>(d, 5) : TimeMs<kWgmma>(d, 5);
      std::printf("B=%d G=%d H=%d L=%d %-9s %.4f ms  %.1f TFLOP/s  %.2f TB/s\n", sh.B, sh.G, sh.H, sh.L, names[mode], ms,
                  flops / ms / 1e9, bytes / ms / 1e9);
    }
    Free(d);
  }
  return (ok_mask & 2) ? 0 : 1;
}
