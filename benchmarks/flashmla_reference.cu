// The public reference point for issue 4's bf16 targets, timed on our own device: FlashMLA's dense sm90 decode
// (deepseek-ai/FlashMLA, csrc/sm90/decode/dense; its scheduler and combine kernels) driven without PyTorch, over the
// issue's shapes, with a CPU check of one small case. Nothing of FlashMLA is in this repository: its sources and the
// CUTLASS revision its submodule pins are built from a checkout given at build time.
//
// Built and checked against FlashMLA 9241ae3, whose csrc/cutlass submodule pins NVIDIA/cutlass 147f5673 (the headers of that
// commit: git -C cutlass archive 147f5673 include tools/util/include | tar -x -C $CUTLASS):
//   FM=/path/to/FlashMLA CUTLASS=/path/to/cutlass-147f5673
//   nvcc -std=c++20 -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --use_fast_math --expt-relaxed-constexpr \
//     --expt-extended-lambda -DFLASH_MLA_DISABLE_FP16 -I$FM/csrc -I$FM/csrc/kerutils/include -I$FM/csrc/sm90 \
//     -I$CUTLASS/include -I$CUTLASS/tools/util/include benchmarks/flashmla_reference.cu \
//     $FM/csrc/sm90/decode/dense/instantiations/bf16.cu $FM/csrc/smxx/decode/combine/combine.cu \
//     $FM/csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu -lcuda -o flashmla_reference
//   ./flashmla_reference [iterations, default 20] [B:G:H:L ...]   (shapes, default: the issue's eight)
//   FLASHMLA_REF_FOLD=128 ./flashmla_reference ...                  (the page table folded onto 128 pages: L2-resident)
//
// Prints, per shape (B, G = s_q, H = h_q, L), the mean ms of one decode call (scheduler + main + combine, as FlashMLA's
// Python API runs them) and of the main kernel alone, over `iterations` back-to-back calls after two warm-up calls
// (CUDA events), with TFLOP/s = 2 B G H L (576 + 512) / time: the numbers to set against benchmarks/mla_decode.py's.
#include <cuda_runtime.h>
#include <cutlass/bfloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "params.h"
#include "sm90/decode/dense/splitkv_mla.h"
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

using bf16 = cutlass::bfloat16_t;
constexpr int kDk = 576, kDv = 512, kPage = 64;

// x[i] for i < n: a hash of (seed, i) mapped to [-1.73, 1.73) (unit variance), on the device: the 64K-token caches
// are 4.8 GB, too many samples to draw on the host per shape.
__global__ void FillUniform(bf16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = bf16(((float)(h >> 8) * (1.f / 16777216.f) - 0.5f) * 3.4641f);
  }
}

// One decode problem on the device: q [B, G, H, 576], a paged cache of B * L / 64 pages in a random order (kv heads 1),
// every sequence L long, with FlashMLA's scheduler, main kernel and combine set up as its dense decode API does.
struct Problem {
  int B, G, H, L, nsp, pages_per_seq;
  bf16 *q = nullptr, *k = nullptr, *o = nullptr;
  float *lse = nullptr, *lse_acc = nullptr, *o_acc = nullptr;
  int *table = nullptr, *lens = nullptr, *nsplits = nullptr;
  DecodingSchedMeta* meta = nullptr;
  std::vector<bf16> hq, hk;
  std::vector<int> htable;

  // host: the inputs drawn on the host and kept for check(); else drawn on the device.
  Problem(int B_, int G_, int H_, int L_, int num_sms, std::mt19937& rng, bool host) : B(B_), G(G_), H(H_), L(L_) {
    pages_per_seq = (L + kPage - 1) / kPage;
    const int rows = G * H;  // q rows per kv head (FlashMLA's q_seq_per_hk)
    nsp = std::max(num_sms / ((rows + 63) / 64), 1);
    const size_t nq = (size_t)B * rows * kDk, nk = (size_t)B * pages_per_seq * kPage * kDk;
    if (host) {
      std::normal_distribution<float> nd(0.f, 1.f);
      hq.resize(nq);
      hk.resize(nk);
      for (auto& x : hq) x = bf16(nd(rng));
      for (auto& x : hk) x = bf16(nd(rng));
    }
    htable.resize((size_t)B * pages_per_seq);
    for (size_t i = 0; i < htable.size(); ++i) htable[i] = (int)i;
    std::shuffle(htable.begin(), htable.end(), rng);
    // FLASHMLA_REF_FOLD=n: every table entry taken modulo n, so all sequences read n pages (n * 72 KB; 128 pages = 9.4 MB
    // stay in L2): how much of a call's time is the trip to HBM (benchmarks/NOTES.md, session 40).
    if (const char* f = std::getenv("FLASHMLA_REF_FOLD"); f != nullptr)
      if (const int fold = std::atoi(f); fold > 0)
        for (int& e : htable) e %= fold;
    std::vector<int> hlens(B, L);
    CK(cudaMalloc(&q, nq * sizeof(bf16)));
    CK(cudaMalloc(&k, nk * sizeof(bf16)));
    CK(cudaMalloc(&o, (size_t)B * rows * kDv * sizeof(bf16)));
    CK(cudaMalloc(&lse, (size_t)B * rows * sizeof(float)));
    CK(cudaMalloc(&lse_acc, (size_t)(B + nsp) * rows * sizeof(float)));
    CK(cudaMalloc(&o_acc, (size_t)(B + nsp) * rows * kDv * sizeof(float)));
    CK(cudaMalloc(&table, htable.size() * sizeof(int)));
    CK(cudaMalloc(&lens, B * sizeof(int)));
    CK(cudaMalloc(&nsplits, (B + 1) * sizeof(int)));
    CK(cudaMalloc(&meta, nsp * sizeof(DecodingSchedMeta)));
    if (host) {
      CK(cudaMemcpy(q, hq.data(), nq * sizeof(bf16), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(k, hk.data(), nk * sizeof(bf16), cudaMemcpyHostToDevice));
    } else {
      FillUniform<<<1024, 256>>>(q, nq, (uint32_t)rng());
      FillUniform<<<4096, 256>>>(k, nk, (uint32_t)rng());
      CK(cudaGetLastError());
    }
    CK(cudaMemcpy(table, htable.data(), htable.size() * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(lens, hlens.data(), B * sizeof(int), cudaMemcpyHostToDevice));
  }
  ~Problem() {
    for (void* ptr : {(void*)q, (void*)k, (void*)o, (void*)lse, (void*)lse_acc, (void*)o_acc, (void*)table, (void*)lens,
                      (void*)nsplits, (void*)meta})
      cudaFree(ptr);
  }

  void schedule() {
    GetDecodeSchedMetaParams m{};
    m.b = B, m.s_q = G, m.block_size_n = 64, m.fixed_overhead_num_blocks = 5;
    m.topk = -1, m.extra_topk = -1, m.topk_length = nullptr, m.extra_topk_length = nullptr;
    m.seqlens_k_ptr = lens, m.tile_scheduler_metadata_ptr = meta, m.num_splits_ptr = nsplits, m.num_sm_parts = nsp;
    m.stream = 0;
    smxx::decode::run_get_decoding_sched_meta_kernel(m);
  }
  void main_kernel() {
    const int rows = G * H;
    DenseAttnDecodeParams d{};
    d.b = B, d.s_q = G, d.q_seq_per_hk = rows, d.d = kDk, d.d_v = kDv, d.h_q = H, d.h_k = 1;
    d.num_blocks = B * pages_per_seq, d.q_head_per_hk = H, d.is_causal = false;  // every row sees all L tokens
    d.scale_softmax = 1.f / std::sqrt((float)kDk), d.scale_softmax_log2 = d.scale_softmax * 1.4426950408889634f;
    d.q_ptr = q, d.k_ptr = k, d.o_ptr = o, d.softmax_lse_ptr = lse;
    d.q_batch_stride = (int64_t)rows * kDk, d.k_batch_stride = (int64_t)kPage * kDk, d.o_batch_stride = (int64_t)rows * kDv;
    d.q_row_stride = kDk, d.k_row_stride = kDk, d.o_row_stride = kDv;
    d.q_head_stride = kDk, d.k_head_stride = kDk, d.o_head_stride = (int64_t)rows * kDv;
    d.block_table = table, d.block_table_batch_stride = pages_per_seq, d.page_block_size = kPage, d.seqlens_k_ptr = lens;
    d.tile_scheduler_metadata_ptr = meta, d.num_sm_parts = nsp, d.num_splits_ptr = nsplits;
    d.total_num_splits = B + nsp, d.softmax_lseaccum_ptr = lse_acc, d.oaccum_ptr = o_acc, d.stream = 0;
    sm90::run_flash_splitkv_mla_kernel<bf16>(d);
  }
  void combine() {
    const int rows = G * H;
    CombineParams c{};
    c.b = B, c.s_q = G, c.h_q = H, c.d_v = kDv, c.lse = lse, c.out = o;
    c.stride_lse_b = rows, c.stride_lse_s_q = H;
    c.stride_o_b = rows * kDv, c.stride_o_s_q = H * kDv, c.stride_o_h_q = kDv;
    c.lse_accum = lse_acc, c.o_accum = o_acc;
    c.stride_lse_accum_split = rows, c.stride_lse_accum_s_q = H;
    c.stride_o_accum_split = rows * kDv, c.stride_o_accum_s_q = H * kDv, c.stride_o_accum_h_q = kDv;
    c.tile_scheduler_metadata_ptr = meta, c.num_splits_ptr = nsplits, c.num_sm_parts = nsp;
    c.attn_sink = nullptr, c.stream = 0;
    smxx::decode::run_flash_mla_combine_kernel<bf16>(c);
  }
  void call() {
    schedule();
    main_kernel();
    combine();
  }

  // Largest |o - reference| over rows of sequences 0 and B - 1 (float64 on the CPU), and of the lse (natural log).
  void check(double& max_o, double& max_lse) {
    const int rows = G * H;
    std::vector<bf16> ho((size_t)B * rows * kDv);
    std::vector<float> hl((size_t)B * rows);
    CK(cudaMemcpy(ho.data(), o, ho.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl.data(), lse, hl.size() * sizeof(float), cudaMemcpyDeviceToHost));
    max_o = max_lse = 0.0;
    const double scale = 1.0 / std::sqrt((double)kDk);
    // token t of sequence b in the host copy of the paged cache
    auto krow = [&](int b, int t) {
      return &hk[((size_t)htable[(size_t)b * pages_per_seq + t / kPage] * kPage + t % kPage) * kDk];
    };
    for (int b : {0, B - 1}) {
      for (int r = 0; r < rows; r += std::max(rows / 8, 1)) {
        std::vector<double> s(L);
        double m = -INFINITY;
        for (int t = 0; t < L; ++t) {
          const bf16* kr = krow(b, t);
          const bf16* qr = &hq[((size_t)b * rows + r) * kDk];
          double acc = 0.0;
          for (int d = 0; d < kDk; ++d) acc += (double)(float)qr[d] * (double)(float)kr[d];
          s[t] = acc * scale;
          m = std::max(m, s[t]);
        }
        double sum = 0.0;
        std::vector<double> ov(kDv, 0.0);
        for (int t = 0; t < L; ++t) {
          const double p = std::exp(s[t] - m);
          sum += p;
          const bf16* kr = krow(b, t);
          for (int d = 0; d < kDv; ++d) ov[d] += p * (double)(float)kr[d];
        }
        for (int d = 0; d < kDv; ++d)
          max_o = std::max(max_o, std::fabs(ov[d] / sum - (double)(float)ho[((size_t)b * rows + r) * kDv + d]));
        // FlashMLA's lse layout for one kv head: [B, rows] with row = token * H + head, as q's
        max_lse = std::max(max_lse, std::fabs(m + std::log(sum) - (double)hl[(size_t)b * rows + r]));
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::mt19937 rng(1234);
  {  // correctness first: a small case against the float64 reference (poisoned outputs)
    Problem pr(4, 1, 128, 1000, prop.multiProcessorCount, rng, true);
    CK(cudaMemset(pr.o, 0xFF, (size_t)4 * 128 * kDv * sizeof(bf16)));
    CK(cudaMemset(pr.lse, 0xFF, (size_t)4 * 128 * sizeof(float)));
    pr.call();
    CK(cudaDeviceSynchronize());
    double eo, el;
    pr.check(eo, el);
    std::printf("check B=4 G=1 H=128 L=1000: max |o - ref| %.3e, max |lse - ref| %.3e %s\n", eo, el,
                eo < 2e-2 && el < 1e-3 ? "PASS" : "FAIL");
  }
  struct Shape { int B, G, H, L; };
  std::vector<Shape> shapes = {{64, 1, 128, 65536}, {16, 1, 128, 65536}, {16, 4, 128, 65536}, {64, 4, 128, 65536},
                               {64, 4, 64, 65536},  {1, 1, 128, 65536},  {64, 1, 16, 65536},  {64, 4, 16, 65536}};
  if (argc > 2) {  // shapes given as B:G:H:L (e.g. 64:1:128:65536) replace the default list
    shapes.clear();
    for (int i = 2; i < argc; ++i) {
      Shape sh{};
      if (std::sscanf(argv[i], "%d:%d:%d:%d", &sh.B, &sh.G, &sh.H, &sh.L) != 4 || sh.B < 1 || sh.G < 1 || sh.H < 1 ||
          sh.L < kPage || sh.L % kPage != 0) {
        std::fprintf(stderr, "shape %s: expected B:G:H:L with positive B, G, H and L a multiple of %d\n", argv[i], kPage);
        return 2;
      }
      shapes.push_back(sh);
    }
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (const Shape& sh : shapes) {
    Problem pr(sh.B, sh.G, sh.H, sh.L, prop.multiProcessorCount, rng, false);
    pr.call();
    pr.call();
    CK(cudaDeviceSynchronize());
    float ms_call = 0.f, ms_main = 0.f;
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) pr.call();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_call, e0, e1));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) pr.main_kernel();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_main, e0, e1));
    CK(cudaGetLastError());
    ms_call /= iters, ms_main /= iters;
    const double flop = 2.0 * sh.B * sh.G * sh.H * (double)sh.L * (kDk + kDv);
    const double kv_bytes = (double)sh.B * sh.L * kDk * 2;
    std::printf("flashmla B=%d G=%d H=%d L=%d call_ms=%.4f main_ms=%.4f tflop_per_s=%.1f kv_tb_per_s=%.3f\n", sh.B, sh.G,
                sh.H, sh.L, ms_call, ms_main, flop / ms_call * 1e-9, kv_bytes / ms_call * 1e-9);
  }
  return 0;
}
