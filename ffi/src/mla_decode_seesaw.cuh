// Warp-specialized "seesaw" split-KV kernel for native 16-bit pages (HELIX_MLA_DECODE_KERNEL=seesaw).
// Included by mla_decode_cuda.cu (uses its tile layout, descriptors and Params / Sched).
//
// One CTA = 3 warpgroups over a 64-row query tile: WG2 is the producer (Q by cp.async; 64-token KV tiles
// into two 72 KB buffers, completion signalled on per-64-column-block mbarriers), WG0 and WG1
// are consumers that own the left / right 256 output columns (64 x 256 fp32 accumulators each).
// Local tile j of a segment is "owned" by WG j%2: the owner computes S_j = Q K_j^T on a full 64-token
// tile (m64n64 wgmma, so Q is read from shared memory once per 64 tokens), the running max m_j and
// P_j = exp(S_j - m_j); it leaves a 16-bit copy of P_j in the tile's rope block (dead once S_j is done)
// plus m_j in shared memory for the other WG (named-barrier hand-off), then multiplies its own P_j from
// registers (RS wgmma) into its half of O. The other WG, once softmax_j is out, applies alpha_j =
// exp(m_{j-1} - m_j) to its half and issues P_j V_j (SS wgmma) after the first part of its own S_{j+1} (the
// first blocks of its own V half: kSsSplitQ) and before the rest (see own_tile). Each buffer is released by role:
// the owner's V half (the owner alone reads it: released after its PV), the rope/P block and the non-owner's V half
// (after both WGs are done with them); the producer refills a tile in the owner's S order (owner's V half, rope
// block, the other half), so the next tile's S can start on its first blocks early. Softmax statistics:
// both WGs apply every alpha_j in order; each sums the row sums
// of the tiles it owns; L = l_0 + l_1 at the end of a segment.
//
// KV loads (kLoad): 0 = cp.async by all 128 producer threads (any page size); 1 / 2 = TMA (page size a
// multiple of 64: a tile is 64 consecutive pool rows): producer warp 0 waits, its lane 0 issues 9 tensor copies of
// 64 x 64 per tile (8 latent blocks from one tensor map, the rope block from another; the maps' 128-byte
// swizzle is exactly TileOff's layout), completion by transaction count on the same per-block mbarriers
// (2: with an L2 evict-first hint). A sequence's last, partial tile still goes through cp.async, which
// zero-fills the slots past the bound (a pool slot past it may hold anything, NaN included).
// 4 = nvfp4 pages (P % 64 == 0): the producer TMA-loads a tile's raw codes and scales into the tail of its buffer and
// decodes them in place into the 16-bit tile (Nv4DecodeTile), so the consumers run unchanged on exact bf16 / f16
// values (e2m1 * E4M3 scale); the global scale folds into the logit scale and the output.
// 3 = TMA evict-first with multicast over a cluster of two CTAs (1 x 2 x 1: the two row tiles of a part, which
// walk the same segments): each CTA issues every other block of a whole tile to both CTAs' shared memory, so a
// KV tile crosses L2 -> SM once per pair instead of once per row tile. A buffer part may then only be
// refilled when both CTAs' consumers released it: the empty barriers count one arrival per consumer warp of
// each CTA (8 x 2), one lane arrives locally and one on the peer. Partial last tiles stay CTA-local (cp.async).
#pragma once

namespace helix_ffi {
namespace {

// Timeline probe of the standalone driver (built with -DHELIX_SS_TRACE; nothing otherwise): clock64 stamps of
// CTA (0, 0)'s events per CTA-local tile k, read back by the driver.
enum SsTraceEvent { kTrPart0, kTrPart1, kTrPart2, kTrStart, kTrRel, kTrFirst, kTrLast, kTrSDone, kTrSmax, kTrPvIss,
                    kTrOFetch, kTrLate, kTrEvents };
#ifdef HELIX_SS_TRACE
constexpr int kTrTiles = 256;
__device__ long long g_ss_trace[kTrEvents][kTrTiles];
// Stamps event ev of tile k into table tab (any kernel's [events][kTrTiles] table) where cond holds in CTA (0, 0).
#define HELIX_TRACE_STAMP(tab, ev, k, cond)                                                                  \
  do {                                                                                                       \
    if ((cond) && blockIdx.x == 0 && blockIdx.y == 0 && (k) >= 0 && (k) < kTrTiles) tab[ev][k] = clock64(); \
  } while (0)
#else
#define HELIX_TRACE_STAMP(tab, ev, k, cond) \
  do {                                      \
  } while (0)
#endif
#define SS_TRACE(ev, k, cond) HELIX_TRACE_STAMP(g_ss_trace, ev, k, cond)
// Per-CTA globaltimer stamps (ns, one clock for all SMs) of every CTA's start (its part planned) and end (both consumer
// warpgroups done), and its SM, [3][row tile * kMaxParts + part], trace builds only: the spread of the CTAs' end times (session 43).
#ifdef HELIX_SS_TRACE
__device__ unsigned long long g_ss_cta[3][16 * kMaxParts];  // start, end, SM id
__device__ __forceinline__ void SsCtaStamp(int e) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
  if (blockIdx.y < 16) g_ss_cta[e][blockIdx.y * kMaxParts + blockIdx.x] = t, g_ss_cta[2][blockIdx.y * kMaxParts + blockIdx.x] = sm;
}
#define SS_CTA_TRACE(e, cond) \
  do {                        \
    if (cond) SsCtaStamp(e);  \
  } while (0)
#else
#define SS_CTA_TRACE(e, cond) \
  do {                        \
  } while (0)
#endif

constexpr int kSsThreads = 384;
constexpr int kSsTileBytes = kTileElems * 2;  // 73728
constexpr int kSsProducerRegs = 56, kSsConsumerRegs = 224;  // setmaxnreg budgets (see the producer)
// kLoad 4: the decoding producer's registers set its pace (H200, session 18: 40 / 232 and 56 / 224 spilled in the decode,
// 72 / 216 was 1-5 % slower than 88 / 208, which compiles without spills in either region).
constexpr int kSsNv4ProducerRegs = 88, kSsNv4ConsumerRegs = 208;
constexpr int kSsSmemBytes = 3 * kSsTileBytes + 2 * 64 * 4 + 2 * 2 * 64 * 4 + 32 * 8 + 64 * 4 + 1024;
// The nvfp4 staging slot (mla_seesaw kVar bit 8, Nv4DecodeTileS): the next tile's latent codes of blocks 0-1 (64-byte
// box, 64-byte swizzle, 4 KB) and its latent scales (2 KB), 1024-aligned after sQs, in the last 8 KB of shared memory.
constexpr int kSsStageOff = ((kSsSmemBytes - 1024 + 1023) / 1024) * 1024;
constexpr int kSsStageBytes = 4096 + 2048;
constexpr int kSsSmemBytesStage = kSsStageOff + kSsStageBytes + 1024;
static_assert(kSsSmemBytesStage <= 232448, "the staging slot must fit the H200's 227 KB of shared memory per block");
// The pair schedule with consumer-issued copies (kSelf) keeps WG0's P in a block of its own at kSsStageOff (FlashMLA's
// sP0; attempt 70), so a tile's rope block is free once its S is done: 227 KB exactly.
constexpr int kSsSmemBytesP0 = kSsStageOff + 64 * 64 * 2 + 1024;
static_assert(kSsSmemBytesP0 <= 232448, "WG0's P block must fit the H200's 227 KB of shared memory per block");

struct SsBars {
  uint64_t full[2][9];   // per buffer, per 64-column block: 128 producer arrivals (cp.async) or 1 (+ bytes: TMA)
  // per buffer, by role in the tile's refill order: [0] the owner's V half (read by the owner only: 128
  // arrivals), [1] the rope/P block, [2] the other V half (both WGs: 256); multicast: one per warp and CTA
  uint64_t empty[2][3];
  uint64_t q_full, q_empty;
  uint64_t raw[2];  // kLoad 4 / 5: a buffer's raw nvfp4 / fp8 bytes (1 arrival + 20736 / 36864 bytes)
  uint64_t stage;   // nvfp4 staging slot (kVar bit 8): 1 arrival + kSsStageBytes
};
static_assert(sizeof(SsBars) <= 32 * 8, "SsBars fits its 256 bytes");

__device__ __forceinline__ void MbarInit(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddr(b)) : "memory");
}
// Gives back a TMA-filled buffer that this thread read with ordinary (generic-proxy) loads. The refill is an async-proxy
// write, so a proxy fence in every reading thread orders the loads first: without it ptxas issued the arrival with loads
// still in flight, and about one mla_mid_q8s run in 80 read a refilled slot (H200, session 17, benchmarks/NOTES.md;
// scripts/sass_arrive_check.py keeps the rule). kWarp: the warp arrives once (lane 0, or every lane where `each`)
// after all its lanes fenced. Buffers read only by wgmma need no fence (same proxy, retired by wgmma.wait_group).
template <bool kWarp = false>
__device__ __forceinline__ void ReleaseAfterLoads(uint64_t* b, bool each = false) {
  FenceProxyAsync();
  if constexpr (kWarp) {
    __syncwarp();
    if (each || (threadIdx.x & 31) == 0) MbarArrive(b);
  } else {
    MbarArrive(b);
  }
}

// Row maxima (raw logits) of a 64-token S tile starting at token tile0, in the m64n64 accumulator layout (sc[nt][0..1]:
// row g, sc[nt][2..3]: row g + 8, tokens tile0 + nt * 8 + 2 (lane & 3) + {0, 1}), masking sc in place to -inf past each
// row's bound (bnd0 / bnd1) where the tile crosses one; a warp whose rows all hold the whole tile skips the compares.
// Quad-reduced. (The 16-bit seesaw's softmax and mla_mid_q8s's.)
__device__ __forceinline__ void MaskedRowMax(float (&sc)[8][4], int tile0, int lane, int bnd0, int bnd1, float& mx0,
                                             float& mx1) {
  const int tok0 = tile0 + (lane & 3) * 2;
  mx0 = -INFINITY, mx1 = -INFINITY;
  if (__all_sync(0xffffffffu, tile0 + kTokTile <= min(bnd0, bnd1))) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(sc[nt][0], sc[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(sc[nt][2], sc[nt][3]));
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = tok0 + nt * 8 + e;
        sc[nt][e] = t < bnd0 ? sc[nt][e] : -INFINITY;
        sc[nt][2 + e] = t < bnd1 ? sc[nt][2 + e] : -INFINITY;
        mx0 = fmaxf(mx0, sc[nt][e]);
        mx1 = fmaxf(mx1, sc[nt][2 + e]);
      }
    }
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
  }
}

// A consumer warpgroup's index, run-time or compile-time (see the seesaw's consumer lambda).
__device__ __forceinline__ int WgIndex(int w) { return w; }
template <int N>
__device__ __forceinline__ constexpr int WgIndex(std::integral_constant<int, N>) { return N; }

// Four 8 x 8 16-bit matrices from registers to shared memory (lane l: the address of row l & 7 of matrix l >> 3; register
// i holds this thread's two values of matrix i, the mma accumulator's fragment order).
__device__ __forceinline__ void StMatrixX4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1), "r"(r2),
               "r"(r3) : "memory");
}
// Cluster helpers (kLoad 3). The non-aligned barrier.cluster forms: producer lanes reach them apart.
__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrive on the mbarrier at b's offset in CTA `cta` of the cluster, with the default (release, CTA-scope)
// semantics, as CUTLASS's cluster pipelines do: the arriving warp's wgmma reads of the buffer have completed.
// A release at cluster scope costs a cluster-wide fence per arrival: measured 1.6x slower kernels on the H200.
__device__ __forceinline__ void MbarArriveRemote(uint64_t* b, uint32_t cta) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(SmemAddr(b)), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(r) : "memory");
}
// Whether the phase of b with this parity has completed (never blocks).
__device__ __forceinline__ bool MbarTest(uint64_t* b, int parity) {
  uint32_t done;
  asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done) : "r"(SmemAddr(b)), "r"(parity) : "memory");
  return done != 0;
}
__device__ __forceinline__ void MbarWait(uint64_t* b, int parity) {
  uint32_t done = 0;
  const uint32_t a = SmemAddr(b);
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(a), "r"(parity) : "memory");
}
// Arrives on b when all of this thread's earlier cp.async copies have landed (count set at init).
__device__ __forceinline__ void CpAsyncMbarArrive(uint64_t* b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(SmemAddr(b)) : "memory");
}
__device__ __forceinline__ void NamedBarSync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
// Warp-group-wide vote (bar.red.or over the n threads of named barrier id): true in every thread where any passed v.
__device__ __forceinline__ bool BarRedOr(int id, int n, bool v) {
  uint32_t r;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, %2, %3, q;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(r) : "r"((uint32_t)v), "r"(id), "r"(n) : "memory");
  return r != 0;
}
__device__ __forceinline__ void NamedBarArrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
// Non-aligned named barrier: lanes of one warp may reach it at different points (the TMA producer's
// thread 0 issues copies while its warp's other lanes run ahead; bar.sync requires a converged warp).
__device__ __forceinline__ void NamedBarSyncDiv(int id, int n) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddr(b)), "r"(bytes) : "memory");
}
// Brings a tensor map (a __grid_constant__ kernel parameter) into the TMA unit's cache ahead of its first copy.
__device__ __forceinline__ void PrefetchTensorMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// One 2-D TMA tensor copy (box of the map) to shared memory, completing `bytes` on bar.
template <bool kEvictFirst>
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar, uint64_t pol) {
  const uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (kEvictFirst)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(SmemAddr(dst)), "l"(m), "r"(x), "r"(y), "r"(SmemAddr(bar)), "l"(pol) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(SmemAddr(dst)), "l"(m), "r"(x), "r"(y), "r"(SmemAddr(bar)) : "memory");
}

// The same, multicast to the CTAs of `mask` (same shared-memory offsets; each CTA's mbarrier at bar's offset
// gets the bytes that land in it).
__device__ __forceinline__ void TmaLoad2dMc(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar, uint16_t mask,
                                            uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5, %6;\n"
      ::"r"(SmemAddr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(SmemAddr(bar)), "h"(mask), "l"(pol)
      : "memory");
}

// Tensor maps of the KV pool for the TMA loads: c_lat as [N*P rows, 512] and k_rope as [N*P rows, 64],
// box 64 x 64, 128-byte swizzle. A kernel parameter (__grid_constant__), encoded on the host per call.
struct SsMaps {
  CUtensorMap lat, rope;
};
// Block c (0-7: latent columns 64c..64c+63, 8: the rope block) of the 64-token tile at pool row y into its place in
// buffer dst, completing on bar, which this thread arms with the block's bytes first. kMcast: over the 1 x 2 cluster,
// this CTA (rank peer ^ 1) issues every other block to both CTAs; the peer's copy of the others lands on the same barrier.
template <bool kEvictFirst, bool kMcast = false>
__device__ __forceinline__ void TmaKvBlock(uint16_t* dst, const SsMaps& maps, int c, int y, uint64_t* bar, uint64_t pol,
                                           uint32_t peer = 0u) {
  MbarArriveExpectTx(bar, kBlockBytes);
  const CUtensorMap* map = c < 8 ? &maps.lat : &maps.rope;
  const int x = c < 8 ? c * 64 : 0;
  if constexpr (kMcast) {
    if ((uint32_t)(c & 1) != peer) TmaLoad2dMc(dst + c * (kBlockBytes / 2), map, x, y, bar, 3, pol);
  } else {
    TmaLoad2d<kEvictFirst>(dst + c * (kBlockBytes / 2), map, x, y, bar, pol);
  }
}
// Tensor maps of an nvfp4 pool (TMA loads, P % 64 == 0; mla_small_q4 and the seesaw kernel's decoding producer):
// latent codes [N*P rows, 256 B], box 128 B x 64, 128-byte swizzle; rope codes and latent scales [N*P rows, 32 B],
// box 32 B x 64, no swizzle. The rope scales (4 B per row: no tensor map, a row stride must be a multiple of 16 B)
// come by a 256-byte bulk copy.
struct Q4Maps {
  CUtensorMap lat, rope, lsf;
  CUtensorMap lat64;  // the latent codes again, box 64 B x 64, 64-byte swizzle (the seesaw's staging slot, kVar bit 8)
};
// Tensor maps of an fp8 pool (TMA loads, P % 64 == 0; mla_small_q8, mla_mid_q8(s) and the seesaw kernel's decoding
// producer): latent [N*P rows, 512 B], box 128 B x 64, 128-byte swizzle; rope [N*P rows, 64 B], box 64 B x 64, 64-byte
// swizzle. A kernel parameter, encoded per call.
struct Q8Maps {
  CUtensorMap lat, rope;
};
// Byte offset of 16-byte unit u (0..35: 32 latent, 4 rope) of row `row` in a K-major tile of kRows rows:
// latent in 4 blocks of [kRows x 128 B] with the 128-byte swizzle (wgmma layout 1, TMA SWIZZLE_128B), rope
// in one block of [kRows x 64 B] with the 64-byte swizzle (layout 2, SWIZZLE_64B).
template <int kRows>
__device__ __forceinline__ int Q8Off(int row, int u) {
  return u < 32 ? (u >> 3) * (kRows * 128) + row * 128 + (((u & 7) ^ (row & 7)) << 4)
                : 4 * (kRows * 128) + row * 64 + ((((u - 32) & 3) ^ ((row >> 1) & 3)) << 4);
}
template <int kLoad>
using SsMapsT = std::conditional_t<kLoad == 4 || kLoad == 6, Q4Maps, std::conditional_t<kLoad == 5, Q8Maps, SsMaps>>;

// One 1-D bulk copy global -> shared (16-byte multiples, 16-byte aligned), completing its bytes on bar.
__device__ __forceinline__ void BulkLoad(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(SmemAddr(dst)), "l"(src), "r"(bytes), "r"(SmemAddr(bar)) : "memory");
}

// Four E2M1 codes (low 16 bits of w; code i in nibble i) -> two f16x2 words, exact. E2M1 magnitudes as f16
// have a zero low byte, so one byte permute looks the four high bytes up (prmt, 3-bit magnitude as selector);
// a second permute with the whole nibble as selector (bit 3 = "replicate the byte's sign" mode) on 0x80
// bytes gives 0xFF for negative codes, 0x80 otherwise, i.e. the sign bit after a shift.
__device__ __forceinline__ void E2m1x4ToF16(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t mag = Prmt(0x3E3C3800u, 0x46444240u, w & 0x7777u);
  const uint32_t neg = Prmt(0x80808080u, 0x80808080u, w & 0xFFFFu);
  const uint32_t h4 = mag | ((neg << 1) & 0x80808080u);
  lo = Prmt(h4, 0u, 0x1404u);
  hi = Prmt(h4, 0u, 0x3424u);
}
// The same in the kernel's 16-bit type: bf16 magnitudes (0, 0.5, 1, 1.5 | 2, 3, 4, 6) need their low bytes too
// (00 00 80 C0 | 00 40 80 C0), a second lookup with the same selector.
template <bool kBf16>
__device__ __forceinline__ void E2m1x4To16(uint32_t w, uint32_t& lo, uint32_t& hi) {
  if constexpr (!kBf16) {
    E2m1x4ToF16(w, lo, hi);
  } else {
    const uint32_t sel = w & 0x7777u;
    const uint32_t mag = Prmt(0x3F3F3F00u, 0x40404040u, sel), low = Prmt(0xC0800000u, 0xC0804000u, sel);
    const uint32_t neg = Prmt(0x80808080u, 0x80808080u, w & 0xFFFFu);
    const uint32_t h4 = mag | ((neg << 1) & 0x80808080u);
    lo = Prmt(low, h4, 0x5140u);
    hi = Prmt(low, h4, 0x7362u);
  }
}
// Two 16-bit values times one pair, exact here (e2m1 * E4M3 scale: <= 6 significant bits in [2^-10, 2688]); f16
// without .ftz (subnormals kept).
template <bool kBf16>
__device__ __forceinline__ uint32_t Mul16x2(uint32_t a, uint32_t b) {
  if constexpr (!kBf16) return MulF16x2(a, b);
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// nvfp4 pages in the seesaw kernel (kLoad 4, P % 64 == 0): a tile's raw bytes (20736 B: Q4Maps' boxes and the rope
// scales' bulk copy) land in the tail of its own 72 KB buffer and the producer warpgroup decodes them in place into
// the 16-bit tile the consumers read, block by block in S order (0..8). Blocks 0-5 lie below the raw bytes; block
// 6 covers the scales and rope codes (every thread holds its own in registers before it is written), block 7 the
// latent codes of blocks 0-3, block 8 those of blocks 4-7 (a producer barrier before each of 6 and 8).
constexpr int kNv4RawBytes = kTokTile * 324;
constexpr int kNv4LsfOff = 52992, kNv4RopeOff = kNv4LsfOff + 2048, kNv4RsfOff = kNv4RopeOff + 2048;
constexpr int kNv4LatOff = kNv4RsfOff + 256;  // two 8 KB boxes: latent blocks 0-3, 4-7 (128-byte swizzle)
static_assert(kNv4LatOff == 7 * kBlockBytes && kNv4LatOff + 2 * kBlockBytes == 9 * kBlockBytes,
              "the latent codes fill blocks 7 and 8, 1024-aligned");
static_assert(kNv4LsfOff >= 6 * kBlockBytes && kNv4LsfOff % 128 == 0 && kNv4RopeOff % 128 == 0 && kNv4RsfOff % 128 == 0,
              "blocks 0-5 lie below the raw bytes; TMA destinations 128-byte aligned");
static_assert(kNv4LatOff + 2 * kBlockBytes - kNv4LsfOff == kNv4RawBytes, "raw tile layout");

// The raw bytes of the 64-row nvfp4 tile at pool row y (P % 64 == 0) by TMA, all completing on bar (the caller
// expects kNv4RawBytes): the two latent-code boxes (lat, lat + 8 KB), the rope codes, the latent scales and the rope
// scales' bulk copy (mla_small_q4's ring slots and the seesaw's buffer tails).
__device__ __forceinline__ void Nv4TmaTile(unsigned char* lat, unsigned char* rope, unsigned char* lsf, unsigned char* rsf,
                                           const Q4Maps& maps, const QParams& qp, int y, uint64_t* bar) {
  TmaLoad2d<false>(lat, &maps.lat, 0, y, bar, 0);
  TmaLoad2d<false>(lat + kTokTile * 128, &maps.lat, 128, y, bar, 0);
  TmaLoad2d<false>(rope, &maps.rope, 0, y, bar, 0);
  TmaLoad2d<false>(lsf, &maps.lsf, 0, y, bar, 0);
  BulkLoad(rsf, qp.rope_sf + (size_t)y * (kDr / 16), kTokTile * 4, bar);
}

// L2 prefetch of one box of a tensor map (no shared memory, no barrier).
__device__ __forceinline__ void PrefetchBoxL2(const CUtensorMap* map, int x, int y) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y) : "memory");
}

// L2 prefetch of the raw bytes Nv4TmaTile would copy for pool row y.
__device__ __forceinline__ void Nv4PrefetchTile(const Q4Maps& maps, const QParams& qp, int y) {
  PrefetchBoxL2(&maps.lat, 0, y);
  PrefetchBoxL2(&maps.lat, 128, y);
  PrefetchBoxL2(&maps.rope, 0, y);
  PrefetchBoxL2(&maps.lsf, 0, y);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n"
               ::"l"(qp.rope_sf + (size_t)y * (kDr / 16)), "r"(kTokTile * 4) : "memory");
}

// L2 prefetch of the E4M3 codes Fp8TmaTile would copy for pool row y.
__device__ __forceinline__ void Fp8PrefetchTile(const Q8Maps& maps, int y) {
#pragma unroll
  for (int i = 0; i < 4; ++i) PrefetchBoxL2(&maps.lat, 128 * i, y);
  PrefetchBoxL2(&maps.rope, 0, y);
}

// The E4M3 scales of this thread's groups of token t (4c + 2h, 4c + 2h + 1 of the token's 32: block c's two in half
// c & 1 of v[c >> 1]), from a tile's latent-scale table lsf ([64 tokens][32 B]).
struct Nv4Scales {
  uint32_t v[4];
};
__device__ __forceinline__ Nv4Scales Nv4ThreadScales(const unsigned char* lsf, int t, int h) {
  const uint4 sfa = *reinterpret_cast<const uint4*>(lsf + t * 32);
  const uint4 sfb = *reinterpret_cast<const uint4*>(lsf + t * 32 + 16);
  const uint32_t hs = h ? 0x7632u : 0x5410u;
  return {{Prmt(sfa.x, sfa.y, hs), Prmt(sfa.z, sfa.w, hs), Prmt(sfb.x, sfb.y, hs), Prmt(sfb.z, sfb.w, hs)}};
}

// One 64-dim block of token t, dims 32 h .. 32 h + 31 (two 16-value scale groups: raw holds their 32 codes, s2's low 16
// bits their two E4M3 scales), decoded and written as four 16-byte chunks (TileOff layout) of the 16-bit tile d; zeros
// where !valid (divergent only in a sequence's last tile).
template <bool kBf16>
__device__ __forceinline__ void Nv4DecodeBlock(uint16_t* d, int t, int h, bool valid, int c, const uint4& raw, uint32_t s2) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"((unsigned short)(s2 & 0xFFFFu)));
  uint32_t sA, sB;
  if constexpr (kBf16) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
    sA = Pack2<true>(f.x, f.x);  // every E4M3 value is a bf16 value
    sB = Pack2<true>(f.y, f.y);
  } else {
    sA = Prmt(h2, 0u, 0x1010u);
    sB = Prmt(h2, 0u, 0x3232u);
  }
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if (!valid) {
#pragma unroll
    for (int k = 0; k < 4; ++k) StShared16(d + TileOff(t, 8 * c + 4 * h + k), 0u, 0u, 0u, 0u);
    return;
  }
  uint32_t o[4][4];  // all four words decoded before the stores: independent chains for the scheduler
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    E2m1x4To16<kBf16>(w[k], o[k][0], o[k][1]);
    E2m1x4To16<kBf16>(w[k] >> 16, o[k][2], o[k][3]);
#pragma unroll
    for (int i = 0; i < 4; ++i) o[k][i] = Mul16x2<kBf16>(o[k][i], k < 2 ? sA : sB);
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) StShared16(d + TileOff(t, 8 * c + 4 * h + k), o[k][0], o[k][1], o[k][2], o[k][3]);
}

// This thread's part of the decode: token t of the tile (zeros where !valid: past the sequence's bound the page may
// hold anything, NaN scales included), dims 32 h .. 32 h + 31 of every 64-dim block (two 16-value scale groups),
// written as four 16-byte chunks per block (TileOff layout; 8 consecutive tokens hit 8 bank groups, as do the
// swizzled code loads). Arrives on full[c] once block c is written.
template <bool kBf16>
__device__ __forceinline__ void Nv4DecodeTile(unsigned char* buf, uint64_t* full, int t, int h, bool valid) {
  uint16_t* d = reinterpret_cast<uint16_t*>(buf);
  // The scales (with the rope codes and their two scales, read after block 5) are read before block 6 overwrites them.
  const Nv4Scales sf = Nv4ThreadScales(buf + kNv4LsfOff, t, h);
  auto block = [&](int c, const uint4& raw, uint32_t s2) { Nv4DecodeBlock<kBf16>(d, t, h, valid, c, raw, s2); };
  auto codes = [&](int c) {  // latent codes of block c: 16 bytes of the token's row in its box (128-byte swizzle)
    const int unit = (c & 3) * 2 + h;
    return *reinterpret_cast<const uint4*>(buf + kNv4LatOff + (c >> 2) * kBlockBytes + t * 128 + ((unit ^ (t & 7)) << 4));
  };
  // Each block's code load is consumed before its arrival; the scale loads above and the rope loads are waited for
  // by a proxy fence after blocks 0 and 6, so no arrival leaves a shared-memory load in flight
  // (scripts/sass_arrive_check.py). Formally only the last arrival needs one: the buffer returns to the TMA after the
  // consumers saw full[8].
  uint4 rope;
  uint32_t rsf;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    if (c == 6) {
      rope = *reinterpret_cast<const uint4*>(buf + kNv4RopeOff + t * 32 + h * 16);
      rsf = *reinterpret_cast<const uint16_t*>(buf + kNv4RsfOff + t * 4 + h * 2);
      NamedBarSync(4, 128);  // every thread's scale / rope reads (block 6's bytes), block 0-3 code reads (7's)
    }
    block(c, codes(c), sf.v[c >> 1] >> (16 * (c & 1)));
    if (c == 0 || c == 6) FenceProxyAsync();
    MbarArrive(&full[c]);
  }
  NamedBarSync(4, 128);  // block 4-7 code reads (block 8's bytes) done
  block(8, rope, rsf);
  // The buffer goes back to the TMA producer after the consumers are done with it: this thread's generic reads and
  // writes of it come first (proxy fence; benchmarks/NOTES.md, session 17).
  FenceProxyAsync();
  MbarArrive(&full[8]);
}

// The staged form of the nvfp4 tile (mla_seesaw kVar bit 8). The staging slot holds tile k's latent scales and the codes
// of blocks 0-1, loaded while tile k-1 decodes (it does not wait for tile k's buffer); the buffer's tail holds the rest,
// all inside blocks 7-8, loaded once the buffer is back: blocks 2-5's codes (128-byte box at x = 64 B, 128-byte
// swizzle), blocks 6-7's (64-byte box at x = 192 B), the rope codes and the rope scales. So blocks 0-1 decode while the
// tail is in flight, and no block before 7 overwrites a raw byte.
constexpr int kNv4sC25Off = 7 * kBlockBytes, kNv4sC67Off = 8 * kBlockBytes;
constexpr int kNv4sRopeOff = kNv4sC67Off + 4096, kNv4sRsfOff = kNv4sRopeOff + 2048;
constexpr int kNv4sTailBytes = 8192 + 4096 + 2048 + 256;
static_assert(kNv4sRsfOff + 256 <= kSsTileBytes && kNv4sC67Off % 512 == 0 && kNv4sRopeOff % 128 == 0,
              "the staged tail lies in blocks 7-8");
// Thread 0: the staging slot's copies for pool row y (the caller's barrier expects kSsStageBytes).
__device__ __forceinline__ void Nv4TmaStage(unsigned char* stage, const Q4Maps& maps, int y, uint64_t* bar) {
  TmaLoad2d<false>(stage, &maps.lat64, 0, y, bar, 0);
  TmaLoad2d<false>(stage + 4096, &maps.lsf, 0, y, bar, 0);
}
// Thread 0: the tail's copies for pool row y into buffer buf (the caller's barrier expects kNv4sTailBytes).
__device__ __forceinline__ void Nv4TmaTail(unsigned char* buf, const Q4Maps& maps, const QParams& qp, int y, uint64_t* bar) {
  TmaLoad2d<false>(buf + kNv4sC25Off, &maps.lat, 64, y, bar, 0);
  TmaLoad2d<false>(buf + kNv4sC67Off, &maps.lat64, 192, y, bar, 0);
  TmaLoad2d<false>(buf + kNv4sRopeOff, &maps.rope, 0, y, bar, 0);
  BulkLoad(buf + kNv4sRsfOff, qp.rope_sf + (size_t)y * (kDr / 16), kTokTile * 4, bar);
}
// Nv4DecodeTile on the staged layout: blocks 0-1 from the slot, then mid() (the slot goes back, the tail is waited
// for), blocks 2-8 from the tail. Same thread split, writes and full[c] arrivals as Nv4DecodeTile.
template <bool kBf16, typename Mid>
__device__ __forceinline__ void Nv4DecodeTileS(unsigned char* buf, const unsigned char* stage, uint64_t* full, int t, int h,
                                               bool valid, Mid&& mid) {
  uint16_t* d = reinterpret_cast<uint16_t*>(buf);
  const Nv4Scales sf = Nv4ThreadScales(stage + 4096, t, h);
  auto block = [&](int c, const uint4& raw, uint32_t s2) { Nv4DecodeBlock<kBf16>(d, t, h, valid, c, raw, s2); };
  auto codes = [&](int c) {  // 16 bytes: unit 2 (c & 1) + h of the token's row in its box
    const int u = 2 * (c & 1) + h;
    const unsigned char* a64 = c < 2 ? stage : buf + kNv4sC67Off;  // 64-byte swizzle
    if (c >= 2 && c < 6)
      return *reinterpret_cast<const uint4*>(buf + kNv4sC25Off + t * 128 + (((2 * (c - 2) + h) ^ (t & 7)) << 4));
    return *reinterpret_cast<const uint4*>(a64 + t * 64 + ((u ^ ((t >> 1) & 3)) << 4));
  };
  uint4 rope;
  uint32_t rsf;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    if (c == 2) mid();  // this thread's slot reads are done (block 1 consumed them); the tail has landed after it
    if (c == 7) {
      rope = *reinterpret_cast<const uint4*>(buf + kNv4sRopeOff + t * 32 + h * 16);
      rsf = *reinterpret_cast<const uint16_t*>(buf + kNv4sRsfOff + t * 4 + h * 2);
      NamedBarSync(4, 128);  // every thread's block 2-5 code reads (block 7's bytes)
    }
    block(c, codes(c), sf.v[c >> 1] >> (16 * (c & 1)));
    if (c == 0 || c == 7) FenceProxyAsync();  // (the scale / rope loads: no arrival with a load in flight)
    MbarArrive(&full[c]);
  }
  NamedBarSync(4, 128);  // block 6-7 code and rope reads (block 8's bytes) done
  block(8, rope, rsf);
  FenceProxyAsync();
  MbarArrive(&full[8]);
}

// fp8 pages in the seesaw kernel (kLoad 5, P % 64 == 0): a tile's E4M3 codes (36864 B: Q8Maps' four latent boxes and
// the rope box, Q8Off<64> layout) land in the second half of its own 72 KB buffer and the producer warpgroup converts
// them in place into the f16 tile the consumers read (cvt.rn.f16x2.e4m3x2, exact; the per-tensor scale is folded into
// the logits and the output, as kLoad 4's global scale), block by block in S order (0..8). The consumers' math is f16
// for either activation dtype: with bf16 activations the producer rewrites Q as f16 with a power-of-two row scale
// (SsQToF16). Block c's f16 bytes [8 KB c, 8 KB (c + 1)) overlap raw codes from block 4 on (box i at 36 KB + 8 KB i
// holds blocks 2i and 2i + 1; the rope box at 68 KB): Fp8DecodeTile reads blocks 4-5, 6-7 and 8 ahead of a producer
// barrier before writing them.
constexpr int kFp8RawOff = kSsTileBytes / 2, kFp8RawBytes = kTokTile * 576;
static_assert(kFp8RawOff + kFp8RawBytes == kSsTileBytes && kFp8RawOff % 1024 == 0, "fp8 raw tile: the buffer's second half");

// The E4M3 codes of the 64-row tile at pool row y by TMA into raw (the buffer + kFp8RawOff), completing on bar (the
// caller expects kFp8RawBytes).
__device__ __forceinline__ void Fp8TmaTile(unsigned char* raw, const Q8Maps& maps, int y, uint64_t* bar) {
#pragma unroll
  for (int i = 0; i < 4; ++i) TmaLoad2d<false>(raw + i * (kTokTile * 128), &maps.lat, 128 * i, y, bar, 0);
  TmaLoad2d<false>(raw + 4 * (kTokTile * 128), &maps.rope, 0, y, bar, 0);
}

// This thread's part of the fp8 decode: token t, dims 32 h .. 32 h + 31 of every 64-dim block (zeros where !valid),
// written as four 16-byte f16 chunks per block (TileOff layout, as Nv4DecodeTile). Arrives on full[c] once block c
// is written.
__device__ __forceinline__ void Fp8DecodeTile(unsigned char* buf, uint64_t* full, int t, int h, bool valid) {
  uint16_t* d = reinterpret_cast<uint16_t*>(buf);
  const unsigned char* raw = buf + kFp8RawOff;
  // 16-byte unit i (0, 1) of this thread's 32 codes of block c: Q8Off<64>(t, u) with u = 8 (c >> 1) + 4 (c & 1) + 2 h + i
  // (latent) or 32 + 2 h + i (rope), written as four per-thread offsets so that ptxas keeps no per-block address
  // live (it spilled 18 of them): block c's latent unit differs from block c & ~1's only in the swizzle's bit 6.
  const int l0 = t * 128 + (((2 * h) ^ (t & 7)) << 4), l1 = t * 128 + (((2 * h + 1) ^ (t & 7)) << 4);
  const int r0 = 4 * kBlockBytes + t * 64 + (((2 * h) ^ ((t >> 1) & 3)) << 4);
  const int r1 = 4 * kBlockBytes + t * 64 + (((2 * h + 1) ^ ((t >> 1) & 3)) << 4);
  auto codes = [&](int c, int i) {
    const int off = c < 8 ? (c >> 1) * kBlockBytes + ((i ? l1 : l0) ^ ((c & 1) << 6)) : i ? r1 : r0;
    return *reinterpret_cast<const uint4*>(raw + off);
  };
  struct Raw { uint4 a, b; };
  auto load = [&](int c) { return Raw{codes(c, 0), codes(c, 1)}; };
  auto store = [&](int c, const Raw& r) {
    if (!valid) {  // past the sequence's bound the page may hold anything (NaN codes included)
#pragma unroll
      for (int k = 0; k < 4; ++k) StShared16(d + TileOff(t, 8 * c + 4 * h + k), 0u, 0u, 0u, 0u);
    } else {
      const uint32_t w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
      for (int k = 0; k < 4; ++k)  // chunk k: codes 8 k .. 8 k + 7 = words 2 k, 2 k + 1
        StShared16(d + TileOff(t, 8 * c + 4 * h + k), Fp8x2ToT<false>(w[2 * k]), Fp8x2ToT<false>(w[2 * k] >> 16),
                   Fp8x2ToT<false>(w[2 * k + 1]), Fp8x2ToT<false>(w[2 * k + 1] >> 16));
    }
  };
  // Each arrival follows a proxy fence where a shared-memory load may still be in flight behind it (the raw blocks
  // read ahead of a barrier), so no arrival leaves one (scripts/sass_arrive_check.py); the last one also orders this
  // thread's generic reads and writes of the buffer before its return to the TMA (NOTES, session 17).
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    store(c, load(c));
    MbarArrive(&full[c]);
  }
#pragma unroll
  for (int c = 4; c < 8; c += 2) {
    const Raw r0 = load(c), r1 = load(c + 1);
    NamedBarSync(4, 128);  // every thread's reads of the raw blocks that blocks c, c + 1 overwrite are done
    store(c, r0);
    FenceProxyAsync();
    MbarArrive(&full[c]);
    store(c + 1, r1);
    MbarArrive(&full[c + 1]);
  }
  const Raw r8 = load(8);
  NamedBarSync(4, 128);
  store(8, r8);
  FenceProxyAsync();
  MbarArrive(&full[8]);
}

// One 16-bit element of the kernel's query type (low 16 bits of h) as float.
template <bool kBf16>
__device__ __forceinline__ float SmQVal(uint32_t h) {
  if constexpr (kBf16) return __uint_as_float((h & 0xFFFFu) << 16);
  else return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu)));
}

// The power-of-two scale 2^k that puts a Q row's max amax in [2^14, 2^15) (1 for an all-zero row): exact in f16 for
// every element above 2^-24 of the max. Returns 2^k; *qs = 2^-k (the row's logit factor) where `write`. Shared by the
// f16 Q rewrites of the small-G*H kernels (SmQRowScale) and of the seesaw kernel (SsQToF16).
__device__ __forceinline__ float Pow2RowScale(float amax, float* qs, bool write) {
  int e = 0;
  if (amax > 0.f) frexpf(amax, &e);  // amax = m 2^e, m in [0.5, 1)
  const int k = amax > 0.f ? min(15 - e, 120) : 0;
  if (write) *qs = ldexpf(1.f, -k);
  return ldexpf(1.f, k);
}

// The 16-bit Q tile (TileOff layout, bf16) -> f16 in place with a power-of-two row scale (Pow2RowScale), qs[r] = 2^-k;
// this thread: row r, chunks hh + 2 i (the ones it loaded), its partner hh ^ 1 in the neighbouring lane. Exact but for
// Q values more than 2^28 below their row's max (f16 subnormals).
__device__ __forceinline__ void SsQToF16(uint16_t* sQ, float* qs, int r, int hh) {
  float amax = 0.f;
#pragma unroll 4
  for (int i = 0; i < kChunks / 2; ++i) {
    const uint4 v = *reinterpret_cast<const uint4*>(sQ + TileOff(r, hh + 2 * i));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      amax = fmaxf(amax, fmaxf(fabsf(SmQVal<true>(w[k])), fabsf(SmQVal<true>(w[k] >> 16))));
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  const float sc = Pow2RowScale(amax, qs + r, hh == 0);
#pragma unroll 4
  for (int i = 0; i < kChunks / 2; ++i) {
    uint16_t* ptr = sQ + TileOff(r, hh + 2 * i);
    const uint4 v = *reinterpret_cast<const uint4*>(ptr);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = Pack2<false>(SmQVal<true>(w[k]) * sc, SmQVal<true>(w[k] >> 16) * sc);
    StShared16(ptr, o[0], o[1], o[2], o[3]);
  }
}

template <bool kBf16>
__device__ __forceinline__ void WgmmaS64(float (&d)[8][4], uint64_t da, uint64_t db) {
  if constexpr (kBf16) Wgmma_m64n64_bf16<0>(d, da, db); else Wgmma_m64n64_f16<0>(d, da, db);
}
template <bool kBf16>
__device__ __forceinline__ void WgmmaPVrs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (kBf16) Wgmma_m64n256_bf16_rs<1>(d, a, db); else Wgmma_m64n256_f16_rs<1>(d, a, db);
}

// Producer copy pattern shared with mla_decode_small.cuh: 8 threads per 128-byte block row (whole lines
// per warp instruction), thread (tg = pt / 8, cq = pt % 8) serving tokens tg + 16 i of a 64-token tile.
// Page ids of the tile starting at token t0 (read one tile ahead: an L2 round trip per tile otherwise).
__device__ __forceinline__ void TilePages(const Params& p, int b, int t0, int len, int tg, int (&pg)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = t0 + tg + 16 * i;
    pg[i] = t < len ? __ldg(p.page_table + (long long)b * p.npp + t / p.P) : 0;
  }
}
// Pool rows of those tokens (N * P < 2^31, checked on the host); ~0u = past the bound (zero-filled).
__device__ __forceinline__ void TileRows(const Params& p, int t0, int len, int tg, const int (&pg)[4],
                                         uint32_t (&row)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = t0 + tg + 16 * i;
    row[i] = t < len ? (uint32_t)min(max(pg[i], 0), p.N - 1) * (uint32_t)p.P + (uint32_t)(t % p.P) : ~0u;
  }
}
// This thread's chunk cq of 64-column block c for its 4 tokens, into the KV tile dst (TileOff layout).
__device__ __forceinline__ void CopyKvBlock(uint16_t* dst, const Params& p, const uint32_t (&row)[4], int tg, int cq,
                                            int c) {
  const int ch = c * 8 + cq;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bool valid = row[i] != ~0u;
    CpAsync16(dst + TileOff(tg + 16 * i, ch), KvChunk(p, valid ? row[i] : 0, ch), valid);
  }
}

// Part q (0..2) of a tile's refill in the owner's S order (owner's V half, rope/P block, the other WG's
// half): waits until the buffer's previous tile (owned by WG pown) no longer needs those columns (kMc: in
// both CTAs of the cluster) and returns its 64-column blocks [c0, c1). The columns' role in the previous
// tile decides the barrier: where a segment boundary flips the owner, the new owner's half was the old
// tile's non-owner half.
__device__ __forceinline__ int2 RefillPart(SsBars* bars, int buf, int u, int own, int pown, int q) {
  const int part = q == 0 ? own : q == 1 ? 2 : 1 - own;
  const int role = part == 2 ? 1 : part == pown ? 0 : 2;
  if (u >= 1) MbarWait(&bars->empty[buf][role], (u - 1) & 1);
  return make_int2(part * 4, part == 2 ? 9 : part * 4 + 4);
}

// kVar (timing probes of the standalone driver only; not correct kernels): bit 0 drops the consumer's
// proxy fence after each block's mbarrier wait; bit 1: consumers do no math (wait for each tile, release
// it): the load pipeline alone; bit 2: the producer copies nothing (arrives only): the math alone.
// kLoad 4: nvfp4 pages (qp; P % 64 == 0), decoded by the producer warpgroup into the 16-bit tiles (Nv4DecodeTile):
// each buffer is refilled whole once all three roles released it, the consumers' S runs over blocks 0..8 in order,
// and the logits and the output take fl32(1 / global_scale) as mla_split_kv's.
template <bool kBf16, int kVar = 0, int kLoad = 0>
__global__ void __launch_bounds__(kSsThreads, 1) mla_seesaw(Params p, Sched s, const __grid_constant__ SsMapsT<kLoad> maps,
                                                             QParams qp) {
  PlanThisPart(p, s);  // first: waits for the inputs (PDL); ptxas spilled more with anything live across it
  SS_CTA_TRACE(0, threadIdx.x == 0);
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  unsigned char* kbuf = smem + kSsTileBytes;                      // two KV buffers
  float* sM = reinterpret_cast<float*>(smem + 3 * kSsTileBytes);  // [2 (tile parity)][64]
  float* sL = sM + 2 * 64;                                        // [2 (segment parity)][2 (WG)][64]
  SsBars* bars = reinterpret_cast<SsBars*>(sL + 2 * 2 * 64);
  float* sQs = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(bars) + 32 * 8);  // kLoad 5, bf16: [64] 2^-k_r

  // kDec: a decoding producer (kLoad 4 / 6: nvfp4, 5: fp8); kMB: the math in bf16. kLoad 5 and 6 run f16 math for
  // either activation dtype (bf16 Q rewritten as f16: kF16Q); kLoad 4 decodes nvfp4 into the activation dtype.
  constexpr bool kMc = kLoad == 3, kNv4 = kLoad == 4 || kLoad == 6, kFp8 = kLoad == 5, kDec = kNv4 || kFp8;
  constexpr bool kMB = kBf16 && kLoad != 5 && kLoad != 6, kF16Q = kBf16 && !kMB;
  // kVar bit 8 (nvfp4): the staging slot (Nv4DecodeTileS; benchmarks/NOTES.md, session 21): the next tile's scales and
  // blocks 0-1's codes load during this tile's decode; the buffer's tail only once the buffer is back.
  constexpr bool kStage = (kVar & 8) != 0;
  // kVar bit 16: the pair schedule (16-bit TMA tiles only; see pair_iter0 below).
  constexpr bool kPair = (kVar & 16) != 0;
  static_assert(!kPair || (!kDec && kLoad >= 1 && kLoad <= 3 && (kVar & 6) == 0), "the pair schedule: 16-bit TMA tiles");
  // kSelf (the pair schedule with evict-first TMA): the consumers issue every KV copy themselves, each buffer part the
  // moment the wgmma that read it last has retired (FlashMLA's way); the producer loads Q only.
  // kLoad 3 (attempt 72): multicast over the cluster's two row tiles; the consumers announce each release at the same
  // points (issue below) and producer warps 0-1 issue the copies once both CTAs have released (see the producer).
  constexpr bool kSelf = kPair && (kLoad == 2 || kLoad == 3);
  // kVar bits 32 / 64 (kLoad 3 under kPair; HELIX_MLA_DECODE_PAIR_MC): the left / right half is loaded by each CTA alone
  // (no multicast: its refill waits for this CTA's release only). kMcSide(sd): half sd is multicast.
  constexpr int kAloneSides = kPair && kLoad == 3 ? (kVar >> 5) & 3 : 0;
  auto kMcSide = [](int sd) { return ((kAloneSides >> sd) & 1) == 0; };
  // kVar bit 128 (the pair schedule's multicast kernel, opt-in, at 4 row tiles): one copy of the consumer code per
  // warpgroup (attempt 76, benchmarks/NOTES.md session 36: +0.3-1.7 % at 4 row tiles; the G=1 seesaw and 8 row tiles
  // 0.6-0.8 % slower, so not everywhere; kLoad 2's copies spill).
  constexpr bool kStaticW = (kVar & 128) != 0;
  // S_j's blocks issued before the other WG's PV_{j-1} (own_tile): 2 of its own V half in the 16-bit seesaws (attempt
  // 92, benchmarks/NOTES.md session 44: 4 -> 3 -> 2 each 0.2-0.4 % faster on every H >= 64 row, 1 level, 0 2-3 %
  // slower), the whole half (4) in the decoding ones. kSsLateArrive (attempt 93, 16-bit seesaws): the owner gives
  // tile j's rope/P block and the other V half back after issuing its PV_j, not inside the S -> softmax -> PV chain
  // (the non-owner's releases of both come later, after its PV_j, so no refill starts later; 0.2-0.3 %).
  constexpr int kSsSplitQ = kDec ? 4 : 2;
  constexpr bool kSsLateArrive = !kDec;
  static_assert(!kStaticW || (kPair && kLoad == 3), "one consumer copy per warpgroup: the multicast pair kernel");
  static_assert(!kStage || (kNv4 && (kVar & 4) == 0), "the staging slot: nvfp4 pages, no load-free probe");
  unsigned char* const stage = smem + kSsStageOff;  // (kStage only: the launch gives kSsSmemBytesStage)
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 9; ++c) MbarInit(&bars->full[b][c], kLoad && !kDec ? 1 : 128);
      if constexpr (kDec) MbarInit(&bars->raw[b], 1);
      if constexpr (kStage) MbarInit(&bars->stage, 1);
      // kSelf with multicast: empty[b][0 / 1] count "the readers of the left / right V half of buffer b are done" from
      // this CTA and from the peer (one arrival each per fill; see issue in the pair schedule; a CTA-local side, kMcSide
      // false: this CTA's only); nothing else uses them.
      for (int c = 0; c < 3; ++c)
        MbarInit(&bars->empty[b][c], (kSelf && kMc) ? (c < 2 && !kMcSide(c) ? 1 : 2)
                                     : c == 0 ? (kMc ? 8 : 128) : (kMc ? 16 : 256));
    }
    MbarInit(&bars->q_full, 128);
    MbarInit(&bars->q_empty, 256);
    if constexpr (kMc) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // kMc: the peer arrives on these barriers and its copies complete on them: initialised cluster-wide first.
  if constexpr (kMc) ClusterSync(); else __syncthreads();
  const uint32_t peer = kMc ? ClusterRank() ^ 1u : 0u;

  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);  // warp-uniform for ptxas (wgmma in branches)
  const int2 range = PartRange(p, s);  // written by PlanThisPart
  const int row0 = blockIdx.y * kRowsTile;

  if (wg == 2) {
    // ---------------- producer ----------------
    // Registers move to the consumers (ptxas allocates each region under its setmaxnreg budget):
    // 128 x 56 + 256 x 224 = 384 x 168, the registers the CTA is launched with (ptxas's count under
    // __launch_bounds__(384, 1)): a larger sum makes the consumers' increase wait forever. At 40 / 232 the TMA
    // producers spilled ~9 words per tile between a release and the refill's copies (4 % at H=128 G=1, session 37);
    // at 224 the consumers' wgmmas still compile unserialised (C7512 appears at 216).
    static_assert(128 * kSsProducerRegs + 256 * kSsConsumerRegs <= kSsThreads * ((65536 / kSsThreads) & ~7) &&
                      128 * kSsNv4ProducerRegs + 256 * kSsNv4ConsumerRegs <= kSsThreads * ((65536 / kSsThreads) & ~7),
                  "setmaxnreg budgets exceed the registers the CTA is launched with");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kDec ? kSsNv4ProducerRegs : kSsProducerRegs));
    const int pt = threadIdx.x - 256, hh = pt & 1;
    uint64_t pol = 0;
    if constexpr (kLoad >= 2) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    if constexpr (kLoad != 0) {
      if (pt == 0) {
        PrefetchTensorMap(&maps.lat);
        PrefetchTensorMap(&maps.rope);
        if constexpr (kNv4) PrefetchTensorMap(&maps.lsf);
      }
    }
    int k = 0, sc = 0, pown0 = 0, pown1 = 0;  // pown*: owner of the last tile loaded into buffer 0 / 1
    int sg = 0;  // kStage: tiles staged so far (the slot barrier's phase)
    for (int si = range.x; si < range.y; ++si) {
      const int4 seg = s.seg[SegRow(p) + si];
      const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
      if (n <= 0) continue;
      const int len = SeqLen(p.bounds, b, p.G, p.cap);
      if (sc >= 1) MbarWait(&bars->q_empty, (sc - 1) & 1);
      {
        const int r = pt >> 1, gr = row0 + r;
        const bool valid = gr < p.GH;
        const long long qrow = (long long)b * p.GH + gr;
#pragma unroll 4
        for (int i = 0; i < kChunks / 2; ++i) {
          if constexpr (kVar & 4) break;
          const int ch = hh + 2 * i;
          CpAsync16(sQ + TileOff(r, ch), valid ? QChunk(p, qrow, ch) : p.q_lat, valid);
        }
        if constexpr (kVar & 4) {
          MbarArrive(&bars->q_full);
        } else if constexpr (kF16Q) {  // this thread's own copies, then its chunks rewritten as f16
          CpAsyncWaitAll();
          SsQToF16(sQ, sQs, r, hh);
          FenceProxyAsync();  // f16 Q (generic stores) -> the consumers' wgmma
          MbarArrive(&bars->q_full);
        } else {
          CpAsyncMbarArrive(&bars->q_full);
        }
      }
      const int cq = pt & 7, tg = pt >> 3;
      if constexpr (kSelf) {  // the consumers load the KV tiles (kMc: they release them, and warps 0-1 load them)
        if constexpr (kMc) {
          // Attempt 72: attempt 71 had the consumers' issuing thread wait for the peer's release at each issue point,
          // which stalled its warpgroup for a cross-SM round trip (4.5 % slower than without multicast). Here a
          // consumer only announces the release (on this CTA's barrier and the peer's: count 2), and producer warp
          // `side` waits for both, arms this CTA's barriers and multicasts its share (every other block; the rope
          // block from rank 0). Warp 0 fills the left V half with the rope block, warp 1 the right half, each in the
          // consumers' order of releases (pair_iter0 / pair_iter1: left t + 2, t + 3; right t + 3, t + 2). A side that
          // kMcSide says is CTA-local (attempt 73; by default the left half with the rope block) waits for this CTA's
          // release only (count 1) and its warp loads the whole side into this CTA.
          const int side = pt >> 5;
          if (side < 2) {
            auto fill = [&](int j) {
              const int buf = (k + j) & 1, f = (k + j) >> 1;
              MbarWait(&bars->empty[buf][side], f & 1);
              if (pt % 32 == 0) {
                const int t0 = (blk0 + j) * kTokTile;
                const int y = PageOf(p, b, t0) * p.P + t0 % p.P;
                uint16_t* dst = reinterpret_cast<uint16_t*>(kbuf + buf * kSsTileBytes);
                const bool mc = kMcSide(side);
                auto block = [&](int c) {
                  if (mc) TmaKvBlock<true, true>(dst, maps, c, y, &bars->full[buf][c], pol, peer);
                  else TmaKvBlock<true>(dst, maps, c, y, &bars->full[buf][c], pol);
                };
                for (int c = side * 4; c < side * 4 + 4; ++c) block(c);
                if (side == 0) block(8);
              }
              __syncwarp();
            };
            fill(0);
            if (n >= 2) fill(1);
            for (int t = 0; t < n; t += 2) {
              if (side == 0) {
                if (t + 2 < n) fill(t + 2);
                if (t + 3 < n) fill(t + 3);
              } else if (t + 3 < n) {
                fill(t + 3);
                fill(t + 2);
              } else if (t + 2 < n) {
                fill(t + 2);
              }
            }
          }
          k += n;
        }
        ++sc;
        continue;
      }
      if constexpr (kDec) {
        // nvfp4 / fp8: thread 0 issues each raw tile into the tail of its buffer once all three roles released it (page id
        // read a tile ahead); all 128 threads decode it (a partial last tile too: rows past the bound, inside the same
        // valid page, decode to zeros). Issuing the next tile's raw bytes during this tile's decode needs the other
        // consumer to release the buffer's previous tile before the rest of this tile's S: measured slower (NOTES).
        auto page_of = [&](int t0) { return PageOf(p, b, t0); };
        int pg_next = pt == 0 ? page_of(blk0 * kTokTile) : 0;
        bool staged = false;  // thread 0, kStage: this tile's slot went out during the previous tile's decode
        for (int j = 0; j < n; ++j, ++k) {
          const int buf = k & 1, u = k >> 1, t0 = (blk0 + j) * kTokTile;
          unsigned char* dst = kbuf + buf * kSsTileBytes;
          if constexpr (kStage) {
            int y = 0, yn = 0;  // thread 0: this and the next tile's pool rows
            if (pt == 0) {  // the slot and the L2 prefetch do not wait for the buffer
              y = pg_next * p.P + t0 % p.P;
              if (!staged) {  // a segment's first tile
                MbarArriveExpectTx(&bars->stage, kSsStageBytes);
                Nv4TmaStage(stage, maps, y, &bars->stage);
              }
              staged = false;
              if (j + 1 < n) {
                pg_next = page_of(t0 + kTokTile);
                yn = pg_next * p.P + (t0 + kTokTile) % p.P;
                if (qp.l2_next) Nv4PrefetchTile(maps, qp, yn);
              }
            }
            // Every thread writes blocks 0-1 before the tail lands: all wait for the buffer's releases, then thread 0
            // issues the tail.
            if (u >= 1)
              for (int r = 0; r < 3; ++r) MbarWait(&bars->empty[buf][r], (u - 1) & 1);
            if (pt == 0) {
              SS_TRACE(kTrPart0, k, true);
              MbarArriveExpectTx(&bars->raw[buf], kNv4sTailBytes);
              Nv4TmaTail(dst, maps, qp, y, &bars->raw[buf]);
            }
            MbarWait(&bars->stage, sg & 1);
            ++sg;
            Nv4DecodeTileS<kMB>(dst, stage, bars->full[buf], pt & 63, pt >> 6, t0 + (pt & 63) < len, [&] {
              FenceProxyAsync();     // this thread's slot reads before the slot's refill (async proxy)
              NamedBarSync(4, 128);  // every thread's
              if (pt == 0 && j + 1 < n) {
                MbarArriveExpectTx(&bars->stage, kSsStageBytes);
                Nv4TmaStage(stage, maps, yn, &bars->stage);
                staged = true;
              }
              MbarWait(&bars->raw[buf], u & 1);
              SS_TRACE(kTrPart1, k, pt == 0);
            });
            SS_TRACE(kTrPart2, k, pt == 0);
            continue;
          }
          if (pt == 0) {
            const int y = pg_next * p.P + t0 % p.P;
            if (j + 1 < n) {
              pg_next = page_of(t0 + kTokTile);
              // The next tile's raw bytes into L2 a whole tile ahead: its TMA copies, issued once the buffer is back,
              // then wait for an L2 hit instead of an HBM round trip (the release -> load -> decode chain).
              if (qp.l2_next) {
                if constexpr (kNv4) Nv4PrefetchTile(maps, qp, pg_next * p.P + (t0 + kTokTile) % p.P);
                else Fp8PrefetchTile(maps, pg_next * p.P + (t0 + kTokTile) % p.P);
              }
            }
            if (u >= 1)
              for (int r = 0; r < 3; ++r) MbarWait(&bars->empty[buf][r], (u - 1) & 1);
            SS_TRACE(kTrPart0, k, true);
            if constexpr (kVar & 4) {
              MbarArrive(&bars->raw[buf]);
            } else {
              if constexpr (kNv4) {
                MbarArriveExpectTx(&bars->raw[buf], kNv4RawBytes);
                Nv4TmaTile(dst + kNv4LatOff, dst + kNv4RopeOff, dst + kNv4LsfOff, dst + kNv4RsfOff, maps, qp, y, &bars->raw[buf]);
              } else {
                MbarArriveExpectTx(&bars->raw[buf], kFp8RawBytes);
                Fp8TmaTile(dst + kFp8RawOff, maps, y, &bars->raw[buf]);
              }
            }
          }
          MbarWait(&bars->raw[buf], u & 1);  // (after thread 0's empty waits: ordered behind the consumers' reads)
          SS_TRACE(kTrPart1, k, pt == 0);
          if constexpr (kVar & 4) {
#pragma unroll
            for (int c = 0; c < 9; ++c) MbarArrive(&bars->full[buf][c]);
          } else {
            if constexpr (kNv4) Nv4DecodeTile<kMB>(dst, bars->full[buf], pt & 63, pt >> 6, t0 + (pt & 63) < len);
            else Fp8DecodeTile(dst, bars->full[buf], pt & 63, pt >> 6, t0 + (pt & 63) < len);
          }
          SS_TRACE(kTrPart2, k, pt == 0);
        }
        ++sc;
        continue;
      } else if constexpr (kLoad != 0) {
        // TMA: warp 0 waits, its lane 0 issues whole tiles (page id read one tile ahead); a partial last tile goes through
        // cp.async by all 128 threads (zero fill past len), each waits for its own copies, and after a
        // producer barrier thread 0 arrives once per block (count 1, as for TMA). Once per segment.
        auto page_of = [&](int t0) { return t0 < len ? PageOf(p, b, t0) : 0; };
        int pg_next = pt < 32 ? page_of(blk0 * kTokTile) : 0;
        for (int j = 0; j < n; ++j, ++k) {
          const int buf = k & 1, u = k >> 1, own = j & 1, t0 = (blk0 + j) * kTokTile;
          const int pown = buf ? pown1 : pown0;  // owner of the buffer's previous tile
          if (buf) pown1 = own; else pown0 = own;
          uint16_t* dst = reinterpret_cast<uint16_t*>(kbuf + buf * kSsTileBytes);
          if (WholeTile(t0, len)) {
            // The whole producer warp waits and lane 0 issues, so lanes 1-31 do not run ahead and spin on the
            // next segment's Q barrier inside lane 0's warp (session 7: within noise; kept as the simpler form).
            if (pt >= 32) continue;
            const int y = pg_next * p.P + t0 % p.P;
            if (j + 1 < n) pg_next = page_of(t0 + kTokTile);
#pragma unroll 1
            for (int q = 0; q < 3; ++q) {
              const int2 cr = RefillPart(bars, buf, u, own, pown, q);
              SS_TRACE(kTrPart0 + q, k, pt == 0);
              if (pt == 0) {
#pragma unroll
                for (int c = cr.x; c < cr.y; ++c) {
                  if constexpr (kVar & 4) {
                    MbarArrive(&bars->full[buf][c]);
                    continue;
                  }
                  TmaKvBlock<kLoad >= 2, kMc>(dst, maps, c, y, &bars->full[buf][c], pol, peer);  // kMc: or the peer
                }
              }
              __syncwarp();
            }
          } else {
            // Warps other than the first skipped the whole tiles' empty waits; a parity wait can only be
            // trusted for the latest phase, so first let warp 0 get here (it has waited for every earlier phase).
            NamedBarSyncDiv(4, 128);
            int pg[4];
            uint32_t row[4];
            TilePages(p, b, t0, len, tg, pg);
            TileRows(p, t0, len, tg, pg, row);
#pragma unroll 1
            for (int q = 0; q < 3; ++q) {
              const int2 cr = RefillPart(bars, buf, u, own, pown, q);
#pragma unroll
              for (int c = cr.x; c < cr.y; ++c)
                if constexpr (!(kVar & 4)) CopyKvBlock(dst, p, row, tg, cq, c);
            }
            CpAsyncWaitAll();  // this thread's copies have landed (wait_group 0 would not cover them: never
                               // committed); after the barrier, everyone's
            NamedBarSyncDiv(4, 128);
            if (pt == 0)
              for (int c = 0; c < 9; ++c) MbarArrive(&bars->full[buf][c]);
          }
        }
        ++sc;
        continue;
      }
      int pg_next[4];
      TilePages(p, b, blk0 * kTokTile, len, tg, pg_next);
      for (int j = 0; j < n; ++j, ++k) {
        const int buf = k & 1, u = k >> 1;
        const int pown = buf ? pown1 : pown0;  // owner of the buffer's previous tile
        if (buf) pown1 = j & 1; else pown0 = j & 1;
        uint16_t* dst = reinterpret_cast<uint16_t*>(kbuf + buf * kSsTileBytes);
        uint32_t row[4];
        TileRows(p, (blk0 + j) * kTokTile, len, tg, pg_next, row);
        if (j + 1 < n) TilePages(p, b, (blk0 + j + 1) * kTokTile, len, tg, pg_next);
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          const int2 cr = RefillPart(bars, buf, u, j & 1, pown, q);
#pragma unroll
          for (int c = cr.x; c < cr.y; ++c) {
            if constexpr (kVar & 4) {
              MbarArrive(&bars->full[buf][c]);
              continue;
            }
            CopyKvBlock(dst, p, row, tg, cq, c);
            CpAsyncMbarArrive(&bars->full[buf][c]);
          }
        }
      }
      ++sc;
    }
    CpAsyncWaitAll();
    if constexpr (kMc) ClusterSync();  // the peer's consumers may still arrive on this CTA's barriers
    return;
  }

  // ---------------- consumers (wg 0: output columns 0..255, wg 1: 256..511) ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kDec ? kSsNv4ConsumerRegs : kSsConsumerRegs));
  // The consumers' code, w = 0 or 1. kStaticW: one copy per warpgroup with w a compile-time constant (the block order of
  // S and the V half offsets fold into the wgmma descriptors' immediates); else one copy for both.
  auto consumer = [&](auto w_arg) {
    const int w = WgIndex(w_arg);
    const int wt = threadIdx.x & 127, lane = threadIdx.x & 31;
    const int lr0 = (wt >> 5) * 16 + (lane >> 2), lr1 = lr0 + 8;
    const uint32_t qa = SmemAddr(sQ), kb0 = SmemAddr(kbuf);
    constexpr uint32_t lbo = kBlockBytes, sbo = 1024;
    const uint64_t dq = Desc(qa, 16, 1024);
    // nvfp4: codes * block scales are the pool's values times the global scale (helix_jax/quant.py)
    const float out_mul = kDec ? __frcp_rn(__ldg(qp.kv_scale)) : 1.f, sl2 = p.scale_log2 * out_mul;
    int kbase = 0, sc = 0;
    [[maybe_unused]] uint64_t kv_pol = 0;  // kSelf: the consumers' KV copies carry the producer's evict-first hint
    if constexpr (kSelf) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(kv_pol));
    // Releases role `part` (see SsBars::empty) of KV buffer `buf` (kMc: one lane per warp on this CTA's
    // barrier, one on the peer's; the warp is converged at every call site and its wgmma reads have completed).
    auto empty_arrive = [&](int buf, int part) {
      if constexpr (kSelf) return;  // nobody waits: the consumers refill the buffers themselves
      if constexpr (kMc) {
        __syncwarp();
        if (lane == 0) MbarArrive(&bars->empty[buf][part]);
        if (lane == 1) MbarArriveRemote(&bars->empty[buf][part], peer);
      } else {
        MbarArrive(&bars->empty[buf][part]);
      }
    };

    for (int si = range.x; si < range.y; ++si) {
      const int4 seg = s.seg[SegRow(p) + si];
      const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
      const int gr0 = row0 + lr0, gr1 = row0 + lr1;
      if (n <= 0) {  // never produced by the schedule; keep the partial well defined anyway
        uint16_t* o0 = p.o_part + ((long long)si * p.GH + gr0) * kDl + w * 256 + (lane & 3) * 2;
        uint16_t* o1 = p.o_part + ((long long)si * p.GH + gr1) * kDl + w * 256 + (lane & 3) * 2;
        for (int nt = 0; nt < 32; ++nt) {
          if (gr0 < p.GH) StPart2<kBf16>(o0 + nt * 8, 0.f, 0.f);
          if (gr1 < p.GH) StPart2<kBf16>(o1 + nt * 8, 0.f, 0.f);
        }
        if (w == 0 && (lane & 3) == 0) {
          if (gr0 < p.GH) p.lse_part[(long long)si * p.GH + gr0] = -INFINITY;
          if (gr1 < p.GH) p.lse_part[(long long)si * p.GH + gr1] = -INFINITY;
        }
        continue;
      }
      // A whole tile of a TMA load mode came by TMA; a sequence's partial last tile by cp.async (see the producer).
      constexpr bool kTmaTiles = kLoad >= 1 && kLoad <= 3;
      const int len = kTmaTiles ? SeqLen(p.bounds, b, p.G, p.cap) : 0;
      int bnd0 = 0, bnd1 = 0;
      if (gr0 < p.GH) bnd0 = min(max(p.bounds[b * p.G + gr0 / p.H], 0), p.cap);
      if (gr1 < p.GH) bnd1 = min(max(p.bounds[b * p.G + gr1 / p.H], 0), p.cap);
      MbarWait(&bars->q_full, sc & 1);
      // Logit factors of rows lr0, lr1 (kF16Q: times the f16 Q rows' 2^-k).
      const float sl2r0 = kF16Q ? sl2 * sQs[lr0] : sl2, sl2r1 = kF16Q ? sl2 * sQs[lr1] : sl2;

      float acc[32][4];
  #pragma unroll
      for (int i = 0; i < 32; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
      float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
      int pend_own = -1, pend_oth = -1;  // local tiles whose PV (this WG's half) may still be in flight

      // After this WG's PVs completed: own tile -> the owner's V half (role 0); other's tile -> the non-owner
      // half (role 2) and the P block (role 1). The owner released roles 1 and 2 of its tiles earlier.
      auto release = [&]() {
        if (pend_own >= 0) empty_arrive((kbase + pend_own) & 1, 0);
        if (pend_oth >= 0) {
          empty_arrive((kbase + pend_oth) & 1, 2);
          empty_arrive((kbase + pend_oth) & 1, 1);
        }
        pend_own = pend_oth = -1;
      };
      // The other WG's tile i: wait for its softmax (P_i is in the tile's rope block, m_i in sM). This WG never
      // reads the owner's V half of tile i and does not release it (role 0 counts the owner only).
      float mo0 = -INFINITY, mo1 = -INFINITY;
      auto other_fetch = [&](int i) {
        NamedBarSync(1 + (i & 1), 256);
        mo0 = sM[(i & 1) * 64 + lr0];
        mo1 = sM[(i & 1) * 64 + lr1];
        SS_TRACE(kTrOFetch, kbase + i, wt == 0);
      };
      // O_half *= alpha per row. Skipped where no row of this warp moved its max (every alpha exactly 1, so the product
      // is the identity): after a segment's first tiles that is most tiles, and the 128 multiplies sit between a
      // softmax and the PV that waits for them. The decoding seesaws (208 registers) skip only on the non-owner's side
      // (dec_skip): the owner's branch made ptxas serialise their wgmmas (C7512).
      auto scale_acc = [&](float a0, float a1, auto dec_skip) {
        if constexpr (!kDec || decltype(dec_skip)::value)
          if (!__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) return;
  #pragma unroll
        for (int c = 0; c < 32; ++c) {
          acc[c][0] *= a0; acc[c][1] *= a0; acc[c][2] *= a1; acc[c][3] *= a1;
        }
      };
      // The other WG's tile i after other_fetch(i): O_half = O_half a_i + P_i V_i with P_i from shared memory
      // (SS: no registers held while it runs). Call with no wgmma in flight: acc is rescaled here (ptxas
      // would serialise every wgmma otherwise).
      auto other_pv = [&](int i) {
        auto rescale = [&] {
          const float a0 = exp2f(m0 - (mo0 == -INFINITY ? 0.f : mo0));
          const float a1 = exp2f(m1 - (mo1 == -INFINITY ? 0.f : mo1));
          m0 = mo0;
          m1 = mo1;
          l0 *= a0;
          l1 *= a1;
          scale_acc(a0, a1, std::true_type{});
        };
        // 16-bit tiles (attempt 87): where no row of the warp has a new max (the lazy pass keeps it for most tiles) nothing
        // changes, so the factors' exponentials and the vote in scale_acc are skipped (m = -inf on both sides: acc and l
        // are still 0).
        if constexpr (kDec) rescale();
        else if (!__all_sync(0xffffffffu, mo0 == m0 && mo1 == m1)) rescale();
        const uint32_t base = kb0 + ((kbase + i) & 1) * kSsTileBytes;
        const uint64_t dp = Desc(base + 8 * kBlockBytes, 16, 1024), dv = Desc(base + w * 4 * kBlockBytes, lbo, sbo);
        FenceRegs(acc);
        WgFence();
  #pragma unroll
        for (int kk = 0; kk < kTokTile / 16; ++kk)
          WgmmaPV<kMB>(acc, DescAdd(dp, kk * 32), DescAdd(dv, kk * 16 * 128));
        WgCommit();
        pend_oth = i;
      };
      auto pv_rs = [&](const uint32_t (&f)[4][4], int i) {
        const uint64_t dv = Desc(kb0 + ((kbase + i) & 1) * kSsTileBytes + w * 4 * kBlockBytes, lbo, sbo);
  #pragma unroll
        for (int kk = 0; kk < kTokTile / 16; ++kk) WgmmaPVrs<kMB>(acc, f[kk], DescAdd(dv, kk * 16 * 128));
      };

      // Own tile j (kOth: the other WG's tile j-1 is handled here too; every own tile but WG0's first).
      // Order: wait for this WG's PV_{j-2} and release its V half (role 0, the owner's alone); issue S_j on
      // the first kSsSplitQ blocks of the own V half (refilled first: its data does not wait for the other WG);
      // then, while that runs, wait for softmax_{j-1}, rescale by alpha_{j-1} and issue PV_{j-1} (SS, P_{j-1}
      // from smem); issue the rest of S_j (the own half's last blocks, rope, other half); release tile j-1 once
      // PV_{j-1} is done (wait_group 1: the rest of S_j may still run; releasing before issuing the rest was no
      // faster, NOTES session 7 attempt 13);
      // after S_j: softmax_j, rescale by alpha_j, issue PV_j (RS, P_j from registers). S_j's first part
      // overlaps the other WG's softmax_{j-1} (benchmarks/NOTES.md, session 7).
      // kLoad 2 takes tile j-1 first where S_j's data is late (attempt 49, below). A compile-time flag, not a branch
      // around wgmmas in flight: ptxas serialises wgmmas whose accumulators meet in flight at a control-flow merge.
      auto own_tile = [&](int j, auto oth_tag) {
        constexpr bool oth = decltype(oth_tag)::value;
        const int k = kbase + j, buf = k & 1, par = (k >> 1) & 1;
        const uint64_t dk = Desc(kb0 + buf * kSsTileBytes, 16, 1024);
        SS_TRACE(kTrStart, k, wt == 0);
        WgWait0();
        FenceRegs(acc);
        release();
        SS_TRACE(kTrRel, k, wt == 0);
        // S_j = Q K_j^T (64 x 64 tokens) block by block as copies land: own V half, rope, other half (the
        // order the producer refills them in; the other half is released last).
        float sc4[8][4];
  #pragma unroll
        for (int i = 0; i < 8; ++i) sc4[i][0] = sc4[i][1] = sc4[i][2] = sc4[i][3] = 0.f;
        FenceRegs(sc4);
        auto s_block = [&](int q) {  // S_j's q-th block in S order, once it has landed
          const int c = kDec ? q : q < 4 ? w * 4 + q : q == 4 ? 8 : (1 - w) * 4 + (q - 5);
          MbarWait(&bars->full[buf][c], par);
          if (q == 0) SS_TRACE(kTrFirst, k, wt == 0);
          if (q == 8) SS_TRACE(kTrLast, k, wt == 0);
          // cp.async / decoded (generic proxy) data -> wgmma (async proxy). A TMA-filled tile needs none: its bytes are
          // async-proxy writes, ordered by the mbarrier's transaction count.
          if constexpr (!(kVar & 1))
            if (!kTmaTiles || !WholeTile((blk0 + j) * kTokTile, len)) FenceProxyAsync();
          WgFence();
  #pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const uint32_t off = c * kBlockBytes + kk * 32;
            WgmmaS64<kMB>(sc4, DescAdd(dq, off), DescAdd(dk, off));
          }
        };
        // Which comes first (attempt 49; TMA evict-first tiles, kLoad 2, only): where S_j's first block has not landed yet
        // (a warpgroup-wide vote), the other WG's tile j-1 is taken first - wait for softmax_{j-1}, PV_{j-1}, give tile j-1
        // back once it is done - and S_j is issued after it, so tile j-1's refill (tile j+1) does not wait for tile j's
        // data. 1.2-1.6 % faster at H=16 G=4; with multicast (kLoad 3, H=128) 6-11 % slower: there the refill waits for
        // the bandwidth, not the release, and S_j's first part no longer overlaps the other WG's softmax (NOTES, session
        // 23). Both orders end with no wgmma in flight (ptxas serialises wgmmas whose accumulators meet in flight at a
        // control-flow merge).
        bool late = false;
        if constexpr (oth && kLoad == 2) late = BarRedOr(5 + w, 128, !MbarTest(&bars->full[buf][w * 4], par));
        if (late) {
          SS_TRACE(kTrLate, k, wt == 0);
          other_fetch(j - 1);
          other_pv(j - 1);
          WgWait0();
          FenceRegs(acc);
          release();
  #pragma unroll
          for (int q = 0; q < 9; ++q) s_block(q);
          WgCommit();
          WgWait0();
        } else {
          // S_j block by block as copies land: own V half, rope, other half (the order the producer refills them in; the
          // other half is released last). The first kSsSplitQ blocks of the own V half (refilled first) are one commit
          // group; the other WG's tile j-1 is taken while it runs: wait for softmax_{j-1}, issue PV_{j-1}, then the rest
          // of S_j. Fewer blocks in front of PV_{j-1} let the other WG's PV, and with it the release of tile j-1, go
          // earlier (attempt 92).
  #pragma unroll
          for (int q = 0; q < 9; ++q) {
            if (q == kSsSplitQ) {
              WgCommit();
              if constexpr (oth) {
                other_fetch(j - 1);
                other_pv(j - 1);
              }
            }
            s_block(q);
          }
          WgCommit();
          if constexpr (oth) {
            WgWait<1>();  // S_j's own half and PV_{j-1} done: tile j-1's P block and non-owner half go back
            release();
          }
          WgWait0();
        }
        FenceRegs(sc4);
        SS_TRACE(kTrSDone, k, wt == 0);
        // S_j done: the non-owner's V half is not read by this WG again (kSsLateArrive: after PV_j's issue, below)
        if constexpr (!kSsLateArrive) empty_arrive(buf, 2);

        // Softmax of tile j (log2 units), masked by each row's own bound. The max is taken on the raw logits (the factors
        // sl2r* are positive: softmax_scale > 0, checked by the API) and the factor folded into each exponent's FMA; the
        // bound compares are skipped where the whole tile lies inside every bound of the warp (all but a segment's last
        // tiles).
        // Lazy pass (attempt 86, 16-bit tiles): where the whole tile lies inside every bound of the warp and every row
        // already has a finite running max, the exponentials are first taken against that max with no row max at all
        // (the softmax is invariant to the reference it subtracts). Every P value is <= its row's partial sum, so per-thread
        // sums <= kLazyCap (2^8) mean no P exceeds 2^8 and nothing overflowed (inf and NaN fail the compare too): the max
        // stays, every factor is 1, and no rescale follows. Otherwise (a new max far above the old, or a partial tile) the
        // warp takes the exact pass below: row max, new running max, exponentials again.
        constexpr bool kLazy = !kDec;
        constexpr float kLazyCap = 256.f;
        const int tile0 = (blk0 + j) * kTokTile;
        bool lazy = kLazy && __all_sync(0xffffffffu, tile0 + kTokTile <= min(bnd0, bnd1) && m0 != -INFINITY &&
                                                       m1 != -INFINITY);
        float al0 = 1.f, al1 = 1.f, rs0, rs1;
        uint32_t pa[4][4];
        // P_j into the tile's rope block for the other WG: stmatrix x4 writes this warp's 16 rows x 16 tokens per call
        // (matrices: rows 0-7 / 8-15 of token chunks 2i and 2i + 1; lane l gives the address of row l & 7 of matrix l >> 3).
        // The 16-bit seesaws store inside the loop below, before the lazy check: an exact pass after a failed check stores
        // again, all before the barrier that publishes P_j.
        auto store_p = [&] {
          // Chunk 2i + mch of row mrow sits at swizzled chunk (mch ^ (mrow & 7)) ^ 2i (TileOff), and the buffers are
          // 1024-byte aligned, so store i's address is store 0's with bits 5-6 flipped by i: one XOR each instead of
          // the swizzle arithmetic per store, after S_j's wait (attempt 95, benchmarks/NOTES.md session 44).
          static_assert(kSsTileBytes % 1024 == 0 && kBlockBytes % 1024 == 0, "P-store addresses: 1024-byte buffers");
          const int mrow = (wt >> 5) * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), mch = lane >> 4;
          const uint32_t a0 = kb0 + buf * kSsTileBytes + 8 * kBlockBytes + 2 * TileOff(mrow, mch);
  #pragma unroll
          for (int i = 0; i < 4; ++i) StMatrixX4(a0 ^ (32u * i), pa[i][0], pa[i][1], pa[i][2], pa[i][3]);
        };
  #pragma unroll 1
        for (;;) {
          float mu0 = m0, mu1 = m1;
          if (!lazy) {
            float mx0, mx1;
            MaskedRowMax(sc4, tile0, lane, bnd0, bnd1, mx0, mx1);
            const float mn0 = fmaxf(m0, mx0 * sl2r0), mn1 = fmaxf(m1, mx1 * sl2r1);
            mu0 = mn0 == -INFINITY ? 0.f : mn0;
            mu1 = mn1 == -INFINITY ? 0.f : mn1;
            al0 = exp2f(m0 - mu0);
            al1 = exp2f(m1 - mu1);
            m0 = mn0;
            m1 = mn1;
          }
          // Row sums as a tree (attempt 88; 3 dependent adds after the pairs instead of a chain of 8): they gate the lazy check.
          [[maybe_unused]] float q0[8], q1[8];  // (the decoding seesaws sum in the loop)
          rs0 = 0.f, rs1 = 0.f;
  #pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            const float p0 = exp2f(fmaf(sc4[nt][0], sl2r0, -mu0)), p1 = exp2f(fmaf(sc4[nt][1], sl2r0, -mu0));
            const float p2 = exp2f(fmaf(sc4[nt][2], sl2r1, -mu1)), p3 = exp2f(fmaf(sc4[nt][3], sl2r1, -mu1));
            if constexpr (kDec) {  // the decoding seesaws' registers: the chain
              rs0 += p0 + p1;
              rs1 += p2 + p3;
            } else {
              q0[nt] = p0 + p1;
              q1[nt] = p2 + p3;
            }
            pa[nt >> 1][(nt & 1) * 2 + 0] = Pack2<kMB>(p0, p1);
            pa[nt >> 1][(nt & 1) * 2 + 1] = Pack2<kMB>(p2, p3);
          }
          if constexpr (!kDec) {
  #pragma unroll
            for (int w2 = 4; w2 >= 1; w2 >>= 1)
  #pragma unroll
              for (int i = 0; i < w2; ++i) {
                q0[i] += q0[i + w2];
                q1[i] += q1[i + w2];
              }
            rs0 = q0[0];
            rs1 = q1[0];
          }
          if constexpr (!kDec) store_p();  // before the lazy check (attempt 88): the stores overlap it
          if (!lazy || __all_sync(0xffffffffu, rs0 <= kLazyCap && rs1 <= kLazyCap)) break;
          lazy = false;
        }
        if constexpr (kDec) store_p();
        if ((lane & 3) == 0) {
          sM[(j & 1) * 64 + lr0] = m0;
          sM[(j & 1) * 64 + lr1] = m1;
        }
        FenceProxyAsync();                    // P_j stores (generic) -> the other WG's wgmma (async proxy)
        NamedBarArrive(1 + (j & 1), 256);     // softmax j published (P_j, m_j)
        SS_TRACE(kTrSmax, k, wt == 0);
        if constexpr (!kSsLateArrive) empty_arrive(buf, 1);  // this WG is done with the rope/P block of tile j
        if (lazy) {  // every factor is 1
          l0 += rs0;
          l1 += rs1;
        } else {
          l0 = l0 * al0 + rs0;
          l1 = l1 * al1 + rs1;
          scale_acc(al0, al1, std::false_type{});
        }
        FenceRegs(acc);
        WgFence();
        pv_rs(pa, j);
        SS_TRACE(kTrPvIss, k, wt == 0);
        WgCommit();
        pend_own = j;
        if constexpr (kSsLateArrive) {
          empty_arrive(buf, 2);
          empty_arrive(buf, 1);
        }
      };
      if constexpr (kVar & 2) {  // probe: the load pipeline alone
        for (int jj = 0; jj < n; ++jj) {
          const int k = kbase + jj;
          for (int c = 0; c < 9; ++c) MbarWait(&bars->full[k & 1][c], (k >> 1) & 1);
          for (int role = (jj & 1) == w ? 0 : 1; role < 3; ++role) empty_arrive(k & 1, role);
        }
        NamedBarSync(3, 256);
        MbarArrive(&bars->q_empty);
        kbase += n;
        ++sc;
        continue;
      }
      if constexpr (kPair) {
        // Pair schedule (kVar bit 16): tiles in pairs (t, t + 1), t even, with one running max per pair. WG0 owns t, WG1
        // owns t + 1 (S of its own tile was issued at the end of the previous pair). WG0: softmax_t against the running
        // max M, publishes m' = max(M, rowmax_t) (sM[0]), PV_t on its half from registers; gives its V half of t back;
        // once WG1 has published M' = max(m', rowmax_{t+1}) (sM[1]) it stores P_t * 2^(m' - M') for WG1, rescales its half
        // and adds P_{t+1} V_{t+1} (SS), then issues S_{t+2}: its own V half first (back since its PV_t), the rest
        // after. WG1: softmax_{t+1} against m', stores P_{t+1}, PV_{t+1} on its half (RS), then P_t V_t (SS) once WG0
        // stored P_t, then S_{t+3}. The four PVs of a pair are in flight together while the next tiles load.
        constexpr int kBarS0 = 1, kBarS1 = 2, kBarP0 = 7, kBarP1 = 8;
        auto tile_buf = [&](int j) { return (kbase + j) & 1; };
        auto tile_addr = [&](int j) { return kb0 + tile_buf(j) * kSsTileBytes; };
        // Blocks [q0, q1) of S_j in the producer's refill order (own V half, rope, other half), each once it has landed.
        auto s_blocks = [&](float (&sc)[8][4], int j, int q0, int q1) {
          const int k = kbase + j, buf = k & 1, par = (k >> 1) & 1;
          const uint64_t dk = Desc(kb0 + buf * kSsTileBytes, 16, 1024);
  #pragma unroll
          for (int q = 0; q < 9; ++q) {
            if (q < q0 || q >= q1) continue;
            const int c = q < 4 ? w * 4 + q : q == 4 ? 8 : (1 - w) * 4 + (q - 5);
            MbarWait(&bars->full[buf][c], par);
            if (!WholeTile((blk0 + j) * kTokTile, len)) FenceProxyAsync();  // cp.async tail tile (generic writes)
            WgFence();
  #pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
              const uint32_t off = c * kBlockBytes + kk * 32;
              WgmmaS64<kMB>(sc, DescAdd(dq, off), DescAdd(dk, off));
            }
          }
        };
        auto s_zero = [&](float (&sc)[8][4]) {
  #pragma unroll
          for (int i = 0; i < 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
          FenceRegs(sc);
        };
        // Row maxima (raw logits) of tile j, masked by each row's bound (MaskedRowMax). A lambda on purpose: the helper
        // called at the two sites with the tile index written out there (blk0 + t + 1) moved ptxas's schedule in 10
        // kernels (cuobjdump, session 35); through this lambda the kernels are SASS-identical to the code it replaced.
        auto tile_max = [&](float (&sc)[8][4], int j, float& mx0, float& mx1) {
          MaskedRowMax(sc, (blk0 + j) * kTokTile, lane, bnd0, bnd1, mx0, mx1);
        };
        // sc = 2^(sc * sl2r - mu) in place (mu finite), with the row sums.
        auto tile_exp = [&](float (&sc)[8][4], float mu0, float mu1, float& rs0, float& rs1) {
          rs0 = 0.f, rs1 = 0.f;
  #pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            sc[nt][0] = exp2f(fmaf(sc[nt][0], sl2r0, -mu0));
            sc[nt][1] = exp2f(fmaf(sc[nt][1], sl2r0, -mu0));
            sc[nt][2] = exp2f(fmaf(sc[nt][2], sl2r1, -mu1));
            sc[nt][3] = exp2f(fmaf(sc[nt][3], sl2r1, -mu1));
            rs0 += sc[nt][0] + sc[nt][1];
            rs1 += sc[nt][2] + sc[nt][3];
          }
        };
        auto pack = [&](const float (&sc)[8][4], uint32_t (&pa)[4][4], float f0, float f1) {
  #pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            pa[nt >> 1][(nt & 1) * 2 + 0] = Pack2<kMB>(sc[nt][0] * f0, sc[nt][1] * f0);
            pa[nt >> 1][(nt & 1) * 2 + 1] = Pack2<kMB>(sc[nt][2] * f1, sc[nt][3] * f1);
          }
        };
        // P of tile j for the other WG: into its rope block (dead once S_j is done), or (p0: kSelf, WG0's P of a whole pair)
        // into the P block of its own at kSsStageOff, which WG1 has stopped reading once it published the pair's M'
        // (its PV of the previous pair retired before its S of this pair); stmatrix as own_tile's.
        const uint32_t sP0a = SmemAddr(smem + kSsStageOff);
        auto store_p = [&](const uint32_t (&pa)[4][4], int j, bool p0 = false) {
          const uint32_t sPj = p0 ? sP0a : tile_addr(j) + 8 * kBlockBytes;
          const int mrow = (wt >> 5) * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), mch = lane >> 4;
  #pragma unroll
          for (int i = 0; i < 4; ++i) StMatrixX4(sPj + 2 * TileOff(mrow, 2 * i + mch), pa[i][0], pa[i][1], pa[i][2], pa[i][3]);
          FenceProxyAsync();  // P stores (generic) -> the other WG's wgmma (async proxy)
        };
        // O_half += P_i V_i (this WG's half) with P_i from tile i's rope block or (p0) WG0's P block (SS).
        auto pv_ss = [&](int i, bool p0 = false) {
          const uint32_t base = tile_addr(i);
          const uint64_t dp = Desc(p0 ? sP0a : base + 8 * kBlockBytes, 16, 1024), dv = Desc(base + w * 4 * kBlockBytes, lbo, sbo);
          FenceRegs(acc);
          WgFence();
  #pragma unroll
          for (int kk = 0; kk < kTokTile / 16; ++kk) WgmmaPV<kMB>(acc, DescAdd(dp, kk * 32), DescAdd(dv, kk * 16 * 128));
          WgCommit();
        };
        auto pv_own = [&](const uint32_t (&pa)[4][4], int i) {
          FenceRegs(acc);
          WgFence();
          pv_rs(pa, i);
          WgCommit();
        };
        auto fin = [](float m) { return m == -INFINITY ? 0.f : m; };
        // kSelf: the pool row of tile j's first token (j < n, so the tile starts inside the sequence and its page is valid),
        // and thread 0's TMA copies of blocks [c0, c1) (+ the rope block) of tile j into its buffer.
        auto page_row = [&](int j) {
          if constexpr (kMc) return 0;  // the producer reads it (attempt 72)
          const int t0 = (blk0 + j) * kTokTile;
          return PageOf(p, b, t0) * p.P + t0 % p.P;
        };
        // kMc (attempt 72): both CTAs of the cluster hold tile j (the same tiles, the other row tile) and run this schedule,
        // so each reaches the same issue points. At one, thread 0 announces that this CTA's readers of the part's V half
        // (halves: [0, 4) and [4, 8); the rope block rides with the left one) are done, on this CTA's barrier and the
        // peer's, and goes on; producer warp 0 / 1 loads the half once both CTAs have released it (see the producer).
        auto issue = [&](int j, int y, int c0, int c1, bool rope) {
          if constexpr (kSelf) {
            if (wt == 0) {
              const int buf = tile_buf(j);
              if constexpr (kMc) {  // attempt 72: announce the release here and at the peer; producer warp 0 / 1 loads
                for (int sd = c0 < 4 ? 0 : 1; sd <= (c1 > 4 ? 1 : 0); ++sd) {
                  MbarArrive(&bars->empty[buf][sd]);
                  if (kMcSide(sd)) MbarArriveRemote(&bars->empty[buf][sd], peer);
                }
                return;
              }
              uint16_t* dst = reinterpret_cast<uint16_t*>(kbuf + buf * kSsTileBytes);
              for (int c = c0; c < c1; ++c) TmaKvBlock<true>(dst, maps, c, y, &bars->full[buf][c], kv_pol);
              if (rope) TmaKvBlock<true>(dst, maps, 8, y, &bars->full[buf][8], kv_pol);
            }
          }
        };
        // kSelf: a sequence's partial last tile came whole from its page, so the V rows past the sequence may hold anything
        // (NaN included) where P is 0: this warpgroup zeroes its V half's rows there before its PV reads them (after every
        // S on the tile: the S rows past every bound are masked to -inf).
        auto zero_tail = [&](int j) {
          if constexpr (kSelf) {
            const int rem = len - (blk0 + j) * kTokTile;
            if (rem >= kTokTile) return;
            uint16_t* d = reinterpret_cast<uint16_t*>(kbuf + tile_buf(j) * kSsTileBytes);
            for (int r = rem + (wt >> 5); r < kTokTile; r += 4)
              *reinterpret_cast<uint4*>(d + TileOff(r, w * 32 + lane)) = make_uint4(0u, 0u, 0u, 0u);
            FenceProxyAsync();         // generic stores -> this warpgroup's wgmma (async proxy)
            NamedBarSync(5 + w, 128);  // every thread's
          }
        };
        float sc4[8][4];
        // WG0's pair (t, t + 1): kHas1 = tile t + 1 exists, kNext = tile t + 2 exists (S_{t+2} issued here).
        auto pair_iter0 = [&](int t, auto has1_tag, auto next_tag) {
          constexpr bool kHas1 = decltype(has1_tag)::value, kNext = decltype(next_tag)::value;
          const int buft = tile_buf(t), buf1 = tile_buf(t + 1);
          int y2 = 0, y3 = 0;  // kSelf, thread 0: the pool rows of tiles t + 2 and t + 3 (read ahead of their copies)
          if (kSelf && kNext && wt == 0) {
            y2 = page_row(t + 2);
            if (t + 3 < n) y3 = page_row(t + 3);
          }
          float mx0, mx1;
          tile_max(sc4, t, mx0, mx1);
          const float mn0 = fmaxf(m0, mx0 * sl2r0), mn1 = fmaxf(m1, mx1 * sl2r1);
          if ((lane & 3) == 0) {
            sM[lr0] = mn0;
            sM[lr1] = mn1;
          }
          NamedBarArrive(kBarS0, 256);  // m' published
          const float mu0 = fin(mn0), mu1 = fin(mn1), al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
          m0 = mn0;
          m1 = mn1;
          float rs0, rs1;
          tile_exp(sc4, mu0, mu1, rs0, rs1);
          l0 = l0 * al0 + rs0;
          l1 = l1 * al1 + rs1;
          uint32_t pa[4][4];
          pack(sc4, pa, 1.f, 1.f);
          if constexpr (!kHas1) {  // the segment's last tile: WG1 adds P_t V_t against m'
            store_p(pa, t);
            NamedBarArrive(kBarP0, 256);
            empty_arrive(buft, 1);
          }
          scale_acc(al0, al1, std::true_type{});
          zero_tail(t);
          pv_own(pa, t);
          WgWait0();
          FenceRegs(acc);
          empty_arrive(buft, 0);  // this WG's V half of tile t (read by this WG alone)
          if constexpr (kNext) issue(t + 2, y2, 0, 4, kSelf);  // kSelf: with the rope block (P_t goes to sP0)
          if constexpr (kHas1) {
            NamedBarSync(kBarS1, 256);  // M' published
            const float M0 = sM[64 + lr0], M1 = sM[64 + lr1];
            const float b0 = exp2f(m0 - fin(M0)), b1 = exp2f(m1 - fin(M1));
            m0 = M0;
            m1 = M1;
            pack(sc4, pa, b0, b1);
            store_p(pa, t, kSelf);
            NamedBarArrive(kBarP0, 256);  // P_t (against M') stored
            empty_arrive(buft, 1);        // done with tile t's rope / P block
            l0 *= b0;
            l1 *= b1;
            scale_acc(b0, b1, std::true_type{});
            NamedBarSync(kBarP1, 256);  // P_{t+1} stored, WG1's P_t V_t issued
            zero_tail(t + 1);
            pv_ss(t + 1);
          }
          if constexpr (kNext) {
            // S_{t+2}'s first blocks (this WG's V half, issued once PV_t retired, so most likely landed) go into the tensor
            // pipe behind P_{t+1} V_{t+1} before anything waits for that PV (FlashMLA's order; attempts 66-67 waited for it
            // first, which left the pipe without this WG's work for a PV's length per pair; attempt 69). Tile t + 1's
            // non-owner half and P block go back, and tile t + 3's copies out, once that PV has retired (wait_group 1:
            // the S blocks may still run); then the rest of S_{t+2}.
            s_zero(sc4);
            s_blocks(sc4, t + 2, 0, 4);
            WgCommit();
            if constexpr (kHas1) {
              WgWait<1>();
              FenceRegs(acc);
              empty_arrive(buf1, 2);
              empty_arrive(buf1, 1);
              if (t + 3 < n) issue(t + 3, y3, 0, 4, true);  // tile t + 1's left half and P block are free
            }
            s_blocks(sc4, t + 2, 4, 9);
            WgCommit();
            WgWait0();
            FenceRegs(sc4);
            FenceRegs(acc);
            empty_arrive(tile_buf(t + 2), 2);  // S_{t+2} done: the non-owner half is not read by this WG again
          } else {
            WgWait0();
            FenceRegs(acc);
            if constexpr (kHas1) {
              empty_arrive(buf1, 2);
              empty_arrive(buf1, 1);
            }
          }
        };
        // WG1's pair (t, t + 1), tile t + 1 its own; kNext = tile t + 3 exists.
        auto pair_iter1 = [&](int t, auto next_tag) {
          constexpr bool kNext = decltype(next_tag)::value;
          const int buft = tile_buf(t), buf1 = tile_buf(t + 1);
          int y2 = 0, y3 = 0;  // kSelf, thread 0: the pool rows of tiles t + 2 and t + 3
          if (kSelf && wt == 0 && t + 2 < n) {
            y2 = page_row(t + 2);
            if (kNext) y3 = page_row(t + 3);
          }
          float mx0, mx1;
          tile_max(sc4, t + 1, mx0, mx1);
          NamedBarSync(kBarS0, 256);  // m' published
          const float mn0 = fmaxf(sM[lr0], mx0 * sl2r0), mn1 = fmaxf(sM[lr1], mx1 * sl2r1);
          if ((lane & 3) == 0) {
            sM[64 + lr0] = mn0;
            sM[64 + lr1] = mn1;
          }
          NamedBarArrive(kBarS1, 256);  // M' published
          const float mu0 = fin(mn0), mu1 = fin(mn1), al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
          m0 = mn0;
          m1 = mn1;
          float rs0, rs1;
          tile_exp(sc4, mu0, mu1, rs0, rs1);
          uint32_t pa[4][4];
          pack(sc4, pa, 1.f, 1.f);
          store_p(pa, t + 1);
          empty_arrive(buf1, 1);  // done with tile t + 1's rope / P block
          l0 = l0 * al0 + rs0;
          l1 = l1 * al1 + rs1;
          scale_acc(al0, al1, std::true_type{});
          zero_tail(t + 1);
          pv_own(pa, t + 1);
          NamedBarSync(kBarP0, 256);  // P_t stored
          zero_tail(t);
          pv_ss(t, kSelf);
          NamedBarArrive(kBarP1, 256);  // P_{t+1} stored (before P_t's wait), P_t V_t issued
          if constexpr (kNext) {
            WgWait<1>();
            empty_arrive(buf1, 0);  // this WG's V half of tile t + 1
            issue(t + 3, y3, 4, 8, false);
            WgWait0();
            FenceRegs(acc);
            empty_arrive(buft, 2);
            empty_arrive(buft, 1);
            issue(t + 2, y2, 4, 8, !kSelf);  // tile t's right half (and P block: kSelf issued it with the left half)
            s_zero(sc4);
            s_blocks(sc4, t + 3, 0, 9);
            WgCommit();
            WgWait0();
            FenceRegs(sc4);
            empty_arrive(tile_buf(t + 3), 2);
          } else {
            WgWait0();
            FenceRegs(acc);
            empty_arrive(buf1, 0);
            empty_arrive(buft, 2);
            empty_arrive(buft, 1);
            if (t + 2 < n) issue(t + 2, y2, 4, 8, !kSelf);  // the segment's last tile, WG0's alone
          }
        };
        // WG1 when tile t (WG0's) is the segment's last: rescale to m', add P_t V_t.
        auto single1 = [&](int t) {
          const int buft = tile_buf(t);
          NamedBarSync(kBarS0, 256);
          const float q0 = sM[lr0], q1 = sM[lr1];
          const float a0 = exp2f(m0 - fin(q0)), a1 = exp2f(m1 - fin(q1));
          m0 = q0;
          m1 = q1;
          l0 *= a0;
          l1 *= a1;
          scale_acc(a0, a1, std::true_type{});
          NamedBarSync(kBarP0, 256);
          zero_tail(t);
          pv_ss(t);
          WgWait0();
          FenceRegs(acc);
          empty_arrive(buft, 2);
          empty_arrive(buft, 1);
        };
        if (w == 0 || n >= 2) {  // S of this WG's first tile (kSelf: its copies first; both buffers are free here)
          if (kSelf && wt == 0) issue(w, page_row(w), 0, 8, true);
          s_zero(sc4);
          s_blocks(sc4, w, 0, 9);
          WgCommit();
          WgWait0();
          FenceRegs(sc4);
          empty_arrive(tile_buf(w), 2);
        }
        for (int t = 0; t < n; t += 2) {
          if (w == 0) {
            if (t + 2 < n) pair_iter0(t, std::true_type{}, std::true_type{});
            else if (t + 1 < n) pair_iter0(t, std::true_type{}, std::false_type{});
            else pair_iter0(t, std::false_type{}, std::false_type{});
          } else {
            if (t + 3 < n) pair_iter1(t, std::true_type{});
            else if (t + 1 < n) pair_iter1(t, std::false_type{});
            else single1(t);
          }
        }
      } else {
      int j = w;
      if (w == 0) {
        own_tile(0, std::false_type{});
        j = 2;
      }
      for (; j < n; j += 2) own_tile(j, std::true_type{});
      if (((n - 1) & 1) != w) {  // the segment's last tile belongs to the other WG
        WgWait0();
        FenceRegs(acc);
        release();
        other_fetch(n - 1);
        other_pv(n - 1);
      }
      WgWait0();
      FenceRegs(acc);
      release();
      }

      // Row sums: 4 lanes per row, then the two WGs' sums through shared memory.
  #pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
      }
      float* sLs = sL + (sc & 1) * 128;
      if ((lane & 3) == 0) {
        sLs[w * 64 + lr0] = l0;
        sLs[w * 64 + lr1] = l1;
      }
      MbarArrive(&bars->q_empty);  // every S of this segment has completed: Q may be reloaded
      NamedBarSync(3, 256);
      const float L0 = sLs[lr0] + sLs[64 + lr0], L1 = sLs[lr1] + sLs[64 + lr1];
      const float inv0 = L0 > 0.f ? out_mul / L0 : 0.f, inv1 = L1 > 0.f ? out_mul / L1 : 0.f;
      // A segment that starts at the sequence's first tile and reaches past its last is the sequence's only one: its
      // rows are final, so they go straight into o / lse (Params::o_out, the combine skips the sequence) where the
      // dispatch asked for it. The combine would compute the same bits (weight exp(0) = 1, o_i * 1 / 1).
      const bool direct = p.o_out != nullptr && blk0 == 0 && (blk0 + n) * kTokTile >= SeqLen(p.bounds, b, p.G, p.cap);
      uint16_t* const orow = direct ? p.o_out + (long long)b * p.GH * kDl : p.o_part + (long long)si * p.GH * kDl;
      float* const lrow = direct ? p.lse_out + (long long)b * p.GH : p.lse_part + (long long)si * p.GH;
      StPartRow<kBf16>(orow + (long long)gr0 * kDl + w * 256, acc, 0, inv0, lane, gr0 < p.GH);
      StPartRow<kBf16>(orow + (long long)gr1 * kDl + w * 256, acc, 1, inv1, lane, gr1 < p.GH);
      if (w == 0 && (lane & 3) == 0) {
        if (gr0 < p.GH) lrow[gr0] = L0 > 0.f ? (m0 + __log2f(L0)) * kLn2 : -INFINITY;
        if (gr1 < p.GH) lrow[gr1] = L1 > 0.f ? (m1 + __log2f(L1)) * kLn2 : -INFINITY;
      }
      kbase += n;
      ++sc;
    }
    if constexpr (kMc) ClusterSync();  // the peer's consumers may still arrive on this CTA's barriers
  };
  if constexpr (kStaticW) {
    if (wg == 0) consumer(std::integral_constant<int, 0>{});
    else consumer(std::integral_constant<int, 1>{});
  } else {
    consumer(wg);
  }
  SS_CTA_TRACE(1, threadIdx.x == 0);  // (thread 0 of consumer WG 0: both WGs passed the last segment's barrier)
}

}  // namespace
}  // namespace helix_ffi
