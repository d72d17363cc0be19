// Streaming probe (H200): how fast can one CTA per SM pull whole 64-token KV pages from HBM into shared memory,
// by load pattern? No math: one thread keeps a ring of R page buffers in flight and re-issues a slot as soon as its
// page has landed. Pages come in a random order (as a page table would give them), 64 rows each.
//
// Why: the TMA-fed kernels stream at ~4.05-4.12 TB/s (seesaw loads alone at H=16 G=4, mla_small_q8's producer alone)
// while the cp.async-fed small-G*H kernel streams 16-bit tiles at ~4.5 TB/s. The TMA kernels issue a page as 8 (bf16)
// or 4 (fp8) boxes of [64 rows x 128 B], i.e. column block after column block, each box touching every row of the page
// at a 1 KB (512 B) stride; cp.async walks it row by row. Patterns (all land in the kernels' layout
// [column block][64 rows][128 B], except bulk):
//   cols:   the kernels' order: one box [64 rows x 128 B] per column block;
//   groups: boxes [8 rows x 128 B], issued row group by row group (each 8-row group's blocks before the next group);
//   g4d:    one 4-D box per page over (128 B, 8 rows, column blocks, row groups): the TMA walks each 8-row group's 8 KB
//           (4 KB) before the next, and it lands as [row group][column block][8 rows][128 B] (wgmma atoms, other strides);
//   rows3d: one 3-D box per page over (128 B, column blocks, rows): contiguous rows, lands row-major (not a wgmma
//           layout: shows whether a TMA walking contiguous memory reaches the bulk rate);
//   bulk:   one contiguous cp.async.bulk per page (the ceiling for a contiguous page; not the kernels' layout);
//   cpasync: 128 threads, 16 B each, row-major order, cp.async.mbarrier.arrive.noinc completion.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a benchmarks/tma_stream_probe.cu -o tma_stream_probe
//   ./tma_stream_probe            # prints TB/s per row width (1024 B: bf16 latent, 512 B: fp8 latent), pattern, ring
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "probe_check.h"

enum Pattern { kCols = 0, kGroups = 1, kBulk = 2, kCpAsync = 3, kG4d = 4, kRows3d = 5 };
constexpr int kRows = 64;

__device__ __forceinline__ uint32_t Smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

template <int kPat, int kR>
__global__ void __launch_bounds__(128, 1) stream(const __grid_constant__ CUtensorMap map, const unsigned char* pool,
                                                 const int* order, int per_cta, int row_bytes) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (Smem(smem_raw) & 1023)) & 1023);
  __shared__ uint64_t full[kR];
  const int page_bytes = kRows * row_bytes, blocks = row_bytes / 128;
  if (threadIdx.x == 0)
    for (int r = 0; r < kR; ++r)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(Smem(&full[r])), "r"(kPat == kCpAsync ? 128 : 1));
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  const int* my = order + (long long)blockIdx.x * per_cta;
  auto wait = [&](int slot, int parity) {
    asm volatile(
        "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(Smem(&full[slot])),
        "r"(parity)
        : "memory");
  };
  for (int i = 0; i < per_cta + kR; ++i) {
    const int slot = i % kR;
    if (i >= kR) {
      if (kPat == kCpAsync || threadIdx.x == 0) wait(slot, ((i / kR) - 1) & 1);
    }
    if (i >= per_cta) continue;
    unsigned char* dst = smem + slot * page_bytes;
    const int page = my[i];
    if constexpr (kPat == kCpAsync) {
      const unsigned char* src = pool + (long long)page * page_bytes;
      for (int u = threadIdx.x; u < page_bytes / 16; u += 128) {
        const int row = u / (row_bytes / 16), unit = u % (row_bytes / 16);
        const int blk = unit / 8, ch = unit % 8;
        const int off = blk * (kRows * 128) + row * 128 + ((ch ^ (row & 7)) << 4);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(Smem(dst + off)), "l"(src + (long long)u * 16));
      }
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(Smem(&full[slot])) : "memory");
    } else if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(Smem(&full[slot])), "r"(page_bytes)
                   : "memory");
      if constexpr (kPat == kBulk) {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                         Smem(dst)),
                     "l"(pool + (long long)page * page_bytes), "r"(page_bytes), "r"(Smem(&full[slot]))
                     : "memory");
      } else if constexpr (kPat == kG4d) {
        asm volatile(
            "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
                Smem(dst)),
            "l"(&map), "r"(0), "r"(0), "r"(0), "r"(page * (kRows / 8)), "r"(Smem(&full[slot]))
            : "memory");
      } else if constexpr (kPat == kRows3d) {
        asm volatile(
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
                Smem(dst)),
            "l"(&map), "r"(0), "r"(0), "r"(page * kRows), "r"(Smem(&full[slot]))
            : "memory");
      } else if constexpr (kPat == kCols) {
        for (int c = 0; c < blocks; ++c)
          asm volatile(
              "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                  Smem(dst + c * kRows * 128)),
              "l"(&map), "r"(c * 128), "r"(page * kRows), "r"(Smem(&full[slot]))
              : "memory");
      } else {  // kGroups: boxes of 8 rows, row group by row group
        for (int g = 0; g < kRows / 8; ++g)
          for (int c = 0; c < blocks; ++c)
            asm volatile(
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                    Smem(dst + c * kRows * 128 + g * 8 * 128)),
                "l"(&map), "r"(c * 128), "r"(page * kRows + g * 8), "r"(Smem(&full[slot]))
                : "memory");
      }
    }
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  const long long pool_bytes = 3LL << 30;
  unsigned char* pool = nullptr;
  CK(cudaMalloc(&pool, pool_bytes));
  CK(cudaMemset(pool, 0x3c, pool_bytes));
  int* order = nullptr;
  std::printf("tma_stream_probe: %d SMs, pool %.1f GB, one CTA per SM, pages of %d rows in random order\n", sms,
              pool_bytes / 1e9, kRows);
  for (int row_bytes : {1024, 512}) {
    const int page_bytes = kRows * row_bytes;
    const int pages = (int)(pool_bytes / page_bytes), per_cta = pages / sms;
    std::vector<int> h(pages);
    std::iota(h.begin(), h.end(), 0);
    std::shuffle(h.begin(), h.end(), std::mt19937(7));
    CK(cudaMalloc(&order, sizeof(int) * pages));
    CK(cudaMemcpy(order, h.data(), sizeof(int) * pages, cudaMemcpyHostToDevice));
    CUtensorMap map{};
    const cuuint32_t estride[4] = {1, 1, 1, 1};
    const double bytes = (double)per_cta * sms * page_bytes;
    const int blocks = row_bytes / 128;
    // kind 0: 2-D [rows, row_bytes] with boxes of 128 B x box_rows; 1: 4-D (128 B, 8 rows, blocks, row groups);
    // 2: 3-D (128 B, blocks, rows)
    auto encode_map = [&](int kind, int box_rows, CUtensorMapL2promotion promo) {
      if (kind == 0) {
        const cuuint64_t dims[2] = {(cuuint64_t)row_bytes, (cuuint64_t)pages * kRows}, strides[1] = {(cuuint64_t)row_bytes};
        const cuuint32_t box[2] = {128, (cuuint32_t)box_rows};
        return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, pool, dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, promo, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      }
      if (kind == 1) {
        const cuuint64_t dims[4] = {128, 8, (cuuint64_t)blocks, (cuuint64_t)pages * (kRows / 8)};
        const cuuint64_t strides[3] = {(cuuint64_t)row_bytes, 128, (cuuint64_t)row_bytes * 8};
        const cuuint32_t box[4] = {128, 8, (cuuint32_t)blocks, kRows / 8};
        return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, pool, dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, promo, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      }
      const cuuint64_t dims[3] = {128, (cuuint64_t)blocks, (cuuint64_t)pages * kRows};
      const cuuint64_t strides[2] = {128, (cuuint64_t)row_bytes};
      const cuuint32_t box[3] = {128, (cuuint32_t)blocks, kRows};
      return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, pool, dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    CU_TENSOR_MAP_SWIZZLE_128B, promo, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    auto run = [&](const char* name, auto kernel, int ring, int kind, int box_rows,
                   CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
      const CUresult r = encode_map(kind, box_rows, promo);
      if (r != CUDA_SUCCESS) {
        std::printf("row %4d B  %-12s ring %d: encode failed (%d)\n", row_bytes, name, ring, (int)r);
        return;
      }
      const int smem = ring * page_bytes + 1024;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      std::vector<float> ms;
      for (int rep = 0; rep < 7; ++rep) {
        CK(cudaEventRecord(a));
        kernel<<<sms, 128, smem>>>(map, pool, order, per_cta, row_bytes);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float t = 0.f;
        CK(cudaEventElapsedTime(&t, a, b));
        if (rep > 0) ms.push_back(t);
      }
      CK(cudaGetLastError());
      std::sort(ms.begin(), ms.end());
      const float med = ms[ms.size() / 2];
      std::printf("row %4d B  %-12s ring %d: %.3f ms  %.2f TB/s (best %.2f)\n", row_bytes, name, ring, med, bytes / med / 1e9,
                  bytes / ms[0] / 1e9);
      CK(cudaEventDestroy(a));
      CK(cudaEventDestroy(b));
    };
    const int ring = row_bytes == 1024 ? 2 : 4;  // the seesaw's two 16-bit buffers; mla_small_q8's four raw tiles
    for (int round = 0; round < 2; ++round) {
      auto all = [&](auto rc) {
        constexpr int R = decltype(rc)::value;
        run("cols", stream<kCols, R>, R, 0, 64);
        run("cols-l2-128", stream<kCols, R>, R, 0, 64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
        run("cols-l2-none", stream<kCols, R>, R, 0, 64, CU_TENSOR_MAP_L2_PROMOTION_NONE);
        run("g4d", stream<kG4d, R>, R, 1, 0);
        run("rows3d", stream<kRows3d, R>, R, 2, 0);
        run("bulk", stream<kBulk, R>, R, 0, 64);
        run("cpasync", stream<kCpAsync, R>, R, 0, 64);
      };
      if (ring == 2) all(std::integral_constant<int, 2>{});
      else all(std::integral_constant<int, 4>{});
    }
    CK(cudaFree(order));
  }
  CK(cudaFree(pool));
  return 0;
}
