// FP8 pages, G*H > 16 query rows, 64 per CTA: mla_mid_q8s, the seesaw form of mla_mid_q8 (HELIX_MLA_DECODE_MID8=auto|seesaw,
// the default; lockstep keeps mla_mid_q8). Included by mla_decode_cuda.cu after mla_decode_mid_q8.cuh (reuses its
// constants, the raw-tile layout, the Q loader, the producer loop and the segment-end store).
//
// Why: mla_mid_q8's two consumers take every tile in lockstep (S of their query rows, a 256-thread barrier, PV of their
// latent dims), so the tensor pipe idles through each tile's softmax, exchange and barriers (~3000 of its ~5000 cycles
// per tile at B=64, H=16, G=4; benchmarks/NOTES.md session 11). Here the consumers alternate tiles as the bf16 seesaw
// kernel does: tile j's owner (consumer j % 2) computes S for all 64 query rows and its softmax while the other consumer
// runs its own S and PVs.
//   S[64 rows, 64 tok] = Q K^T with the query rows as the wgmma M dimension (A = E4M3 Q from shared memory, B = the raw
//       tile, K-major: Q8SBlock's descriptors with A and B swapped): Q as two E4M3 terms with ONE row scale
//       (Q8RowTerms<kOneScale>), so both terms accumulate into one chain, the lo term first (see step): 36 x m64n64k32,
//       32 accumulator registers;
//   the owner's row softmax (quad shuffles only) continues the running max that the previous tile's owner left in
//       shared memory (sM: a chain across the consumers, as FlashMLA's sequential softmax), writes P^T and the tile's
//       rescale factor and running row sums (sL / sE), and arrives on pfull;
//   both consumers: O^T[256 latent dims, 64 rows] *= the factors (skipped when every factor is 1: no row's max moved;
//       math alone -7 % at B=64), += V^T P^T on E4M3 tensor cores: A = V^T from registers
//       (the whole tile: 2 k32 steps x 4 m-blocks = 32 registers, from ldmatrix.trans b16 pairs and one byte permute per
//       register, one commit group; session 27, before: 8-byte token reads and 4 x 4 byte transposes) and B = P^T from
//       shared memory, its k order V^T's (S8PtPos); O^T's M rows permuted (m-block i, rows g / g + 8 = dims 16 i + 2 g,
//       + 1 of the warp's 64). (V^T in shared memory, A by descriptor, was 30 % slower: with both operands there an fp8
//       m64n64k32 reads the SM's whole shared-memory bandwidth; session 26.)
// P: p = exp2(s - m + 8) rounded to E4M3 (RNE; E4M3's 2^-4 per weight; its normal range covers p >= 2^-14). The row
// sums that normalise o use the rounded weights (in f32), so o stays a convex combination of the V rows; the lse takes
// a second sum of the unrounded weights (sE), so it carries no rounding of P. This is the precision trade of the
// kernel: mla_mid_q8 keeps P in f16 (standalone driver, full-range codes: o 3.1-4.9e-3 vs 5.1-7.0e-3 off the double
// reference). A two-term P (hi + lo in E4M3, two PV wgmmas per step on the same A registers) made ptxas serialise every
// wgmma for lack of registers (C7512) and ran slower than mla_mid_q8 (benchmarks/NOTES.md, session 14). The running max
// m moves only by more than kS8MaxSlack (session 28), so P x 256 <= 2^8.75 < 448.
// Per tile and SM: S 36 x 32 + PV 2 x 8 x 32 = 1664 tensor cycles, against ~2000 cycles of fp8 bytes at 4.2 TB/s.
// kVar: bit 0 / 1: the probes of mla_mid_q8 (math alone / producer alone); bit 5: L2 evict-first TMA loads; bit 9: S chains
// added in f32 (HELIX_MLA_DECODE_FP8_S=f32, and auto where G*H > 64); bit 10 (with 9, standalone probe): two chains per
// 32-token half instead of four; bit 16: one E4M3 term of Q (the hi term alone: HELIX_MLA_DECODE_FP8_Q=one, half of S's
// tensor work, Q's own rounding in the logits; session 25); bit 15: the alternative A-register order (reg 1 = row g, k + 16; reg 2 = row g + 8, k),
// a check of the fragment layout (the standalone driver runs it and expects it to FAIL).
#pragma once

namespace helix_ffi {
namespace {

// Timeline probe of the standalone driver (built with -DHELIX_SS_TRACE; nothing otherwise): clock64 stamps of CTA (0, 0)'s
// consumers, by the tile whose S the step computes (thread 0 of its owner).
enum S8TraceEvent { kS8TrStep, kS8TrLast, kS8TrSIss, kS8TrOthP, kS8TrSDone, kS8TrSmax, kS8TrPv1Iss, kS8TrPv1Done, kS8TrPv2Iss,
                    kS8TrEvents };
#ifdef HELIX_SS_TRACE
__device__ long long g_s8_trace[kS8TrEvents][kTrTiles];
#endif
#define S8_TRACE(ev, k) HELIX_TRACE_STAMP(g_s8_trace, ev, k, (threadIdx.x & 127) == 0)  // (mla_decode_seesaw.cuh)
// The same build's whole-call view: per CTA of row tile 0, %globaltimer (ns) at the consumers' start and end, its tiles and
// segments, clock64 at its start and end (g_s8_cta: the mean SM clock over the call); CTA (0, 0)'s segment boundaries
// (g_s8_seg: start, Q ready, last step done, o stored).
#ifdef HELIX_SS_TRACE
__device__ long long g_s8_cta[6][kMaxParts];
__device__ long long g_s8_seg[4][16];
__device__ __forceinline__ long long GlobalNs() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define S8_CTA(ev, v)                                                                                    \
  do {                                                                                                   \
    if (threadIdx.x == 0 && blockIdx.y == 0) g_s8_cta[ev][blockIdx.x] = (v);                             \
  } while (0)
#define S8_SEG(ev, i)                                                                                    \
  do {                                                                                                   \
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && (i) < 16) g_s8_seg[ev][i] = GlobalNs(); \
  } while (0)
#else
#define S8_CTA(ev, v) \
  do {                \
  } while (0)
#define S8_SEG(ev, i) \
  do {                \
  } while (0)
#endif

constexpr int kS8Bufs = 3;                   // raw tiles in the ring
// The running max moves only where a row's tile max exceeds it by more than kS8MaxSlack (log2 units): the softmax does
// not depend on the reference it subtracts, so only rounding changes, and once the max has settled every factor is
// exactly 1 and the PVs skip the rescale of O^T. The largest weight is then 2^(8 + slack) (P x 256), within E4M3's
// 448 = 2^8.81 for slack <= 0.8. (0: the exact running max.)
#ifndef HELIX_S8_MAX_SLACK
#define HELIX_S8_MAX_SLACK 0.75f
#endif
constexpr float kS8MaxSlack = HELIX_S8_MAX_SLACK;
static_assert(kS8MaxSlack >= 0.f && kS8MaxSlack <= 0.8f, "P x 256 must stay within E4M3's 448");
// setmaxnreg budgets (P + 2 C <= kM8RegPool, mla_decode_mid_q8.cuh): the TMA producer needs few; at mla_mid_q8's 40 / 232 the consumers
// spilled 156 / 304 bytes (stores / loads), at 24 / 240 128 / 236 (before the skipped rescale; 52 / 84 now).
constexpr int kS8ProdRegs = 24, kS8ConsRegs = 240;
static_assert(kS8ProdRegs + 2 * kS8ConsRegs <= kM8RegPool, "setmaxnreg budgets exceed what the producer gives back");
constexpr int kS8PBytes = kM8Rows * 128;     // one P^T [64 rows x 128 B], 128-byte swizzle (tokens at logical bytes 0..63)
// P^T and the running stats rotate over four tiles: the owner of tile j rewrites tile j - 4's buffer, whose readers (both
// consumers' PVs) finished long before; with two, its softmax waited for the other consumer's PV of tile j - 2.
constexpr int kS8PBufs = 4;
struct S8Bars {
  uint64_t full[kS8Bufs][5];  // as Q8BarsT (Q8ProduceSegment)
  uint64_t empty[kS8Bufs];    // 256: every consumer thread after its V^T loads of the tile (the owner's S retired before)
  uint64_t pfull[kS8PBufs];   // by tile % 4, 128: the owner's threads wrote P^T, sM / sL / sA / sE
  uint64_t pempty[kS8PBufs];  // by tile % 4, 256: both consumers' PV of the tile retired (and the segment end read sM)
};
// Ring, E4M3 Q [hi 64 rows; lo 64 rows], P^T x 4, sM / sL / sA / sE [4][64], Q row factors [64], row bounds [64], barriers.
constexpr int kS8SmemBytes = kS8Bufs * kQ8TileBytes + kM8QBytes + kS8PBufs * kS8PBytes + 4 * kS8PBufs * kM8Rows * 4 + 2 * kM8Rows * 4 +
                             (int)sizeof(S8Bars) + 1024;
static_assert(kS8SmemBytes <= 227 * 1024, "mla_mid_q8s exceeds the opt-in shared memory");

// Each of four values summed over the 4 lanes of a quad (a softmax row's 16 tokens per thread x 4 threads).
__device__ __forceinline__ void QuadSum4(float& a, float& b, float& c, float& d) {
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
    c += __shfl_xor_sync(0xffffffffu, c, off);
    d += __shfl_xor_sync(0xffffffffu, d, off);
  }
}

// Byte offset of (query row q, logical k position t) in a P^T buffer (B operand of PV: K-major, 128-byte swizzle; a k32
// step reads 32 bytes of each row). PV's k order is V^T's (ldmatrix.trans, see pv): in each 16 tokens, logical 4 c + j
// holds token 2 c + (j & 1) + 8 (j >> 1), so the softmax's tokens 8 n8 + 2 c4 + {0, 1} of n8 = 2 m, 2 m + 1 are the four
// bytes at logical 16 m + 4 c4 (S8PtPos).
__device__ __forceinline__ int S8PtOff(int q, int t) { return q * 128 + (((t >> 4) ^ (q & 7)) << 4) + (t & 15); }
__device__ __forceinline__ int S8PtPos(int t) { return (t & ~15) + 4 * ((t >> 1) & 3) + 2 * ((t >> 3) & 1) + (t & 1); }

// D[64 x 64] = A[64 x 32] * B[32 x 64], E4M3 from shared memory, no accumulation: D is an output only, so no
// instruction zeroes it before (zeroing accumulators with ordinary instructions while another wgmma group is in flight
// is one of ptxas's reasons to serialise, C7515).
__device__ __forceinline__ void Wgmma_m64n64k32_e4m3_first(float (&d)[8][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n"
      "}\n"
      : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3])
      : "l"(da), "l"(db), "r"(0));
}

// S's wgmmas on block c of a raw tile at `base` (B: tokens) against E4M3 Q term `term` at q8a (A: query rows; 0 hi, 1 lo);
// first: the tile's first step (overwrites s).
__device__ __forceinline__ void S8Block(float (&s)[8][4], uint32_t base, uint32_t q8a, int c, int term, bool first = false) {
  // Descriptors of the two bases, moved on per step by DescAdd (one add each, see mla_decode_cuda.cu).
  if (c < 4) {
    const uint64_t dq = Desc(q8a, 16, 1024), dk = Desc(base, 16, 1024);
    const uint32_t qo = c * (kM8QRows * 128) + term * (kM8Rows * 128), ko = c * (kTokTile * 128);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      if (first && kk == 0)
        Wgmma_m64n64k32_e4m3_first(s, DescAdd(dq, qo), DescAdd(dk, ko));
      else
        Wgmma_m64n64k32_e4m3(s, DescAdd(dq, qo + kk * 32), DescAdd(dk, ko + kk * 32));
  } else {
    const uint64_t dq = Desc64(q8a), dk = Desc64(base);
    const uint32_t qo = 4 * (kM8QRows * 128) + term * (kM8Rows * 64), ko = 4 * (kTokTile * 128);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) Wgmma_m64n64k32_e4m3(s, DescAdd(dq, qo + kk * 32), DescAdd(dk, ko + kk * 32));
  }
}

// D[64 x 32] = A[64 x 32] * B[32 x 32], E4M3 from shared memory, no accumulation (the chains' first step, as
// Wgmma_m64n64k32_e4m3_first; the others accumulate with mla_decode_cuda.cu's Wgmma_m64n32k32_e4m3).
__device__ __forceinline__ void Wgmma_m64n32k32_e4m3_first(float (&d)[4][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n"
      "}\n"
      : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3])
      : "l"(da), "l"(db), "r"(0));
}

// Variant 512's S chain: tokens 32 h .. 32 h + 31 of a raw tile at `base` against both Q terms, lo first, over latent
// blocks c0 .. c1 - 1 (c1 == 4: with the rope block), into a fresh accumulator.
template <int kTerms = 2>
__device__ __forceinline__ void S8HalfChain(float (&t)[4][4], uint32_t base, uint32_t q8a, int c0, int c1, int h) {
  const uint32_t tb = base + h * (32 * 128), rb = base + 4 * (kTokTile * 128) + h * (32 * 64);
#pragma unroll
  for (int term = kTerms - 1; term >= 0; --term) {
#pragma unroll
    for (int c = c0; c < c1; ++c)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t da = Desc(q8a + c * (kM8QRows * 128) + term * (kM8Rows * 128) + kk * 32, 16, 1024),
                       db = Desc(tb + c * (kTokTile * 128) + kk * 32, 16, 1024);
        if (term == kTerms - 1 && c == c0 && kk == 0) Wgmma_m64n32k32_e4m3_first(t, da, db);
        else Wgmma_m64n32k32_e4m3(t, da, db);
      }
    if (c1 == 4)
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
        Wgmma_m64n32k32_e4m3(t, Desc64(q8a + 4 * (kM8QRows * 128) + term * (kM8Rows * 64) + kk * 32),
                                    Desc64(rb + kk * 32));
  }
}

// D[64 x 64] += A[64 x 32] * B[32 x 64], E4M3, A from registers (4 bytes of consecutive k per register).
__device__ __forceinline__ void Wgmma_m64n64k32_e4m3_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

template <bool kBf16, bool kTma, int kVar = 0>
__global__ void __launch_bounds__(384, 1) mla_mid_q8s(Params p, Sched s, QParams qp, const __grid_constant__ Q8Maps maps) {
  // kVar bit 16 (HELIX_MLA_DECODE_FP8_Q=one): S on the hi term of Q alone, i.e. Q rounded once to E4M3 per row.
  constexpr bool kOneTerm = (kVar & 65536) != 0;
  PlanThisPart(p, s);  // first: waits for the inputs (PDL); ptxas spilled more with anything live across it
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  unsigned char* ring = smem;                               // 1024-aligned tiles (36 KB each)
  unsigned char* sQ8 = ring + kS8Bufs * kQ8TileBytes;       // [128 rows x 576 B] Q8Off layout: hi rows 0..63, lo 64..127
  unsigned char* sP = sQ8 + kM8QBytes;                      // [tile % 4][64 rows x 128 B]
  float* sM = reinterpret_cast<float*>(sP + kS8PBufs * kS8PBytes);  // [4][64] running max after the tile (log2 units)
  float* sL = sM + kS8PBufs * kM8Rows;                      // [4][64] running row sums of the rounded weights (x 256)
  float* sA = sL + kS8PBufs * kM8Rows;                      // [4][64] the tile's factor for the earlier tiles
  float* sE = sA + kS8PBufs * kM8Rows;                      // the same of the unrounded weights: the lse
  float* sQs = sE + kS8PBufs * kM8Rows;                     // [64] 1 / s_r
  int* sBq = reinterpret_cast<int*>(sQs + kM8Rows);         // [64] the segment's row bounds (0: padding)
  S8Bars* bars = reinterpret_cast<S8Bars*>(sBq + kM8Rows);

  if (threadIdx.x == 0) {
    for (int b = 0; b < kS8Bufs; ++b) {
      for (int c = 0; c < 5; ++c) MbarInit(&bars->full[b][c], 1);
      MbarInit(&bars->empty[b], 256);
    }
    for (int i = 0; i < kS8PBufs; ++i) {
      MbarInit(&bars->pfull[i], 128);
      MbarInit(&bars->pempty[i], 256);
    }
  }
  __syncthreads();

  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  const int2 range = PartRange(p, s);  // written by PlanThisPart

  if (wg == 2) {  // producer: raw KV tiles of every segment, in order (as mla_mid_q8)
    M8Producer<kS8Bufs, kTma, kVar, kS8ProdRegs>(ring, bars->full, bars->empty, maps, p, s, qp, range);
    return;
  }

  // ---------------- consumers: w owns the even (w = 0) / odd tiles' S and softmax, and latent dims 256 w .. (O^T) ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kS8ConsRegs));
  const int w = wg, lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3, ct = threadIdx.x;
  const int g = lane >> 2, c4 = lane & 3;
  const int r0 = 16 * wi + g, r1 = r0 + 8;  // this thread's query rows of S (rows as M)
  const uint32_t q8a = SmemAddr(sQ8), ring_a = SmemAddr(ring), p_a = SmemAddr(sP);
  const float out_mul = __frcp_rn(__ldg(qp.kv_scale)), sl2 = p.scale_log2 * out_mul;
  int kbase = 0;
  bool first_seg = true;
  S8_CTA(0, GlobalNs());
  S8_CTA(4, clock64());
  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[SegRow(p) + si];
    const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y, len = SeqLen(p.bounds, b, p.G, p.cap);
    S8_SEG(0, si - range.x);
    if (n <= 0) {
      if (w == 0 && wi == 0 && lane < 4 && blockIdx.y == 0) SmEmptyPartial(p, si, lane);  // (all G*H rows)
      continue;
    }
    if constexpr ((kVar & 2) != 0) {  // probe: the producer alone (wait for each tile, release it)
      for (int j = 0; j < n; ++j) {
        const int kg = kbase + j, buf = kg % kS8Bufs, ph = (kg / kS8Bufs) & 1;
        for (int c = 0; c < 5; ++c) MbarWait(&bars->full[buf][c], ph);
        MbarArrive(&bars->empty[buf]);
      }
      kbase += n;
      continue;
    }
    if (!first_seg) NamedBarSync(4, 256);  // both consumers' wgmmas of the previous segment (readers of sQ8) retired
    first_seg = false;
    // hi rows 0..63, lo 64..127 (not written with one term: S reads the hi rows alone), one scale
    M8QFromGlobal<kBf16, true, !kOneTerm>(sQ8, sQs, p, b, ct);
    if (ct < kM8Rows) sBq[ct] = M8RowBound(p, b, ct);
    FenceProxyAsync();     // E4M3 Q (generic stores) -> wgmma
    NamedBarSync(4, 256);
    S8_SEG(1, si - range.x);
    float oacc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int n8 = 0; n8 < 8; ++n8) oacc[i][n8][0] = oacc[i][n8][1] = oacc[i][n8][2] = oacc[i][n8][3] = 0.f;
    // (Sessions 25-26 kept each thread's partial row sums in registers across its consumer's tiles, added once at the
    // segment end: 3-4.5 % then; with the ldmatrix V^T the registers it held made ptxas spill, and without it the
    // two-term fast chain runs 4-7.5 % and the one-term 0.6 % faster, session 27: the running sums go through sL / sE.)

    // PV of tile kg (both consumers, in tile order): O^T *= the tile's factors, += V^T P^T. The caller has retired this
    // consumer's earlier PV (O^T is not in flight).
    auto pv = [&](int kg) {
      const int par = kg & (kS8PBufs - 1);
      // The rescale is skipped when no row's max moved in this tile (every factor exactly 1: exp2f(0)); the 64 factors
      // are the same for every warp of the consumer, so the branch is uniform.
      float al[8][2];
      bool one = true;
#pragma unroll
      for (int n8 = 0; n8 < 8; ++n8) {
        al[n8][0] = sA[par * kM8Rows + n8 * 8 + c4 * 2];
        al[n8][1] = sA[par * kM8Rows + n8 * 8 + c4 * 2 + 1];
        one = one && al[n8][0] == 1.f && al[n8][1] == 1.f;
      }
      if (!__all_sync(0xffffffffu, one)) {
#pragma unroll
        for (int n8 = 0; n8 < 8; ++n8)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            oacc[i][n8][0] *= al[n8][0], oacc[i][n8][1] *= al[n8][1], oacc[i][n8][2] *= al[n8][0], oacc[i][n8][3] *= al[n8][1];
      }
      const int buf = kg % kS8Bufs, ph = (kg / kS8Bufs) & 1;
      MbarWait(&bars->full[buf][2 * w], ph);  // (passed already by the owner; the other consumer reads the bytes too)
      MbarWait(&bars->full[buf][2 * w + 1], ph);
      uint32_t a[2][4][4];  // [k32 step][m-block][register]
      // V^T of this warp's 64 latent dims (16-byte units 4 (wi & 1) + i of block 2 w + wi / 2) by ldmatrix.trans: matrix m
      // of k32 step kk is tokens 32 kk + 8 m .. + 7 of unit i, so a lane gets the b16 pair (dims 2 g, 2 g + 1) of tokens
      // 2 c4, 2 c4 + 1 of each; two byte permutes per matrix pair give rows g (dim 2 g) and g + 8 (dim 2 g + 1) at k
      // 4 c4 .. 4 c4 + 3 = tokens 2 c4, 2 c4 + 1, 8 + 2 c4, 9 + 2 c4 (P^T is written in that order: S8PtPos). Half the
      // instructions of 8-byte loads and 4 x 4 byte transposes (8 LDSM + 32 PRMT per tile and thread, was 16 + 64).
      const uint32_t vt_a = ring_a + buf * kQ8TileBytes + (2 * w + (wi >> 1)) * (kTokTile * 128) + lane * 128;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint32_t r[4];
          Ldsm4TAddr(r, vt_a + kk * (32 * 128) + (((4 * (wi & 1) + i) ^ (lane & 7)) << 4));
          a[kk][i][0] = Prmt(r[0], r[1], 0x6420u);
          a[kk][i][1] = Prmt(r[0], r[1], 0x7531u);
          a[kk][i][2] = Prmt(r[2], r[3], 0x6420u);
          a[kk][i][3] = Prmt(r[2], r[3], 0x7531u);
        }
      if constexpr ((kVar & 32768) != 0) {  // alternative register order: reg 1 = (row g, k + 16), reg 2 = (row g + 8, k)
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t t1 = a[kk][i][1];
            a[kk][i][1] = a[kk][i][2];
            a[kk][i][2] = t1;
          }
      }
      FenceAcc(oacc);
      WgFence();
      const uint32_t pta = p_a + par * kS8PBytes;
      const uint64_t dpt = Desc(pta, 16, 1024);
      // Variant 512 keeps the descriptor rebuilt per step: moved on by DescAdd, ptxas spilled one more register there and
      // its case (two terms, H=128 G=1) ran 2 % slower; the other variants gained 1-2.6 % (NOTES, session 32).
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          Wgmma_m64n64k32_e4m3_rs(oacc[i], a[kk][i], (kVar & 512) ? Desc(pta + 32 * kk, 16, 1024) : DescAdd(dpt, 32 * kk));
      WgCommit();
      // This thread's reads of the tile are done; released after the PV issue, where the wgmmas consumed the loaded
      // registers, so the fence waits for nothing (before it: 2-3.5 % slower, session 17).
      ReleaseAfterLoads(&bars->empty[buf]);
    };

    // Softmax of the owner's tile kg (S in sacc, retired): rows r0 / r1, log2 units; continues tile kg - 1's max / sum
    // (first: the segment's first tile); writes P^T, sM / sL / sA / sE of kg and arrives on pfull.
    auto softmax = [&](float (&sacc)[8][4], int kg, int t0, bool first) {
      const int par = kg & (kS8PBufs - 1), pp = (kg - 1) & (kS8PBufs - 1);
      const float f0 = sl2 * sQs[r0], f1 = sl2 * sQs[r1];
      const int b0 = sBq[r0], b1 = sBq[r1];
      // The max on the raw logits (f0, f1 > 0: softmax_scale > 0 is checked by the API), the factor folded into each
      // exponent's FMA below; the bound compares only where the tile crosses a bound of the warp (the bf16 seesaw's
      // session-22 form, attempt 45).
      float mx0, mx1;
      MaskedRowMax(sacc, t0, lane, b0, b1, mx0, mx1);
      mx0 *= f0;
      mx1 *= f1;
      const float mp0 = first ? -INFINITY : sM[pp * kM8Rows + r0], mp1 = first ? -INFINITY : sM[pp * kM8Rows + r1];
      // the running sums of tile kg - 1
      const float lp0 = first ? 0.f : sL[pp * kM8Rows + r0], lp1 = first ? 0.f : sL[pp * kM8Rows + r1];
      const float ep0 = first ? 0.f : sE[pp * kM8Rows + r0], ep1 = first ? 0.f : sE[pp * kM8Rows + r1];
      // (mp = -inf: mn = mx; a row with no token below its bound keeps -inf)
      const float mn0 = mx0 > mp0 + kS8MaxSlack ? mx0 : mp0, mn1 = mx1 > mp1 + kS8MaxSlack ? mx1 : mp1;
      const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
      const float al0 = exp2f(mp0 - mu0), al1 = exp2f(mp1 - mu1);
      const float mq0 = mu0 - 8.f, mq1 = mu1 - 8.f;  // P x 256 (E4M3's normal range covers 2^-6 .. 448)
      if (kg >= kS8PBufs) MbarWait(&bars->pempty[par], ((kg / kS8PBufs) - 1) & 1);  // both consumers' PV of tile kg - 4 retired
      unsigned char* pt = sP + par * kS8PBytes;
      float sum0 = 0.f, sum1 = 0.f, ex0 = 0.f, ex1 = 0.f;
      // The rounded weights' sum normalises o (a convex combination of the V rows); the unrounded weights' sum gives the
      // lse, which then carries no E4M3 rounding (a numpy model of it: up to 1.9e-2 on the lse of a row with a few
      // dominant tokens).
      // Two tokens' weights: the unrounded pair added to ex; returns their E4M3 codes (lower byte: x0's) and sets h2 to
      // the codes as f16x2 (exact).
      auto code = [&](float x0, float x1, float f, float mq, float& ex, uint32_t& h2) -> uint32_t {
        const float pa = exp2f(fmaf(x0, f, -mq)), pb = exp2f(fmaf(x1, f, -mq));
        ex += pa + pb;
        const uint32_t hi = F32x2ToE4m3(pa, pb);
        h2 = Fp8x2ToT<false>(hi);
        return hi;
      };
      // (the quantized weights in f32: o stays a convex combination of the V rows)
      auto put = [&](int q, int t, float x0, float x1, float f, float mq, float& ex) -> float {
        uint32_t h2;
        const uint32_t hi = code(x0, x1, f, mq, ex, h2);
        const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&h2));
        *reinterpret_cast<uint16_t*>(pt + S8PtOff(q, S8PtPos(t))) = (uint16_t)hi;
        return h.x + h.y;
      };
#pragma unroll
      for (int n8 = 0; n8 < 8; ++n8) {
        const int t = 8 * n8 + 2 * c4;
        sum0 += put(r0, t, sacc[n8][0], sacc[n8][1], f0, mq0, ex0);
        sum1 += put(r1, t, sacc[n8][2], sacc[n8][3], f1, mq1, ex1);
      }
      QuadSum4(sum0, sum1, ex0, ex1);
      if (c4 == 0) {
        sM[par * kM8Rows + r0] = mn0, sL[par * kM8Rows + r0] = lp0 * al0 + sum0, sA[par * kM8Rows + r0] = al0;
        sM[par * kM8Rows + r1] = mn1, sL[par * kM8Rows + r1] = lp1 * al1 + sum1, sA[par * kM8Rows + r1] = al1;
        sE[par * kM8Rows + r0] = ep0 * al0 + ex0, sE[par * kM8Rows + r1] = ep1 * al1 + ex1;
      }
      FenceProxyAsync();  // P^T stores -> both consumers' wgmmas
      MbarArrive(&bars->pfull[par]);
    };

    // Consumer w, step j: S of its own tile j (kOwn), issued behind this consumer's PV of tile j - 2; its softmax as
    // soon as tile j - 1's owner published its max and sum (kOth: tile j - 1 is the other consumer's); then the PVs of
    // tiles j - 1 and j. The softmaxes chain across the consumers (each continues the other's running max). Compile-time
    // flags, not branches around wgmmas: ptxas serialises wgmmas whose accumulators meet at a control-flow merge
    // (mla_decode_seesaw.cuh). Accumulators are touched only after a wait_group 0: with a wait_group 1 spanning steps
    // ptxas serialised every wgmma of the kernel (C7514), and with an S issued in one step and consumed in the next (its
    // accumulators in flight across the loop) it serialised too (C7515).
    auto step = [&](int j, auto own_tag, auto oth_tag) {
      constexpr bool kOwn = decltype(own_tag)::value, kOth = decltype(oth_tag)::value;
      const int kg = kbase + j;
      S8_TRACE(kS8TrStep, kg);
      float sacc[8][4];
      if constexpr (kOwn) {
        const int buf = kg % kS8Bufs, ph = (kg / kS8Bufs) & 1;
        const uint32_t base = ring_a + buf * kQ8TileBytes;
        // A tile TMA wrote whole needs no proxy fence before the wgmmas read it (async-proxy writes, ordered by the full
        // barrier's transaction count); only cp.async tiles (the cp.async kernels', and a sequence's partial last tile
        // in the TMA kernels: Q8ProduceSegment) are generic-proxy writes. The fast chains skip it there (session 28:
        // +1.4 % two terms, +2.5-3.2 % one term; the bf16 seesaw's attempt 46); variant 512's f32 chains keep it (4.5 %
        // slower without: more spills).
        const bool gen = !kTma || (kVar & 512) != 0 || !WholeTile((blk0 + j) * kTokTile, len);
        // The lo term first: the fp8 tensor cores keep ~14 bits of each step's largest magnitude, so the lo products,
        // ~2^-4 of the hi ones, accumulate at their own scale and the chain's error is the 18 hi steps' (as mla_mid_q8's
        // separate hi / lo columns); interleaving the terms doubled the lse error on full-range codes (5.4e-2 vs 2.9e-2).
        if constexpr ((kVar & 512) != 0) {
          // Variant 512 (HELIX_MLA_DECODE_FP8_S=f32): per 32-token half, four chains (latent blocks 0, 1, 2, then 3 with
          // the rope), each in a fresh 16-register accumulator (lo term first) and added in f32 once retired: each chain's
          // truncation is relative to its own 128-192 features' sum. The first half's sums wait in this tile's P^T buffer
          // (free: both consumers' PV of tile j - 4 retired; thread-private words) so S stays at 32 live registers plus
          // the chain's 16. (Chains over all 64 tokens, or both halves' sums in registers, made ptxas serialise every
          // wgmma for lack of registers, C7512.)
          // kVar bit 10 (standalone probe): two chains per half (latent blocks 0-1, then 2-3 with the rope).
          constexpr int kChains = (kVar & 1024) != 0 ? 2 : 4, kPer = 4 / kChains;
          const int par = kg & (kS8PBufs - 1);
          if (kg >= kS8PBufs) MbarWait(&bars->pempty[par], ((kg / kS8PBufs) - 1) & 1);
          float* scratch = reinterpret_cast<float*>(sP + par * kS8PBytes) + (ct & 127);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float acc[4][4];
#pragma unroll
            for (int c = 0; c < kChains; ++c) {
              float t[4][4];
              if (h == 0) {
#pragma unroll
                for (int cb = kPer * c; cb < kPer * (c + 1); ++cb) MbarWait(&bars->full[buf][cb], ph);
                if (c == kChains - 1) MbarWait(&bars->full[buf][4], ph);
                if (gen) FenceProxyAsync();  // cp.async-filled tiles (generic writes) -> wgmma reads
              }
              WgFence();
              S8HalfChain<kOneTerm ? 1 : 2>(t, base, q8a, kPer * c, kPer * (c + 1), h);
              WgCommit();
              WgWait0();  // (the first also retires this consumer's PV of tile j - 2)
              FenceRegs(t);
#pragma unroll
              for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][e] = c == 0 ? t[i][e] : acc[i][e] + t[i][e];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                if (h == 0) scratch[(4 * i + e) * 128] = acc[i][e];
                else sacc[4 + i][e] = acc[i][e];
              }
          }
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[i][e] = scratch[(4 * i + e) * 128];
          NamedBarSync(1 + w, 128);  // every warp of the consumer read its sums before any writes P^T over them
        } else {
#pragma unroll
          for (int c = 0; c < 5; ++c) {
            MbarWait(&bars->full[buf][c], ph);
            if (c == 4) S8_TRACE(kS8TrLast, kg);
            if (gen) FenceProxyAsync();  // cp.async-filled tiles (generic writes) -> wgmma reads
            WgFence();  // (ptxas injects one after each block's barrier wait anyway when only the first has it: C7519)
            S8Block(sacc, base, q8a, c, kOneTerm ? 0 : 1, c == 0);  // (the first step overwrites sacc)
          }
          if constexpr (!kOneTerm) {
#pragma unroll
            for (int c = 0; c < 5; ++c) S8Block(sacc, base, q8a, c, 0);
          }
          WgCommit();
          S8_TRACE(kS8TrSIss, kg);
        }
      }
      if constexpr (kOth) MbarWait(&bars->pfull[(kg - 1) & (kS8PBufs - 1)], ((kg - 1) / kS8PBufs) & 1);  // tile j - 1's P, max, sum
      S8_TRACE(kS8TrOthP, kg);
      WgWait0();  // S of tile j and this consumer's PV of tile j - 2
      S8_TRACE(kS8TrSDone, kg);
      FenceAcc(oacc);
      if (j >= 2) MbarArrive(&bars->pempty[(kg - 2) & (kS8PBufs - 1)]);
      if constexpr (kOwn) {
        FenceRegs(sacc);
        softmax(sacc, kg, (blk0 + j) * kTokTile, j == 0);
        S8_TRACE(kS8TrSmax, kg);
      }
      if constexpr (kOth) {
        pv(kg - 1);
        S8_TRACE(kS8TrPv1Iss, kg);
        if constexpr (kOwn) {
          // O^T is rescaled for tile j next. (Issuing both PVs as one group where tile j's factors are all 1 needs both
          // tiles' V^T in registers before the group, ptxas serialises every wgmma otherwise (C7513: an A register
          // written between the wgmmas of a group), and with both it runs out of registers (C7512); session 28.)
          WgWait0();
          S8_TRACE(kS8TrPv1Done, kg);
          FenceAcc(oacc);
          MbarArrive(&bars->pempty[(kg - 1) & (kS8PBufs - 1)]);
        }
      }
      if constexpr (kOwn) {
        MbarWait(&bars->pfull[kg & (kS8PBufs - 1)], (kg / kS8PBufs) & 1);  // all of this consumer's warps wrote P^T
        pv(kg);
        S8_TRACE(kS8TrPv2Iss, kg);
      }
    };
    int j = w;
    if (w == 0) {  // tile 0: no predecessor
      step(0, std::true_type{}, std::false_type{});
      j = 2;
    }
    for (; j < n; j += 2) step(j, std::true_type{}, std::true_type{});
    if (j == n) step(n, std::false_type{}, std::true_type{});  // the segment's last tile is the other consumer's
    // Segment end: every row's L and max from the last tile's owner; o for this consumer's dims.
    S8_SEG(2, si - range.x);
    WgWait0();
    FenceAcc(oacc);
    const int kl = kbase + n - 1, lp = kl & (kS8PBufs - 1);  // both consumers waited on pfull of tile kl for their PV
    if (w == 0 && wi == 0 && g == 0)
#pragma unroll
      for (int n8 = 0; n8 < 8; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = n8 * 8 + c4 * 2 + e;
          // (> 0 exactly where the rounded sum is: the largest weight, 256 .. 2^(8 + slack), is a normal E4M3 value)
          const float E = sE[lp * kM8Rows + q];
          const int gq = M8Row0() + q;
          if (gq < p.GH) p.lse_part[(long long)si * p.GH + gq] = E > 0.f ? (sM[lp * kM8Rows + q] + __log2f(E) - 8.f) * kLn2 : -INFINITY;
        }
    // o normalised by the rounded weights' sum
    M8StoreOT<kBf16, true>(p, si, oacc, sL + lp * kM8Rows, out_mul, w, wi, g, c4);
    MbarArrive(&bars->pempty[lp]);  // this consumer's PV of tile kl retired and its sM / sL / sE read
    S8_SEG(3, si - range.x);
    kbase += n;
  }
  S8_CTA(1, GlobalNs());
  S8_CTA(5, clock64());
  S8_CTA(2, kbase);
  S8_CTA(3, range.y - range.x);
}

}  // namespace
}  // namespace helix_ffi
