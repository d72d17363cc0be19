// FP8 pages, G*H > 16 query rows, 64 per CTA (HELIX_MLA_DECODE_MID8=lockstep): mla_mid_q8. The spec-verify
// shape (H = 16 heads, 1 + 3 draft tokens) lives here; the 64-row producer-dequantizing kernel it replaces ran at 0.58x the
// bf16 kernel (B=64, H=16, G=4, L=64K on the H200). Included by mla_decode_cuda.cu after mla_decode_small_q8.cuh (reuses
// its raw-tile layout, two-term Q, S blocks and producer loop).
//
// As mla_small_q8, the 64 tokens of a raw E4M3 tile are the wgmma M dimension; mla_small_q8's layout cannot just grow N:
// each of its consumers keeps all 512 latent dims of O^T for its own tiles (N = 64: 256 registers per thread). Here both
// consumer warpgroups take every tile and split the work:
//   S^T[64 tok, 32 rows] = K [Q_hi; Q_lo]^T for consumer w's query rows 32 w .. 32 w + 31 (two E4M3 terms: N = 64,
//       18 x m64n64k32), then the column softmax of those rows (max over the 64 tokens through a 4-warp exchange);
//   each consumer writes its rows of P^T (f16) and their rescale factors to shared memory, one 256-thread barrier;
//   O^T[256 dims, 64 rows] for consumer w's latent dims 256 w .. 256 w + 255 (4 m-blocks x N = 64: 128 registers),
//       rescaled by all 64 rows' factors, += V^T P^T with A = V^T from registers (8 bytes per token and thread, E4M3 ->
//       f16 by cvt; 16 x m64n64k16 RS), B = the whole P^T [64 rows x 64 tokens].
// The wgmma M rows of O^T are permuted so a thread's 8 bytes per token cover its rows of the 4 m-blocks: row
// r (= 16 * warp + lane / 4 + 8h) of m-block i holds latent dim 256 w + 64 * warp + 8 * (lane / 4) + 2i + h.
// No alternation, no two-consumer merge: the ring holds kM8Bufs raw tiles, each released when both consumers have read
// it. P^T and the factors are double-buffered by tile parity (consumer w writes tile j + 2's into tile j's buffer only
// after the barrier of tile j + 1, which the other consumer reaches after its PV of tile j retired).
// Q: both consumers convert the segment's 64 rows to two E4M3 terms at the segment start (straight from global memory,
// 9 chunks of a row in registers; there is no room to stage a 16-bit Q), so the producer streams tiles ahead across
// segment boundaries. Logit factors as mla_small_q8: scale * log2(e) / kv_scale times 1 / s_hi (hi half of the
// accumulator columns) and 1 / (s_hi s_lo) (lo half); the output takes 1 / kv_scale.
// Per tile and SM: S 18 x 2 (consumers) x 32 smem-bound cycles + PV 16 x 2 x 32 tensor cycles ~ 2200 cycles, near the
// ~2000 cycles of fp8 bytes at 4.3 TB/s: the two products of a tile are not overlapped with the next tile's.
#pragma once

namespace helix_ffi {
namespace {

constexpr int kM8Rows = 64;                 // query rows of the tile (G*H padded); more rows: one CTA per 64 (grid y)
constexpr int kM8Bufs = 3;                  // raw tiles in the ring (any count: both consumers read every tile)
constexpr int kM8QRows = 2 * kM8Rows;       // E4M3 Q rows: consumer w's B operand = rows 64 w .. 64 w + 63 = [hi 32; lo 32]
constexpr int kM8QBytes = kM8QRows * kD;    // 73728
constexpr int kM8PTElems = kM8Rows * kTokTile;  // one P^T [64 rows x 64 tokens], f16, 128-byte swizzle (8 KB)
// setmaxnreg budgets: the producer (TMA issue, cp.async for partial tiles) and two consumers. The 384-thread CTA starts
// at 168 registers per thread (64 K / 384, in steps of 8), and setmaxnreg.inc takes only what the CTA's own .dec gave
// back (the PTX ISA's per-CTA pool): 128 (168 - P) >= 256 (C - 168), i.e. P + 2 C <= 504 (kM8RegPool). Past it the
// consumers' increase waits forever (session 26: a 64 / 224 split hung every launch).
constexpr int kM8RegPool = 3 * 168;
// One PV step (16 tokens: 16 fragment registers) in flight per consumer, plus the next step's raw bytes (8): ptxas reports
// 16 bytes of spill at 232 (0 without the raw-byte prefetch, which is 2-3 % faster anyway); two steps in flight spilled
// ~90 bytes and ran 1-3 % slower (benchmarks/NOTES.md session 11).
constexpr int kM8ProdRegs = 40, kM8ConsRegs = 232;
static_assert(kM8ProdRegs + 2 * kM8ConsRegs <= kM8RegPool, "setmaxnreg budgets exceed what the producer gives back");
using M8Bars = Q8BarsT<kM8Bufs>;
// Ring, E4M3 Q, P^T x 2, softmax exchange [2 consumers][4 warps][32 rows], factors [2][64], Q row factors [128],
// segment-end L [64], row bounds [64], barriers.
constexpr int kM8SmemBytes = kM8Bufs * kQ8TileBytes + kM8QBytes + 2 * kM8PTElems * 2 + 2 * 4 * 32 * 4 + 2 * kM8Rows * 4 +
                             kM8QRows * 4 + 2 * kM8Rows * 4 + (int)sizeof(M8Bars) + 1024;
static_assert(kM8SmemBytes <= 227 * 1024, "mla_mid_q8 exceeds the opt-in shared memory");

// The CTA's first query row: row tile blockIdx.y (G*H > 64 runs ceil(G*H / 64) row tiles, each with its own Q, reading
// the same KV tiles; their partials share the segment numbering, so the combine is unchanged).
__device__ __forceinline__ int M8Row0() { return blockIdx.y * kM8Rows; }
// Clamped bound of the CTA's query row ct (< 64) of sequence b; 0 for padding rows (row0 + ct >= G*H).
__device__ __forceinline__ int M8RowBound(const Params& p, int b, int ct) {
  const int q = M8Row0() + ct;
  return q < p.GH ? min(max(p.bounds[b * p.G + q / p.H], 0), p.cap) : 0;
}

// Element offset of (query row q, token t) in a P^T buffer (B operand of PV: K-major, 128-byte swizzle).
__device__ __forceinline__ int M8PtOff(int q, int t) { return q * kTokTile + ((((t >> 3) ^ (q & 7))) << 3) + (t & 7); }

// The segment's Q (sequence b, the CTA's row tile; rows >= G*H zero) -> sQ8 / sQs by the 256 consumer threads (ct = 0..255): 8 threads per
// row, rows ct / 8 and 32 + ct / 8. Both rows' 18 chunk loads are issued before any arithmetic (one L2 round trip).
// mla_mid_q8 (kOneScale false): query row r goes to Q8 rows 64 (r / 32) + r % 32 (hi) and + 32 (lo); sQs[r] = 1 / s_hi,
// sQs[64 + r] = 1 / (s_hi s_lo). mla_mid_q8s (kOneScale true): hi row r, lo row 64 + r, one scale: sQs[r] = 1 / s_r
// (kLo false: the hi rows alone).
template <bool kBf16, bool kOneScale = false, bool kLo = true>
__device__ __forceinline__ void M8QFromGlobal(unsigned char* sQ8, float* sQs, const Params& p, int b, int ct) {
  const int part = ct & 7;
  uint4 v[2][9];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = M8Row0() + (ct >> 3) + 32 * h;
#pragma unroll
    for (int i = 0; i < 9; ++i)
      v[h][i] = r < p.GH ? __ldg(reinterpret_cast<const uint4*>(QChunk(p, (long long)b * p.GH + r, part + 8 * i)))
                         : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = (ct >> 3) + 32 * h;
    if constexpr (kOneScale) {
      Q8RowTerms<kBf16, kM8QRows, true, true, kLo>(sQ8, r, kM8Rows + r, sQs + r, nullptr, part, [&](int i) { return v[h][i]; });
    } else {
      const int hi = 64 * h + (ct >> 3);  // r / 32 = h, r % 32 = ct / 8
      Q8RowTerms<kBf16, kM8QRows, true>(sQ8, hi, hi + 32, sQs + r, sQs + kM8Rows + r, part, [&](int i) { return v[h][i]; });
    }
  }
}

// Segment end of mla_mid_q8 / mla_mid_q8s: this consumer's latent dims 256 w .. of O^T (4 m-blocks x N = 64, M rows
// permuted: a thread's 8 dims per row) divided by each row's sum rowL[q] (+ rowL2[q] where given: mla_mid_q8s's two
// consumers' sums; q = the CTA's row 0..63) and scaled by out_mul, stored as row M8Row0() + q of segment si's partials;
// rows past G*H are skipped. kPairs (mla_mid_q8s, V^T by ldmatrix): m-block i's rows g / g + 8 are dims 16 i + 2 g + {0, 1}
// of the warp's 64, stored as four 4-byte pairs (each warp store still fills whole 32-byte sectors).
template <bool kBf16, bool kPairs = false>
__device__ __forceinline__ void M8StoreOT(const Params& p, long long si, const float (&oacc)[4][8][4], const float* rowL,
                                          float out_mul, int w, int wi, int g, int c4, const float* rowL2 = nullptr) {
#pragma unroll
  for (int n8 = 0; n8 < 8; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = n8 * 8 + c4 * 2 + e;
      const int gq = M8Row0() + q;
      if (gq >= p.GH) continue;
      const float L = rowL2 != nullptr ? rowL[q] + rowL2[q] : rowL[q], inv = L > 0.f ? out_mul / L : 0.f;
      if constexpr (kPairs) {
        uint16_t* o = p.o_part + (si * p.GH + gq) * kDl + 256 * w + 64 * wi + 2 * g;
#pragma unroll
        for (int i = 0; i < 4; ++i) StPart2<kBf16>(o + 16 * i, oacc[i][n8][e] * inv, oacc[i][n8][2 + e] * inv);
      } else {
        uint16_t* o = p.o_part + (si * p.GH + gq) * kDl + 256 * w + 64 * wi + 8 * g;
        StPart4<kBf16>(o, oacc[0][n8][e] * inv, oacc[0][n8][2 + e] * inv, oacc[1][n8][e] * inv, oacc[1][n8][2 + e] * inv);
        StPart4<kBf16>(o + 4, oacc[2][n8][e] * inv, oacc[2][n8][2 + e] * inv, oacc[3][n8][e] * inv, oacc[3][n8][2 + e] * inv);
      }
    }
}

// The producer warpgroup of mla_mid_q8 / mla_mid_q8s (threads 256..383): gives registers back (kRegs), then the raw KV
// tiles of every segment of the CTA's range into a ring of kBufs tiles, in order (kVar bit 5: L2 evict-first TMA loads).
template <int kBufs, bool kTma, int kVar, int kRegs>
__device__ __forceinline__ void M8Producer(unsigned char* ring, uint64_t (*full)[5], uint64_t* empty, const Q8Maps& maps,
                                           const Params& p, const Sched& s, const QParams& qp, int2 range) {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  const int pt = threadIdx.x - 256;
  uint64_t pol = 0;
  if constexpr ((kVar & 32) != 0) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  if constexpr (kTma) {
    if (pt == 0) {
      PrefetchTensorMap(&maps.lat);
      PrefetchTensorMap(&maps.rope);
    }
  }
  int k = 0;
  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[SegRow(p) + si];
    const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
    if (n <= 0) continue;
    Q8ProduceSegment<kBufs, kTma, kVar>(ring, full, empty, maps, p, qp, b, blk0, n, SeqLen(p.bounds, b, p.G, p.cap), k, pt, pol);
  }
  CpAsyncWaitAll();
}

// kVar: bit 5: TMA loads with an L2 evict-first hint; bit 9: S promoted to f32 per 128-feature block
// (HELIX_MLA_DECODE_FP8_S=f32; see mla_small_q8). Probes of the standalone driver (not correct kernels): bit 0: the producer
// issues no loads (the consumers' math alone); bit 1: the consumers wait for each tile and release it (the producer
// alone); bit 2: V^T fragments without the E4M3 conversion; bit 3: no S wgmma; bit 4: no PV wgmma.
template <bool kBf16, bool kTma, int kVar = 0>
__global__ void __launch_bounds__(384, 1) mla_mid_q8(Params p, Sched s, QParams qp, const __grid_constant__ Q8Maps maps) {
  PlanThisPart(p, s);  // first: waits for the inputs (PDL); ptxas spilled more with anything live across it
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  unsigned char* ring = smem;                                        // 1024-aligned tiles (36 KB each)
  unsigned char* sQ8 = ring + kM8Bufs * kQ8TileBytes;                // [128 rows x 576 B] Q8Off layout
  uint16_t* sPT = reinterpret_cast<uint16_t*>(sQ8 + kM8QBytes);      // [2][64 rows x 64 tokens]
  float* sRed = reinterpret_cast<float*>(sPT + 2 * kM8PTElems);      // [2 consumers][4 warps][32 rows]
  float* sAl = sRed + 2 * 4 * 32;                                    // [2 tile parities][64 rows] rescale factors
  float* sQs = sAl + 2 * kM8Rows;                                    // [128] 1 / s_hi, then 1 / (s_hi s_lo)
  float* sFin = sQs + kM8QRows;                                      // [64] L at a segment end
  int* sBq = reinterpret_cast<int*>(sFin + kM8Rows);                 // [64] the segment's row bounds (0: padding)
  M8Bars* bars = reinterpret_cast<M8Bars*>(sBq + kM8Rows);

  if (threadIdx.x == 0) {
    for (int b = 0; b < kM8Bufs; ++b) {
      for (int c = 0; c < 5; ++c) MbarInit(&bars->full[b][c], 1);
      MbarInit(&bars->empty[b], 256);  // every consumer thread (cp.async-filled tiles: see LaunchMain's note)
    }
  }
  __syncthreads();

  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  const int2 range = PartRange(p, s);  // written by PlanThisPart

  if (wg == 2) {  // producer: raw KV tiles of every segment, in order
    M8Producer<kM8Bufs, kTma, kVar, kM8ProdRegs>(ring, bars->full, bars->empty, maps, p, s, qp, range);
    return;
  }

  // ---------------- consumers: w owns query rows 32 w .. (softmax) and latent dims 256 w .. (O^T) ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kM8ConsRegs));
  const int w = wg, lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3, ct = threadIdx.x;
  const int g = lane >> 2, c4 = lane & 3;
  const int ta = wi * 16 + g, tb = ta + 8;  // this thread's two token rows of S^T
  float* myRed = sRed + w * 128;
  const uint32_t q8w = SmemAddr(sQ8) + 64 * w * 128, ring_a = SmemAddr(ring), pt_a = SmemAddr(sPT);
  // S blocks read consumer w's 64 Q8 rows: latent blocks at row offset 64 w (q8w); the rope block's rows are 64 B apart.
  const uint32_t q8w_rope_fix = 64 * w * 64 - 64 * w * 128;
  // V^T fragments: latent block 2 w + wi / 2, 16-byte unit 4 (wi & 1) + g / 2, half g & 1 of each token row. Tokens
  // 16 kk + 2 c4 + {0, 1} (+ 8); odd c4 reads the odd token first (a half warp then hits 16 distinct 8-byte bank pairs).
  const int first = c4 & 1, vunit = 4 * (wi & 1) + (g >> 1), vhalf = (g & 1) * 8;
  const uint32_t sel_lo = first ? 0x1504u : 0x5140u, sel_hi = first ? 0x3726u : 0x7362u;
  const float out_mul = __frcp_rn(__ldg(qp.kv_scale)), sl2 = p.scale_log2 * out_mul;
  int kbase = 0;
  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[SegRow(p) + si];
    const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
    if (n <= 0) {
      if (w == 0 && wi == 0 && lane < 4 && blockIdx.y == 0) SmEmptyPartial(p, si, lane);  // (all G*H rows)
      continue;
    }
    // The previous segment's wgmmas (readers of sQ8) retired before its end's 256-thread barrier.
    M8QFromGlobal<kBf16>(sQ8, sQs, p, b, ct);
    if (ct < kM8Rows) sBq[ct] = M8RowBound(p, b, ct);
    FenceProxyAsync();         // E4M3 Q (generic stores) -> wgmma
    NamedBarSync(4, 256);      // (the rows' bounds and Q factors stay in shared memory: registers are O^T's)
    float oacc[4][8][4], m[4][2], l[4][2];
    StartSegmentState(oacc, m, l);

    for (int j = 0; j < n; ++j) {
      const int k = kbase + j, buf = k % kM8Bufs, ph = (k / kM8Bufs) & 1, par = k & 1;
      const uint32_t base = ring_a + buf * kQ8TileBytes;
      if constexpr ((kVar & 2) != 0) {  // probe: no math
        for (int c = 0; c < 5; ++c) MbarWait(&bars->full[buf][c], ph);
        MbarArrive(&bars->empty[buf]);
        continue;
      }
      // S^T = K [Q_hi; Q_lo]^T over this consumer's 32 rows: columns 0..31 hi, 32..63 lo.
      float s2[8][4];
#pragma unroll
      for (int i = 0; i < 8; ++i) s2[i][0] = s2[i][1] = s2[i][2] = s2[i][3] = 0.f;
      FenceRegs(s2);
      if constexpr ((kVar & 512) != 0) {
        // Variant (HELIX_MLA_DECODE_FP8_S=f32): each block in a fresh accumulator, added in f32 once retired (one set:
        // the 128 O^T registers leave no room for mla_small_q8's two alternating sets).
#pragma unroll
        for (int c = 0; c < 5; ++c) {
          float a[8][4];
#pragma unroll
          for (int i = 0; i < 8; ++i) a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.f;
          FenceRegs(a);
          MbarWait(&bars->full[buf][c], ph);
          FenceProxyAsync();  // cp.async-filled tiles (generic writes) -> wgmma reads
          WgFence();
          Q8SBlock<kM8QRows>(a, base, c < 4 ? q8w : q8w + q8w_rope_fix, c);
          WgCommit();
          WgWait0();  // also retires this consumer's PV of the previous tile
          FenceRegs(a);
#pragma unroll
          for (int i = 0; i < 8; ++i) s2[i][0] += a[i][0], s2[i][1] += a[i][1], s2[i][2] += a[i][2], s2[i][3] += a[i][3];
        }
      } else {
#pragma unroll
        for (int c = 0; c < 5; ++c) {
          MbarWait(&bars->full[buf][c], ph);
          FenceProxyAsync();  // cp.async-filled tiles (generic writes) -> wgmma reads (skipping it for TMA tiles: no gain)
          WgFence();
          if constexpr ((kVar & 8) == 0) Q8SBlock<kM8QRows>(s2, base, c < 4 ? q8w : q8w + q8w_rope_fix, c);
        }
        WgCommit();
        WgWait0();  // also retires this consumer's PV of the previous tile
        FenceRegs(s2);
      }
      FenceAcc(oacc);
      const int t0 = (blk0 + j) * kTokTile;
      // Column softmax of this consumer's rows (log2 units): logits, mask, max over the 64 tokens.
      float st[4][4], cm[4][2];
#pragma unroll
      for (int n8 = 0; n8 < 4; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = 32 * w + n8 * 8 + c4 * 2 + e, bq = sBq[q];
          const float slq = sl2 * sQs[q], slo = sl2 * sQs[kM8Rows + q];
          const float a = s2[n8][e] * slq + s2[4 + n8][e] * slo;
          const float bb = s2[n8][2 + e] * slq + s2[4 + n8][2 + e] * slo;
          st[n8][e] = t0 + ta < bq ? a : -INFINITY;
          st[n8][2 + e] = t0 + tb < bq ? bb : -INFINITY;
          float v = fmaxf(st[n8][e], st[n8][2 + e]);
#pragma unroll
          for (int off = 4; off <= 16; off <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
          cm[n8][e] = v;
        }
      if (g == 0)
#pragma unroll
        for (int n8 = 0; n8 < 4; ++n8)
#pragma unroll
          for (int e = 0; e < 2; ++e) myRed[wi * 32 + n8 * 8 + c4 * 2 + e] = cm[n8][e];
      NamedBarSync(1 + w, 128);
      uint16_t* pt = sPT + par * kM8PTElems;
#pragma unroll
      for (int n8 = 0; n8 < 4; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int r32 = n8 * 8 + c4 * 2 + e, q = 32 * w + r32;
          const float mx = fmaxf(fmaxf(myRed[r32], myRed[32 + r32]), fmaxf(myRed[64 + r32], myRed[96 + r32]));
          const float mn = fmaxf(m[n8][e], mx), mu = mn == -INFINITY ? 0.f : mn;
          const float al = exp2f(m[n8][e] - mu);
          m[n8][e] = mn;
          const float pa = exp2f(st[n8][e] - mu), pb = exp2f(st[n8][2 + e] - mu);
          l[n8][e] = l[n8][e] * al + pa + pb;
          const uint32_t pk = Pack2<false>(pa, pb);
          pt[M8PtOff(q, ta)] = (uint16_t)(pk & 0xFFFF);
          pt[M8PtOff(q, tb)] = (uint16_t)(pk >> 16);
          if (wi == 0 && g == 0) sAl[par * kM8Rows + q] = al;
        }
      FenceProxyAsync();     // P^T stores -> wgmma
      NamedBarSync(4, 256);  // both consumers' rows of P^T and factors written
      // O^T (all 64 rows, this consumer's dims) *= the rows' factors.
#pragma unroll
      for (int n8 = 0; n8 < 8; ++n8) {
        const float a0 = sAl[par * kM8Rows + n8 * 8 + c4 * 2], a1 = sAl[par * kM8Rows + n8 * 8 + c4 * 2 + 1];
#pragma unroll
        for (int i = 0; i < 4; ++i) oacc[i][n8][0] *= a0, oacc[i][n8][1] *= a1, oacc[i][n8][2] *= a0, oacc[i][n8][3] *= a1;
      }
      FenceAcc(oacc);
      // O^T += V^T P^T, 16 tokens per step, one step in flight (16 fragment registers).
      const unsigned char* vt = ring + buf * kQ8TileBytes + (2 * w + (wi >> 1)) * (kTokTile * 128);
      const uint32_t pta = pt_a + par * (kM8PTElems * 2);
      // The raw V bytes of step kk + 1 are loaded right after step kk's issue, so their latency hides behind its
      // wgmmas (2-3 % faster than loading after the wait, session 11).
      uint2 raw[2][2];  // [hh][x / y]
      auto load_raw = [&](int kk) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int t = 16 * kk + 2 * c4 + 8 * hh, tx = t + first, ty = t + 1 - first;
          raw[hh][0] = *reinterpret_cast<const uint2*>(vt + tx * 128 + ((vunit ^ (tx & 7)) << 4) + vhalf);
          raw[hh][1] = *reinterpret_cast<const uint2*>(vt + ty * 128 + ((vunit ^ (ty & 7)) << 4) + vhalf);
        }
      };
      load_raw(0);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (kk >= 1) WgWait0();
        uint32_t a[4][4];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const uint2 x = raw[hh][0], y = raw[hh][1];
          const uint32_t xw[2] = {x.x, x.y}, yw[2] = {y.x, y.y};
          E4m3PairsToA<2, (kVar & 4) != 0>(a, xw, yw, hh, sel_lo, sel_hi);  // kVar bit 2 (probe): no conversion
        }
        if (kk == 3) ReleaseAfterLoads(&bars->empty[buf]);  // this thread's reads of the tile are done (S retired above)
        WgFence();
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if constexpr ((kVar & 16) == 0) Wgmma_m64n64_f16_rs(oacc[i], a[i], Desc(pta + kk * 32, 16, 1024));
          else oacc[i][0][0] += __uint_as_float(a[i][0] ^ a[i][1] ^ a[i][2] ^ a[i][3]) * 0.f;  // keep the loads
        WgCommit();
        if (kk < 3) load_raw(kk + 1);
      }
    }
    // Segment end: L per row (sum over the 64 token rows), then every row's o for this consumer's dims.
    WgWait0();
    FenceAcc(oacc);
    float lt[4][2];
    SumOverTokenLanes(lt, l);
    if (g == 0)  // myRed's last readers (the last tile's softmax) passed the 256-thread barrier before this thread did
#pragma unroll
      for (int n8 = 0; n8 < 4; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) myRed[wi * 32 + n8 * 8 + c4 * 2 + e] = lt[n8][e];
    NamedBarSync(1 + w, 128);
#pragma unroll
    for (int n8 = 0; n8 < 4; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r32 = n8 * 8 + c4 * 2 + e, q = 32 * w + r32;
        const float L = myRed[r32] + myRed[32 + r32] + myRed[64 + r32] + myRed[96 + r32];
        if (wi == 0 && g == 0) {
          sFin[q] = L;
          const int gq = M8Row0() + q;
          if (gq < p.GH) p.lse_part[(long long)si * p.GH + gq] = L > 0.f ? (m[n8][e] + __log2f(L)) * kLn2 : -INFINITY;
        }
      }
    NamedBarSync(4, 256);  // every row's L (sFin is rewritten at the next segment end, after its tiles' barriers)
    M8StoreOT<kBf16>(p, si, oacc, sFin, out_mul, w, wi, g, c4);
    kbase += n;
  }
}

}  // namespace
}  // namespace helix_ffi
