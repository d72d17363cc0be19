// FP8 pages, G*H <= 16 query rows (HELIX_MLA_DECODE_DEQUANT=auto|small8, the default): the raw E4M3 tile feeds the tensor
// cores without a 16-bit copy. Included by mla_decode_cuda.cu after mla_decode_small.cuh (reuses its Q
// loader and softmax exchange). The per-tile softmax (RawTileSoftmax) and the segment end (RawTileSegmentEnd) are
// shared with mla_small_q4; mla_small_gh's merge repeats them (shared helpers for it: branch wip/small-merge-helpers,
// not yet run on a GPU).
//
// Why: at N = 16 query rows a wgmma reading A (64 x 16 x 2 B) from shared memory is bound by shared-memory
// bandwidth (2 KB per 8 tensor cycles against 128 B/clk), and the producer-dequantizing kernel of
// mla_decode_small.cuh also writes every tile as 16-bit values (72 KB) and reads it twice (S and PV): its
// consumers' math alone took 0.57 ms at B=64, H=16, G=1, L=64K where fp8's 1.8x needs 0.61 ms in all.
// Here, per 64-token tile (36 KB raw, K-major: 4 latent blocks [64 x 128 B] with the 128-byte swizzle, rope
// [64 x 64 B] with the 64-byte swizzle; see Q8Off):
//   S^T[64 tok, 16 rows] = K Q^T on E4M3 tensor cores with Q split in two E4M3 terms per row (Q8FromQ):
//       18 x m64n32k32 with B = [hi; lo] (32 rows). At N <= 32 these wgmmas are bound by reading A (the K
//       tile) from shared memory, so the second term costs no time, and it brings Q to ~2^-8 of its row max
//       (one E4M3 term: 2^-4, which moved o by 2-5e-2 on the format tests' data);
//   O^T[512, 16] += V^T P^T with A = V^T from registers (32 x m64n16k16 f16): each thread reads its 16
//       latent bytes of 4 tokens per 16-token step (ld.shared.v4, conflict-free), pairs tokens with a byte
//       permute and converts with cvt.rn.f16x2.e4m3x2 (E4M3 codes are exact in f16). A tile is read once
//       by the tensor cores (36 KB) and once by the threads (32 KB), written once by TMA (36 KB).
// The wgmma M rows of O^T are permuted so a thread's 16 bytes per token cover its rows of all 8 m-blocks:
// row r (= 16 * warp + lane / 4 + 8h) of m-block i holds latent dim 128 * warp + 16 * (lane / 4) + 2i + h.
// Warpgroups: two consumers on alternate tiles (each its own m, l, O^T; exact merge at the segment end, as in
// mla_small_gh) and one producer over a ring of kQ8Bufs raw tiles: TMA (5 boxes per tile, one thread) where the
// page size is a multiple of 64, else cp.async (4 threads per token row). Measured on the H200 (B=64, H=16,
// G=1, L=64K, standalone driver, logs_2026-11-30/s8_*): cp.async 0.660 ms (producer alone 0.662: it set the
// pace), TMA 0.606 ms = 1.80x the bf16 small kernel (math alone 0.563, producer alone 0.597).
// S accumulates in one fp8 tensor-core chain over the 576 features by default; HELIX_MLA_DECODE_FP8_S=f32 promotes it to
// f32 per 128-feature block (lse 2.07e-2 -> 4.9e-3 on full-range codes, 1-12 % slower; benchmarks/NOTES.md session 10).
// The logits use scale * log2(e) / kv_scale per tile, times 1 / s_hi for the hi half of the accumulator
// columns and 1 / (s_hi s_lo) for the lo half; the output takes 1 / kv_scale (codes are exact in f16).
#pragma once

namespace helix_ffi {
namespace {

constexpr int kQ8Bufs = 4;
static_assert(kQ8Bufs % 2 == 0, "each buffer stays with one consumer (see kQ4Bufs in mla_decode_small_q4.cuh)");
constexpr int kQ8TileBytes = kTokTile * kD;  // 36864: 4 latent blocks [64 tok x 128 B] + rope [64 tok x 64 B]
constexpr int kQ8QRows = 2 * kSmRows;         // Q as two E4M3 terms: rows 0..15 hi, 16..31 lo
constexpr int kQ8QBytes = kQ8QRows * kD;      // 18432: the same blocks with 32 rows
template <int kBufs>
struct Q8BarsT {
  // per buffer, per block (4 latent, rope): 1 arrival + bytes (TMA, and a partial tile's cp.async copies
  // after a producer barrier) or 128 (mla_small_q8's cp.async producer, page sizes that are not multiples of 64)
  uint64_t full[kBufs][5];
  uint64_t empty[kBufs];    // per buffer: the consumers' arrivals (see the kernels)
  uint64_t q_full, q_empty;
};
using Q8Bars = Q8BarsT<kQ8Bufs>;
// Ring, E4M3 Q, 16-bit Q staging, P^T x 2, softmax exchange x 2, Q row factors, merge area, barriers.
constexpr int kQ8SmemBytes = kQ8Bufs * kQ8TileBytes + kQ8QBytes + kSmQBytes + 2 * kSmRows * 64 * 2 +
                             2 * 2 * 4 * 16 * 4 + kQ8QRows * 4 + 72 * 128 * 4 + (int)sizeof(Q8Bars) + 1024;
static_assert(kQ8SmemBytes <= 227 * 1024, "mla_small_q8 exceeds the opt-in shared memory");


// Runs f(0) .. f(8) over a Q row's 9 chunks of 8 values: unrolled where f indexes registers, else a loop (f
// re-reads shared memory: holding 72 floats would spill mla_small_q8's 96-register producer).
template <bool kUnroll, typename F>
__device__ __forceinline__ void ForQChunks(F f) {
  if constexpr (kUnroll) {
#pragma unroll
    for (int i = 0; i < 9; ++i) f(i);
  } else {
#pragma unroll 1
    for (int i = 0; i < 9; ++i) f(i);
  }
}

// One 16-bit Q row -> two E4M3 terms, by the 8 threads of an aligned 8-lane group (part = 0..7; chunk(i) returns the
// row's 16-byte chunk part + 8 i as loaded, zeros for a padding row): x = q * s_hi with s_hi = 448 / amax (1 for an
// all-zero row), hi = RNE(sat(x)), lo = RNE(sat((x - hi) * s_lo)) with s_lo = 448 / max|x - hi| (x - hi is exact in f32).
// q ~= (hi + lo / s_lo) / s_hi, to ~2^-8 of the row max. The hi codes go to row hi_row and the lo codes to row lo_row
// of a kQRows-row Q8Off tile; part 0 stores 1 / s_hi at *qs_hi and 1 / (s_hi s_lo) at *qs_lo (they multiply the
// logits' two accumulator halves). Three passes over the chunks (ForQChunks<kUnroll>).
// kOneScale (mla_mid_q8s: both terms accumulate into one chain): s_lo = 1, so lo = RNE(sat(x - hi)) in the same units as
// hi (q ~= (hi + lo) / s_hi; residuals below 2^-9 of hi's units round to zero: ~2^-18 of the row max) and *qs_lo is not written.
// kLo false (mla_mid_q8s's one-term form, whose S reads the hi rows alone): no lo codes are written.
template <bool kBf16, int kQRows, bool kUnroll, bool kOneScale = false, bool kLo = true, typename Chunk = void>
__device__ __forceinline__ void Q8RowTerms(unsigned char* sQ8, int hi_row, int lo_row, float* qs_hi, float* qs_lo, int part,
                                           Chunk chunk_raw) {
  auto val = [](uint32_t h) {
    if constexpr (kBf16) return __uint_as_float((h & 0xFFFFu) << 16);
    else return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu)));
  };
  auto e4m3 = [](uint32_t c) {  // one E4M3 code (low byte) -> float, exact
    uint32_t h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"((unsigned short)(c & 0xFF)));
    return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFF)));
  };
  auto chunk = [&](int i, float (&x)[8]) {
    const uint4 v = chunk_raw(i);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) x[2 * k] = val(w[k]), x[2 * k + 1] = val(w[k] >> 16);
  };
  auto rowmax = [](float m) {
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    return m;
  };
  float amax = 0.f;
  ForQChunks<kUnroll>([&](int i) {
    float x[8];
    chunk(i, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(x[e]));
  });
  amax = rowmax(amax);
  const float s_hi = amax > 0.f ? __fdiv_rn(448.f, amax) : 1.f;
  // hi codes, residual max
  float rmax = 0.f;
  ForQChunks<kUnroll>([&](int i) {
    float x[8];
    chunk(i, x);
    uint32_t o[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float xv = x[e] * s_hi;
      const uint32_t c = F32x2ToE4m3(xv, 0.f) & 0xFFu;
      rmax = fmaxf(rmax, fabsf(xv - e4m3(c)));  // exact in f32
      o[e >> 2] |= c << (8 * (e & 3));
    }
    const int ch = part + 8 * i;  // 8 values = 8 bytes: half of the 16-byte chunk ch / 2
    *reinterpret_cast<uint2*>(sQ8 + Q8Off<kQRows>(hi_row, ch >> 1) + (ch & 1) * 8) = make_uint2(o[0], o[1]);
  });
  rmax = rowmax(rmax);
  const float s_lo = kOneScale ? 1.f : rmax > 0.f ? __fdiv_rn(448.f, rmax) : 1.f;
  if (part == 0) {
    *qs_hi = __frcp_rn(s_hi);
    if constexpr (!kOneScale) *qs_lo = __frcp_rn(s_hi * s_lo);
  }
  if constexpr (!kLo) return;
  // lo codes
  ForQChunks<kUnroll>([&](int i) {
    float x[8];
    chunk(i, x);
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float xv = x[e] * s_hi;
      y[e] = (xv - e4m3(F32x2ToE4m3(xv, 0.f) & 0xFFu)) * s_lo;
    }
    const uint32_t o0 = F32x2ToE4m3(y[0], y[1]) | (F32x2ToE4m3(y[2], y[3]) << 16);
    const uint32_t o1 = F32x2ToE4m3(y[4], y[5]) | (F32x2ToE4m3(y[6], y[7]) << 16);
    const int ch = part + 8 * i;
    *reinterpret_cast<uint2*>(sQ8 + Q8Off<kQRows>(lo_row, ch >> 1) + (ch & 1) * 8) = make_uint2(o0, o1);
  });
}

// mla_small_q8's Q: the 16-bit tile (Off16 layout, rows >= G*H zero) -> hi rows 0..15, lo rows 16..31; qs[r] = 1 / s_hi,
// qs[16 + r] = 1 / (s_hi s_lo). 8 threads per row (pt = 0..127).
template <bool kBf16>
__device__ __forceinline__ void Q8FromQ(unsigned char* sQ8, float* qs, const uint16_t* sQ, int pt) {
  const int r = pt >> 3, part = pt & 7;
  Q8RowTerms<kBf16, kQ8QRows, false>(sQ8, r, kSmRows + r, qs + r, qs + kSmRows + r, part, [&](int i) {
    return *reinterpret_cast<const uint4*>(sQ + Off16(r, part + 8 * i));
  });
}

// S^T's wgmmas on block c of a raw fp8 tile at shared address `base` (c < 4: latent block c, 4 k32 steps, 128-byte
// swizzle; c = 4: the rope, 2 steps, 64-byte swizzle) against E4M3 Q rows at q8a (the B operand's first row in a
// kQRows-row Q8Off tile; N = 8 kN8 rows), accumulating into s.
template <int kQRows, int kN8>
__device__ __forceinline__ void Q8SBlock(float (&s)[kN8][4], uint32_t base, uint32_t q8a, int c) {
  if (c < 4) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      WgmmaE4m3K32(s, Desc(base + c * (kTokTile * 128) + kk * 32, 16, 1024), Desc(q8a + c * (kQRows * 128) + kk * 32, 16, 1024));
  } else {
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
      WgmmaE4m3K32(s, Desc64(base + 4 * (kTokTile * 128) + kk * 32), Desc64(q8a + 4 * (kQRows * 128) + kk * 32));
  }
}

// The raw fp8 tiles of one segment (sequence b, tiles blk0 .. blk0 + n - 1, len tokens) into a ring of kBufs tiles, by the
// 128 threads of a producer warpgroup (pt = 0..127); k counts the CTA's tiles (buffer k % kBufs, its use k / kBufs; an
// empty barrier completes once per use). kTma: a whole tile is 5 TMA boxes issued by thread 0 (warp 0 waits for the
// buffer; page id read a tile ahead; kVar bit 5: L2 evict-first with policy pol; bit 0: no loads, bytes completed by
// hand). A partial last tile, and every tile without kTma, goes through cp.async by all 128 threads (zero fill past len,
// no read of rows past the bound): each waits for its own copies and, after a producer barrier, thread 0 arrives once
// per block. Full barriers: one arrival (+ bytes).
template <int kBufs, bool kTma, int kVar>
__device__ __forceinline__ void Q8ProduceSegment(unsigned char* ring, uint64_t (*full)[5], uint64_t* empty, const Q8Maps& maps,
                                                 const Params& p, const QParams& qp, int b, int blk0, int n, int len, int& k,
                                                 int pt, uint64_t pol) {
  auto page_of = [&](int t0) { return t0 < len ? PageOf(p, b, t0) : 0; };
  int pg_next = kTma && pt < 32 ? page_of(blk0 * kTokTile) : 0;
  for (int j = 0; j < n; ++j, ++k) {
    const int buf = k % kBufs, u = k / kBufs, t0 = (blk0 + j) * kTokTile;
    unsigned char* dst = ring + buf * kQ8TileBytes;
    if (kTma && WholeTile(t0, len)) {
      if (pt >= 32) continue;
      const int y = pg_next * p.P + t0 % p.P;
      if (j + 1 < n) pg_next = page_of(t0 + kTokTile);
      if (u >= 1) MbarWait(&empty[buf], (u - 1) & 1);
      if (pt == 0) {
#pragma unroll
        for (int c = 0; c < 5; ++c) {
          MbarArriveExpectTx(&full[buf][c], c < 4 ? kTokTile * 128 : kTokTile * 64);
          if constexpr ((kVar & 1) == 0)
            TmaLoad2d<(kVar & 32) != 0>(dst + c * kTokTile * 128, c < 4 ? &maps.lat : &maps.rope, c < 4 ? c * 128 : 0, y,
                                        &full[buf][c], pol);
          else
            asm volatile("mbarrier.complete_tx.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(&full[buf][c])),
                         "r"(c < 4 ? kTokTile * 128 : kTokTile * 64) : "memory");
        }
      }
      __syncwarp();
    } else {
      // With kTma, warps 1..3 skipped the whole tiles' empty waits; a parity wait can only be trusted for the latest
      // phase, so warp 0 waits first and the others follow it through the barrier.
      if (pt < 32 && u >= 1) MbarWait(&empty[buf], (u - 1) & 1);
      NamedBarSync(5, 128);
      const int tg2 = pt >> 2, cq2 = pt & 3;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = t0 + tg2 + 32 * h;
        const bool valid = t < len;
        const size_t row = valid ? (size_t)PageOf(p, b, t) * p.P + t % p.P : 0;
#pragma unroll
        for (int c = 0; c < 9; ++c) {
          const uint8_t* src = c < 8 ? qp.kv_lat8 + row * kDl + c * 64 + cq2 * 16 : qp.kv_rope8 + row * kDr + cq2 * 16;
          if constexpr ((kVar & 1) == 0) CpAsync16(dst + Q8Off<kTokTile>(tg2 + 32 * h, 4 * c + cq2), src, valid);
        }
      }
      CpAsyncWaitAll();
      NamedBarSync(5, 128);
      if (pt == 0)
        for (int c = 0; c < 5; ++c) MbarArrive(&full[buf][c]);
    }
  }
}

// Two tokens' E4M3 bytes of a thread's latent dims (words xw of token x, yw of token y, kWords words) -> the f16 A
// fragments of 2 kWords m-blocks at slots 2 hh (h = 0) and 2 hh + 1 (h = 1): byte 4 q4 + 2 i' + h of a word is dim h of
// m-block 2 q4 + i'. One byte permute pairs the tokens (sel_lo / sel_hi: odd-c4 lanes read the odd token first), one
// cvt.rn.f16x2.e4m3x2 per pair (exact). kRaw (a timing probe): the permuted bytes without the conversion.
template <int kWords, bool kRaw>
__device__ __forceinline__ void E4m3PairsToA(uint32_t (&a)[2 * kWords][4], const uint32_t (&xw)[kWords], const uint32_t (&yw)[kWords],
                                             int hh, uint32_t sel_lo, uint32_t sel_hi) {
#pragma unroll
  for (int q4 = 0; q4 < kWords; ++q4) {
    const uint32_t lo = Prmt(xw[q4], yw[q4], sel_lo), hi = Prmt(xw[q4], yw[q4], sel_hi);
    if constexpr (kRaw) {
      a[2 * q4][2 * hh] = lo; a[2 * q4][2 * hh + 1] = lo >> 16; a[2 * q4 + 1][2 * hh] = hi; a[2 * q4 + 1][2 * hh + 1] = hi >> 16;
    } else {
      a[2 * q4][2 * hh] = Fp8x2ToT<false>(lo);
      a[2 * q4][2 * hh + 1] = Fp8x2ToT<false>(lo >> 16);
      a[2 * q4 + 1][2 * hh] = Fp8x2ToT<false>(hi);
      a[2 * q4 + 1][2 * hh + 1] = Fp8x2ToT<false>(hi >> 16);
    }
  }
}

// One tile's column softmax in the raw-tile kernels (log2 units, as mla_small_gh), called by the consumer that owns
// the tile: masks the logits st of token rows ta / tb (tile start t0) by the rows' bounds bq, exchanges the column
// maxima across the 4 warps through red (barrier 1 + w), updates m and l, writes P^T (f16) to myPT, rescales O^T and
// publishes P^T to the wgmma (proxy fence, barrier).
__device__ __forceinline__ void RawTileSoftmax(float (&st)[2][4], const int (&bq)[2][2], int t0, int ta, int tb, int w, int wi,
                                               int lane, float* red, uint16_t* myPT, float (&m)[2][2], float (&l)[2][2],
                                               float (&oacc)[8][2][4]) {
  const int c4 = lane & 3;
  float cm[2][2];
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      st[n8][e] = t0 + ta < bq[n8][e] ? st[n8][e] : -INFINITY;
      st[n8][2 + e] = t0 + tb < bq[n8][e] ? st[n8][2 + e] : -INFINITY;
      float v = fmaxf(st[n8][e], st[n8][2 + e]);
#pragma unroll
      for (int off = 4; off <= 16; off <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
      cm[n8][e] = v;
    }
  SmPutColumns(red, wi, lane, cm);
  NamedBarSync(1 + w, 128);
  float al[2][2], mu[2][2];
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = n8 * 8 + c4 * 2 + e;
      const float mx = fmaxf(fmaxf(red[q], red[16 + q]), fmaxf(red[32 + q], red[48 + q]));
      const float mn = fmaxf(m[n8][e], mx);
      mu[n8][e] = mn == -INFINITY ? 0.f : mn;
      al[n8][e] = exp2f(m[n8][e] - mu[n8][e]);
      m[n8][e] = mn;
    }
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = n8 * 8 + c4 * 2 + e;
      const float pa = exp2f(st[n8][e] - mu[n8][e]), pb = exp2f(st[n8][2 + e] - mu[n8][e]);
      l[n8][e] = l[n8][e] * al[n8][e] + pa + pb;
      const uint32_t pk = Pack2<false>(pa, pb);
      myPT[Off16(q, ta >> 3) + (ta & 7)] = (uint16_t)(pk & 0xFFFF);
      myPT[Off16(q, tb >> 3) + (tb & 7)] = (uint16_t)(pk >> 16);
    }
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8) {
      oacc[i][n8][0] *= al[n8][0]; oacc[i][n8][1] *= al[n8][1];
      oacc[i][n8][2] *= al[n8][0]; oacc[i][n8][3] *= al[n8][1];
    }
  FenceProxyAsync();         // P^T stores -> wgmma
  NamedBarSync(1 + w, 128);  // all of P^T written
}

// End of a segment in the raw-tile kernels (mla_small_q8, mla_small_q4), called by both consumers: retires the last
// PVs and releases Q, then l's column sums and the exact two-consumer merge (SmColumnSums, SmMergeConsumers, as
// mla_small_gh), and consumer 0 writes the partial (o, lse) of segment si, times out_mul.
// Row q's dims 128 wi + 16 g + 2 i + h sit in oacc[i][n8][2 h + e]: 16 consecutive floats per thread.
template <bool kBf16>
__device__ __forceinline__ void RawTileSegmentEnd(const Params& p, int si, int w, int wi, int lane, int tid, int own, float* myRed,
                                                  float* sMerge, float (&oacc)[8][2][4], float (&m)[2][2], const float (&l)[2][2],
                                                  float out_mul, uint64_t* q_empty) {
  const int g = lane >> 2, c4 = lane & 3;
  WgWait0();  // this consumer's last PVs
  FenceAcc(oacc);
  MbarArrive(q_empty);  // Q may be replaced by the next segment's
  float Lq[2][2];
  SmColumnSums(Lq, l, myRed + (own & 1) * 64, w, wi, lane);
  SmMergeConsumers(w, tid, sMerge, oacc, m, Lq);
  if (w == 0) {
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q = n8 * 8 + c4 * 2 + e;
        const float L = Lq[n8][e];
        if (q >= p.GH) continue;
        const float inv = L > 0.f ? out_mul / L : 0.f;
        uint16_t* o = p.o_part + ((long long)si * p.GH + q) * kDl + 128 * wi + 16 * g;
#pragma unroll
        for (int i4 = 0; i4 < 4; ++i4)
          StPart4<kBf16>(o + 4 * i4, oacc[2 * i4][n8][e] * inv, oacc[2 * i4][n8][2 + e] * inv,
                         oacc[2 * i4 + 1][n8][e] * inv, oacc[2 * i4 + 1][n8][2 + e] * inv);
        if (wi == 0 && g == 0) p.lse_part[(long long)si * p.GH + q] = L > 0.f ? (m[n8][e] + __log2f(L)) * kLn2 : -INFINITY;
      }
  }
  NamedBarSync(4, 256);      // sMerge is rewritten by the next segment
  NamedBarSync(1 + w, 128);  // red is reused by the next segment
}

// kVar (timing probes of the standalone driver only; not correct kernels): bit 0: the producer issues no
// loads (arrives on empty tiles): the consumers' math alone; bit 1: the consumers do no math (wait for each
// tile and release it): the producer alone; bit 2: V^T fragments without the E4M3 conversion; bit 3: no S
// wgmma; bit 4: no PV wgmma. Variants (correct kernels): bit 5: TMA loads with an L2 evict-first hint; bit 6:
// S waits for the whole tile, then one proxy fence (instead of one per block); bit 8: every consumer thread arrives
// on a buffer's empty barrier (instead of lane 0 of each warp after __syncwarp; Launch sets it for the cp.async producer).
// Bit 9: S promoted to f32 per 128-feature block (see there; HELIX_MLA_DECODE_FP8_S=f32).
template <bool kBf16, bool kTma, int kVar = 0>
__global__ void __launch_bounds__(384, 1) mla_small_q8(Params p, Sched s, QParams qp, const __grid_constant__ Q8Maps maps) {
  PlanThisPart(p, s);  // first: waits for the inputs (PDL); ptxas spilled more with anything live across it
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  unsigned char* ring = smem;                                      // 1024-aligned tiles (36 KB each)
  unsigned char* sQ8 = ring + kQ8Bufs * kQ8TileBytes;
  uint16_t* sQ = reinterpret_cast<uint16_t*>(sQ8 + kQ8QBytes);     // 16-bit Q as loaded (Off16 layout)
  uint16_t* sPT = reinterpret_cast<uint16_t*>(reinterpret_cast<unsigned char*>(sQ) + kSmQBytes);  // [2][16 x 64]
  float* sRed = reinterpret_cast<float*>(sPT + 2 * kSmRows * 64);  // [2][2][4 warps][16]
  float* sQs = sRed + 2 * 2 * 4 * 16;                              // [32] per Q row: 1 / s_hi, 1 / (s_hi s_lo)
  float* sMerge = sQs + kQ8QRows;                                  // [72][128] consumer 1's O^T, m, L
  Q8Bars* bars = reinterpret_cast<Q8Bars*>(sMerge + 72 * 128);

  if (threadIdx.x == 0) {
    for (int b = 0; b < kQ8Bufs; ++b) {
      for (int c = 0; c < 5; ++c) MbarInit(&bars->full[b][c], kTma ? 1 : 128);
      MbarInit(&bars->empty[b], (kVar & 256) ? 128 : 4);  // kVar bit 8: every consumer thread arrives
    }
    MbarInit(&bars->q_full, 128);
    MbarInit(&bars->q_empty, 256);
  }
  __syncthreads();

  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  const int2 range = PartRange(p, s);  // written by PlanThisPart

  if (wg == 2) {
    // ---------------- producer: Q per segment, raw KV tiles by cp.async ----------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 96;\n");
    const int pt = threadIdx.x - 256;
    uint64_t pol = 0;
    if constexpr ((kVar & 32) != 0) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    if constexpr (kTma) {
      if (pt == 0) {
        PrefetchTensorMap(&maps.lat);
        PrefetchTensorMap(&maps.rope);
      }
    }
    int k = 0, sc = 0;
    for (int si = range.x; si < range.y; ++si) {
      const int4 seg = s.seg[SegRow(p) + si];
      const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
      if (n <= 0) continue;
      const int len = SeqLen(p.bounds, b, p.G, p.cap);
      if (sc >= 1) MbarWait(&bars->q_empty, (sc - 1) & 1);
      SmLoadQ(sQ, p, b, pt, 128);
      CpAsyncWaitAll();
      NamedBarSync(3, 128);  // the whole 16-bit Q tile has landed
      Q8FromQ<kBf16>(sQ8, sQs, sQ, pt);
      FenceProxyAsync();     // E4M3 Q (generic stores) -> the consumers' wgmma
      MbarArrive(&bars->q_full);
      ++sc;
      if constexpr (kTma) {
        Q8ProduceSegment<kQ8Bufs, true, kVar>(ring, bars->full, bars->empty, maps, p, qp, b, blk0, n, len, k, pt, pol);
        continue;
      }
      // cp.async: 4 threads per token row: tokens tg2 + 32 h, 16-byte unit cq2 of each 64-byte column group
      // (latent group c: unit 4 c + cq2 of block c / 2), page ids read a tile ahead.
      const int tg2 = pt >> 2, cq2 = pt & 3;
      auto pages = [&](int blk, int (&pg)[2]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int t = blk * kTokTile + tg2 + 32 * h;
          pg[h] = t < len ? __ldg(p.page_table + (long long)b * p.npp + t / p.P) : 0;
        }
      };
      int pg[2];
      pages(blk0, pg);
      for (int j = 0; j < n; ++j, ++k) {
        const int buf = k % kQ8Bufs, u = k / kQ8Bufs;
        size_t row[2];
        bool valid[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int t = (blk0 + j) * kTokTile + tg2 + 32 * h;
          valid[h] = t < len;
          row[h] = valid[h] ? (size_t)min(max(pg[h], 0), p.N - 1) * p.P + t % p.P : 0;
        }
        if (j + 1 < n) pages(blk0 + j + 1, pg);
        if (u >= 1) MbarWait(&bars->empty[buf], (u - 1) & 1);
        unsigned char* dst = ring + buf * kQ8TileBytes;
#pragma unroll
        for (int c = 0; c < 9; ++c) {
          if constexpr ((kVar & 1) == 0) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint8_t* src = c < 8 ? qp.kv_lat8 + row[h] * kDl + c * 64 + cq2 * 16 : qp.kv_rope8 + row[h] * kDr + cq2 * 16;
              CpAsync16(dst + Q8Off<kTokTile>(tg2 + 32 * h, 4 * c + cq2), src, valid[h]);
            }
          }
          if (c & 1) CpAsyncMbarArrive(&bars->full[buf][c >> 1]);
          if (c == 8) CpAsyncMbarArrive(&bars->full[buf][4]);
        }
      }
    }
    CpAsyncWaitAll();
    return;
  }

  // ---------------- consumers: w takes the tiles k with k % 2 == w ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 200;\n");  // 96 + 2 x 200 <= 3 x 168 (the producer spills below 96)
  const int w = wg, lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3, tid = threadIdx.x & 127;
  const int g = lane >> 2, c4 = lane & 3;
  const int ta = wi * 16 + g, tb = ta + 8;  // this thread's two token rows of S^T
  uint16_t* myPT = sPT + w * (kSmRows * 64);
  float* myRed = sRed + w * 128;
  const uint32_t q8a = SmemAddr(sQ8), ring_a = SmemAddr(ring), pta = SmemAddr(myPT);
  // V^T fragments: this thread's 16 latent bytes per token (dims 128 wi + 16 g ..: unit g of latent block wi);
  // tokens 16 kk + 2 c4 + {0, 1} (a0 / a1) and + 8 (a2 / a3). Odd c4 reads the odd token first so the 8 lanes
  // of a quarter warp hit 8 distinct 16-byte bank groups; the byte permute restores the order.
  const int first = c4 & 1;
  const uint32_t sel_lo = first ? 0x1504u : 0x5140u, sel_hi = first ? 0x3726u : 0x7362u;
  const float out_mul = __frcp_rn(__ldg(qp.kv_scale)), sl2 = p.scale_log2 * out_mul;
  int kbase = 0, sc = 0;
  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[SegRow(p) + si];
    const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y, len = SeqLen(p.bounds, b, p.G, p.cap);
    if (n <= 0) {
      if (w == 0 && wi == 0 && lane < 4) SmEmptyPartial(p, si, lane);
      continue;
    }
    int bq[2][2];  // bounds of this thread's four query rows (columns of S^T): q = n8 * 8 + 2 c4 + e
    SmRowBounds(bq, p, b, c4);
    MbarWait(&bars->q_full, sc & 1);
    float slq[2][2], slo[2][2];  // scale * log2(e) / kv_scale times 1 / s_hi (hi term), 1 / (s_hi s_lo) (lo term)
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        slq[n8][e] = sl2 * sQs[n8 * 8 + c4 * 2 + e];
        slo[n8][e] = sl2 * sQs[kSmRows + n8 * 8 + c4 * 2 + e];
      }

    float oacc[8][2][4], m[2][2], l[2][2];
    StartSegmentState(oacc, m, l);

    int own = 0;
    for (int j = ((kbase & 1) != w) ? 1 : 0; j < n; j += 2, ++own) {
      const int k = kbase + j, buf = k % kQ8Bufs, par = (k / kQ8Bufs) & 1;
      const uint32_t base = ring_a + buf * kQ8TileBytes;
      if constexpr ((kVar & 2) != 0) {  // probe: no math
        for (int c = 0; c < 5; ++c) MbarWait(&bars->full[buf][c], par);
        __syncwarp();
        if ((kVar & 256) || lane == 0) MbarArrive(&bars->empty[buf]);
        continue;
      }
      // S^T = K [Q_hi; Q_lo]^T: 4 latent blocks x 4 k-steps + rope x 2 of m64n32k32 E4M3; columns 16.. hold the lo term.
      float s2[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) s2[i][0] = s2[i][1] = s2[i][2] = s2[i][3] = 0.f;
      FenceRegs(s2);
      if constexpr ((kVar & 512) != 0) {
        // Variant (bit 9; HELIX_MLA_DECODE_FP8_S=f32): each 128-feature block (4 k32 steps; the rope: 2) accumulates into a
        // fresh register set and is added to s2 in f32 on the CUDA cores once retired, two sets alternating (the fp8
        // tensor cores keep fewer accumulator bits than f32 across a 576-long chain: lse off by up to 2e-2 on the
        // standalone's wide-range codes, benchmarks/NOTES.md session 9).
        float acc[2][4][4];
#pragma unroll
        for (int c = 0; c < 5; ++c) {
          MbarWait(&bars->full[buf][c], par);
          FenceProxyAsync();  // cp.async-filled tiles (generic writes) -> wgmma reads
          float (&a)[4][4] = acc[c & 1];
          if (c >= 2) {  // block c - 2 used this set: retired by the first wait (everything) / the later ones (all but one)
            if (c == 2) WgWait0();
            else WgWait<1>();
            FenceRegs(a);
#pragma unroll
            for (int i = 0; i < 4; ++i) s2[i][0] += a[i][0], s2[i][1] += a[i][1], s2[i][2] += a[i][2], s2[i][3] += a[i][3];
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.f;
          FenceRegs(a);
          WgFence();
          Q8SBlock<kQ8QRows>(a, base, q8a, c);
          WgCommit();
        }
        WgWait0();
        FenceRegs(acc[0]); FenceRegs(acc[1]);
#pragma unroll
        for (int i = 0; i < 4; ++i)  // blocks 3 (set 1) and 4 (set 0)
          s2[i][0] += acc[1][i][0] + acc[0][i][0], s2[i][1] += acc[1][i][1] + acc[0][i][1],
          s2[i][2] += acc[1][i][2] + acc[0][i][2], s2[i][3] += acc[1][i][3] + acc[0][i][3];
      } else {
        if constexpr ((kVar & 64) != 0) {
          for (int c = 0; c < 5; ++c) MbarWait(&bars->full[buf][c], par);
          FenceProxyAsync();
          WgFence();
        }
#pragma unroll
        for (int c = 0; c < 5; ++c) {
          if constexpr ((kVar & 64) == 0) {
            MbarWait(&bars->full[buf][c], par);
            // cp.async-filled tiles (generic writes) -> wgmma reads; a whole TMA tile needs no fence (async-proxy
            // writes, ordered by the barrier's transaction count; mla_mid_q8s, session 28)
            if (!kTma || !WholeTile((blk0 + j) * kTokTile, len)) FenceProxyAsync();
            WgFence();
          }
          if constexpr ((kVar & 8) == 0) Q8SBlock<kQ8QRows>(s2, base, q8a, c);
        }
        WgCommit();
        WgWait0();  // also retires this consumer's PV of its previous tile
        FenceRegs(s2);
      }
      float st[2][4];  // logits (log2 units, before masking) of query rows n8 * 8 + 2 c4 + (i & 1)
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int i = 0; i < 4; ++i) st[n8][i] = s2[n8][i] * slq[n8][i & 1] + s2[2 + n8][i] * slo[n8][i & 1];
      FenceAcc(oacc);

      // Column softmax (log2 units), P^T, O^T rescaled.
      RawTileSoftmax(st, bq, (blk0 + j) * kTokTile, ta, tb, w, wi, lane, myRed + (own & 1) * 64, myPT, m, l, oacc);
      FenceAcc(oacc);
      // O^T += V^T P^T, 16 tokens per step; V^T fragments converted from the raw tile.
      // One commit group per 16 tokens; at most two in flight, so 64 fragment registers stay pinned.
      const unsigned char* vt = ring + buf * kQ8TileBytes + wi * (kTokTile * 128);  // latent block wi
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (kk >= 2) WgWait<1>();
        uint32_t a[8][4];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {  // tokens 16 kk + 2 c4 (+ 8 hh) and the next one
          const int t = 16 * kk + 2 * c4 + 8 * hh, tx = t + first, ty = t + 1 - first;
          const uint4 x = *reinterpret_cast<const uint4*>(vt + tx * 128 + ((g ^ (tx & 7)) << 4));
          const uint4 y = *reinterpret_cast<const uint4*>(vt + ty * 128 + ((g ^ (ty & 7)) << 4));
          const uint32_t xw[4] = {x.x, x.y, x.z, x.w}, yw[4] = {y.x, y.y, y.z, y.w};
          E4m3PairsToA<4, (kVar & 4) != 0>(a, xw, yw, hh, sel_lo, sel_hi);  // kVar bit 2 (probe): no conversion
        }
        // kk == 3: every read of this buffer is done (S's wgmma retired above): back to the producer
        if (kk == 3) ReleaseAfterLoads<true>(&bars->empty[buf], (kVar & 256) != 0);
        WgFence();
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if constexpr ((kVar & 16) == 0) Wgmma_m64n16_f16_rs(oacc[i], a[i], Desc(pta + kk * 32, 16, 1024));
          else oacc[i][0][0] += __uint_as_float(a[i][0] ^ a[i][1] ^ a[i][2] ^ a[i][3]) * 0.f;  // keep the loads
        WgCommit();
      }
    }
    RawTileSegmentEnd<kBf16>(p, si, w, wi, lane, tid, own, myRed, sMerge, oacc, m, l, out_mul, &bars->q_empty);
    kbase += n;
    ++sc;
  }
}

}  // namespace
}  // namespace helix_ffi
