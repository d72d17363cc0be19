// Split-KV kernel for G*H <= 16 query rows (HELIX_MLA_DECODE_KERNEL=auto|small; quantized pages with HELIX_MLA_DECODE_DEQUANT=small: the
// raw-tile kernels mla_small_q8 / mla_small_q4 are their default).
// Included by mla_decode_cuda.cu after mla_decode_seesaw.cuh (reuses its mbarrier helpers and the SsBars layout).
//
// With few query rows a 64-row tile is 3/4 padding, so the math runs transposed with the 64 tokens of a KV
// tile as the wgmma M dimension: S^T[64 tok, 16 rows] = K Q^T (A = the K tile, K-major; B = Q, 16 rows) and
// O^T[512, 16] += V^T P^T (A = the same tile read MN-major, 8 x m64 blocks of latent dims; B = P^T [16 rows,
// 64 tokens] in shared memory). A quarter of the padded kernel's tensor work. Two consumer warpgroups take
// alternate tiles (see mla_small_gh); the softmax is per column (query row): max / sum over the 64 tokens
// through a warp shuffle and a 4-warp exchange. For 16-bit pages the producer warpgroup is the seesaw's
// (cp.async, per-block full barriers); a buffer is released whole.
//
// Quantized pages (kFmt = fp8 / nvfp4): two producer warpgroups dequantize. Each producer thread keeps the
// raw bytes of its token's 9 units (fp8: 16 codes; nvfp4: 8 code bytes + a block scale) of the next tile in
// registers: plain global loads, each unit refilled right after it is converted, page ids read a tile before
// that. It converts to exact f16 code values (E4M3: one cvt per pair; E2M1: byte-permute lookup times the
// block scale) into the same 64-token KV buffer the bf16 kernel uses, and arrives on each 64-column block's
// barrier as soon as its part of that block is written. The math runs in f16 (E2M1 * scale and E4M3 are
// exact in f16; bf16 would need two more conversions per pair): the producers rewrite each segment's Q tile
// as f16 with a power-of-two scale per row, folded with the per-tensor KV scale into the logit factor; the
// output takes 1 / kv_scale. KV bytes per tile: fp8 36 KB, nvfp4 20 KB, against 72 KB of bf16.
#pragma once

namespace helix_ffi {
namespace {

constexpr int kSmRows = 16;
// Warpgroups of the default build (see mla_small_gh), measured on the H200 at H=16, G=1, L=64K, B=64
// (benchmarks/results/logs_2026-11-30/s3_standalone_qsmall_producers.log): 16-bit pages, 2 consumers + the cp.async
// producer (1.11 ms vs 1.18 with one consumer); quantized pages, 2 consumers + 2 dequantizing producers
// (fp8 0.99 ms, nvfp4 1.14 ms; one producer: 1.13 / 1.76 ms; the dequantization sets the pace).
constexpr int kSmConsumers = 2;
__host__ __device__ constexpr int SmProducers(int fmt) { return fmt == kFmtNative ? 1 : 2; }
// setmaxnreg budgets with 2 consumers + 2 producers (512 threads start at 128 registers each). An increase
// waits until others have released enough, so 2 x producer + 2 x consumer must not exceed 4 x 128.
// kVar bit 3 (two tiles of raw bytes in flight) moves 8 more registers to the producers.
__host__ __device__ constexpr int SmProdRegs(int var) { return (var & 8) ? 104 : 96; }
__host__ __device__ constexpr int SmConsRegs(int var) { return (var & 8) ? 152 : 160; }
static_assert(2 * SmProdRegs(0) + 2 * SmConsRegs(0) <= 512 && 2 * SmProdRegs(8) + 2 * SmConsRegs(8) <= 512,
              "setmaxnreg budgets exceed the CTA's registers");
constexpr int kSmQBytes = kSmRows * kD * 2;   // 18432: 9 blocks of [16 rows x 128 B]
constexpr int kSmKvBytes = kTileElems * 2;    // 73728 per 64-token tile
// Q, two KV tiles, P^T x 2, softmax exchange x 2, Q row factors, the two-consumer merge area, barriers.
constexpr int kSmSmemBytes = kSmQBytes + 2 * kSmKvBytes + 2 * kSmRows * 64 * 2 + 2 * 2 * 4 * 16 * 4 + kSmRows * 4 +
                             72 * 128 * 4 + 64 * 8 + 1024;

// Q (16 rows) and P^T (16 rows x 64 tokens): 128-byte-swizzle K-major blocks of [16 rows x 64 elements].
__device__ __forceinline__ int Off16(int row, int ch) {
  return (ch >> 3) * (kSmRows * 64) + row * 64 + (((ch & 7) ^ (row & 7)) << 3);
}

// Q rows of sequence b (rows >= G*H zero-filled) into the 16-row tile, cp.async by `nthreads` producer threads.
__device__ __forceinline__ void SmLoadQ(uint16_t* sQ, const Params& p, int b, int pt, int nthreads) {
  for (int i = pt; i < kSmRows * kChunks; i += nthreads) {
    const int r = i / kChunks, ch = i - r * kChunks;
    const bool valid = r < p.GH;
    const long long qrow = (long long)b * p.GH + r;
    CpAsync16(sQ + Off16(r, ch), valid ? QChunk(p, qrow, ch) : p.q_lat, valid);
  }
}

template <bool kBf16, int kTA, int kTB>
__device__ __forceinline__ void Wgmma16(float (&d)[2][4], uint64_t da, uint64_t db) {
  if constexpr (kBf16) Wgmma_m64n16_bf16<kTA, kTB>(d, da, db); else Wgmma_m64n16_f16<kTA, kTB>(d, da, db);
}

// Raw bytes of one producer thread's units of one quantized tile: tokens tok and tok + 32, units q + 4j.
// A warp's per-column values (after the shuffles, lanes 0..3 hold columns n8 * 8 + lane * 2 + e) -> its row
// red[wi][16] of the 4-warp exchange.
__device__ __forceinline__ void SmPutColumns(float* red, int wi, int lane, const float (&v)[2][2]) {
  if (lane < 4)
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) red[wi * 16 + n8 * 8 + lane * 2 + e] = v[n8][e];
}

// The O^T accumulators of a consumer thread (M m-blocks of N / 8 column groups) through a register fence (FenceRegs on
// each m-block).
template <int M, int N8>
__device__ __forceinline__ void FenceAcc(float (&o)[M][N8][4]) {
#pragma unroll
  for (int i = 0; i < M; ++i) FenceRegs(o[i]);
}

// A consumer's state at a segment start: O^T accumulators zero, each query row's running max -inf and sum 0.
template <int M, int N8, int R8>
__device__ __forceinline__ void StartSegmentState(float (&o)[M][N8][4], float (&m)[R8][2], float (&l)[R8][2]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int n8 = 0; n8 < N8; ++n8) o[i][n8][0] = o[i][n8][1] = o[i][n8][2] = o[i][n8][3] = 0.f;
#pragma unroll
  for (int n8 = 0; n8 < R8; ++n8) m[n8][0] = m[n8][1] = -INFINITY, l[n8][0] = l[n8][1] = 0.f;
}

// Per-column sums over the 64 token rows' lanes of a warp: v[n8][e] summed over the 8 lanes of a column (lane / 4),
// for the l of each query row at a segment end (the 4-warp sum follows through shared memory).
template <int kN8>
__device__ __forceinline__ void SumOverTokenLanes(float (&out)[kN8][2], const float (&v)[kN8][2]) {
#pragma unroll
  for (int n8 = 0; n8 < kN8; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x = v[n8][e];
#pragma unroll
      for (int off = 4; off <= 16; off <<= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
      out[n8][e] = x;
    }
}

// End of a segment in the 16-row kernels (mla_small_gh, mla_small_q8, mla_small_q4): the consumer's l summed over its
// 64 token rows (its lanes, then its 4 warps through red) into Lq, per query column.
__device__ __forceinline__ void SmColumnSums(float (&Lq)[2][2], const float (&l)[2][2], float* red, int w, int wi, int lane) {
  float lt[2][2];
  SumOverTokenLanes(lt, l);
  NamedBarSync(1 + w, 128);
  SmPutColumns(red, wi, lane, lt);
  NamedBarSync(1 + w, 128);
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = n8 * 8 + (lane & 3) * 2 + e;
      Lq[n8][e] = red[q] + red[16 + q] + red[32 + q] + red[48 + q];
    }
}

// The exact merge of two consumers' (O^T, m, L): consumer 1 hands its state over thread-linearly through sMerge
// ([72][128]; the same fragment positions as consumer 0's thread), consumer 0 rescales both to the common max.
__device__ __forceinline__ void SmMergeConsumers(int w, int tid, float* sMerge, float (&oacc)[8][2][4], float (&m)[2][2],
                                                 float (&Lq)[2][2]) {
  if (w == 1) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int r = 0; r < 4; ++r) sMerge[((i * 2 + n8) * 4 + r) * 128 + tid] = oacc[i][n8][r];
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sMerge[(64 + n8 * 2 + e) * 128 + tid] = m[n8][e];
        sMerge[(68 + n8 * 2 + e) * 128 + tid] = Lq[n8][e];
      }
  }
  NamedBarSync(4, 256);
  if (w == 0) {
    float a0[2][2], a1[2][2];
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float m1 = sMerge[(64 + n8 * 2 + e) * 128 + tid], L1 = sMerge[(68 + n8 * 2 + e) * 128 + tid];
        const float mm = fmaxf(m[n8][e], m1), mz = mm == -INFINITY ? 0.f : mm;
        a0[n8][e] = exp2f(m[n8][e] - mz);
        a1[n8][e] = exp2f(m1 - mz);
        Lq[n8][e] = Lq[n8][e] * a0[n8][e] + L1 * a1[n8][e];
        m[n8][e] = mm;
      }
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          oacc[i][n8][r] = oacc[i][n8][r] * a0[n8][r & 1] + sMerge[((i * 2 + n8) * 4 + r) * 128 + tid] * a1[n8][r & 1];
  }
}


// A segment without tiles (never produced by the schedule): keep its partial defined (o = 0, lse = -inf); lanes 0..3
// of one warp.
__device__ __forceinline__ void SmEmptyPartial(const Params& p, int si, int lane) {
  for (int q = lane; q < p.GH; q += 4) {
    for (int d = 0; d < kDl; ++d) p.o_part[((long long)si * p.GH + q) * kDl + d] = 0;  // +0.0 in bf16 and f16
    p.lse_part[(long long)si * p.GH + q] = -INFINITY;
  }
}

// Bounds of a thread's four query rows (columns of S^T: q = n8 * 8 + 2 c4 + e) of sequence b, clamped to [0, cap]; 0 for
// padding rows q >= G*H.
__device__ __forceinline__ void SmRowBounds(int (&bq)[2][2], const Params& p, int b, int c4) {
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = n8 * 8 + c4 * 2 + e;
      bq[n8][e] = q < p.GH ? min(max(p.bounds[b * p.G + q / p.H], 0), p.cap) : 0;
    }
}

// kH = tokens per producer thread (2 with one producer warpgroup, 1 with two).
template <int kFmt, int kH>
struct SmRaw;
template <int kH>
struct SmRaw<kFmtFp8, kH> { uint4 u[kH][9]; };
template <int kH>
struct SmRaw<kFmtNvfp4, kH> { uint2 u[kH][9]; uint32_t sf[kH][9]; };

// Walks the tiles of a CTA's segments in order, skipping segments without tiles; global reads only
// when it enters a segment (a per-tile read would put two L2 round trips on the producer's path).
struct SmCursor {
  int si, end, j, n, b, blk0, len;
  __device__ __forceinline__ void Settle(const Params& p, const Sched& s) {  // j == 0
    for (; si < end; ++si) {
      const int4 seg = s.seg[SegRow(p) + si];
      b = seg.x; blk0 = seg.y; n = seg.z - seg.y;
      if (n > 0) { len = SeqLen(p.bounds, b, p.G, p.cap); return; }
    }
  }
  __device__ __forceinline__ bool valid() const { return si < end; }
  __device__ __forceinline__ int t0() const { return (blk0 + j) * kTokTile; }
  __device__ __forceinline__ void Next(const Params& p, const Sched& s) {
    if (++j >= n) { j = 0; ++si; Settle(p, s); }
  }
};

// Page ids of this thread's two tokens of the cursor's tile (read a tile before its bytes are loaded).
template <int kH>
__device__ __forceinline__ void SmTilePages(int (&pg)[kH], const Params& p, const SmCursor& c, int tok) {
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    const int t = c.t0() + tok + 32 * h;
    pg[h] = t < c.len ? __ldg(p.page_table + (long long)c.b * p.npp + t / p.P) : 0;
  }
}

// Pool rows of this thread's two tokens of the cursor's tile; valid[h] = false past the bound (zeros, no read).
template <int kH>
__device__ __forceinline__ void SmTileRows(size_t (&row)[kH], bool (&valid)[kH], const Params& p, const SmCursor& c,
                                           const int (&pg)[kH], int tok) {
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    const int t = c.t0() + tok + 32 * h;
    valid[h] = t < c.len;
    row[h] = valid[h] ? (size_t)min(max(pg[h], 0), p.N - 1) * p.P + t % p.P : 0;
  }
}

// Raw bytes of unit j (u = q + 4j: 16 values, 0..31 latent, 32..35 rope) of both tokens.
template <int kFmt, int kH>
__device__ __forceinline__ void SmLoadUnit(SmRaw<kFmt, kH>& r, const QParams& qp, const size_t (&row)[kH],
                                           const bool (&valid)[kH], int q, int j) {
  const int u = q + 4 * j;
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    if constexpr (kFmt == kFmtFp8) {
      const uint8_t* src = j < 8 ? qp.kv_lat8 + row[h] * kDl + u * 16 : qp.kv_rope8 + row[h] * kDr + (u - 32) * 16;
      r.u[h][j] = valid[h] ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
    } else {
      const uint8_t* src = j < 8 ? qp.kv_lat8 + row[h] * (kDl / 2) + u * 8 : qp.kv_rope8 + row[h] * (kDr / 2) + (u - 32) * 8;
      const uint8_t* sf = j < 8 ? qp.lat_sf + row[h] * (kDl / 16) + u : qp.rope_sf + row[h] * (kDr / 16) + (u - 32);
      r.u[h][j] = valid[h] ? __ldg(reinterpret_cast<const uint2*>(src)) : make_uint2(0, 0);
      r.sf[h][j] = valid[h] ? (uint32_t)__ldg(sf) : 0u;
    }
  }
}

// Unit j of both tokens -> the f16 tile (element chunks 2u, 2u+1 of each token, u = q + 4j: block j).
// Values are exact: E4M3 -> f16; E2M1 * E4M3 block scale has <= 6 significant bits in [2^-10, 2688].
template <int kFmt, int kH>
__device__ __forceinline__ void SmConvertUnit(uint16_t* dst, const SmRaw<kFmt, kH>& r, int tok, int q, int j) {
  const int u = q + 4 * j;
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    uint32_t out[8];
    if constexpr (kFmt == kFmtFp8) {
      const uint4 raw = r.u[h][j];
      out[0] = Fp8x2ToT<false>(raw.x); out[1] = Fp8x2ToT<false>(raw.x >> 16);
      out[2] = Fp8x2ToT<false>(raw.y); out[3] = Fp8x2ToT<false>(raw.y >> 16);
      out[4] = Fp8x2ToT<false>(raw.z); out[5] = Fp8x2ToT<false>(raw.z >> 16);
      out[6] = Fp8x2ToT<false>(raw.w); out[7] = Fp8x2ToT<false>(raw.w >> 16);
    } else {
      const uint2 raw = r.u[h][j];
      const uint32_t sf2 = Fp8x2ToT<false>(r.sf[h][j] * 0x101u);  // the block scale in both halves
      E2m1x4ToF16(raw.x, out[0], out[1]);
      E2m1x4ToF16(raw.x >> 16, out[2], out[3]);
      E2m1x4ToF16(raw.y, out[4], out[5]);
      E2m1x4ToF16(raw.y >> 16, out[6], out[7]);
#pragma unroll
      for (int k = 0; k < 8; ++k) out[k] = MulF16x2(out[k], sf2);
    }
    const int t = tok + 32 * h;
    StShared16(dst + TileOff(t, 2 * u), out[0], out[1], out[2], out[3]);
    StShared16(dst + TileOff(t, 2 * u + 1), out[4], out[5], out[6], out[7]);
  }
}

// Quantized pages run the math in f16: the 16-row Q tile (loaded in the q dtype) is rewritten in place as
// f16 with a power-of-two row scale 2^k (row max in [2^14, 2^15): exact for every element above 2^-24 of
// the max) and qs[r] = 2^-k multiplies row r's logits. 8 producer threads per row.
// (SmQVal, the element read, and Pow2RowScale, the scale rule, live in mla_decode_seesaw.cuh: SsQToF16 shares them.)
// Power-of-two scale 2^k of Q row r (Off16 layout) that puts its max in [2^14, 2^15) (1 for an all-zero row);
// qs[r] = 2^-k. Thread `part` (0..7) of the row's 8 reads chunks part + 8 i.
template <bool kBf16>
__device__ __forceinline__ float SmQRowScale(const uint16_t* sQ, float* qs, int r, int part) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 9; ++i) {
    const uint4 v = *reinterpret_cast<const uint4*>(sQ + Off16(r, part + 8 * i));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) amax = fmaxf(amax, fmaxf(fabsf(SmQVal<kBf16>(w[k])), fabsf(SmQVal<kBf16>(w[k] >> 16))));
  }
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  return Pow2RowScale(amax, qs + r, part == 0);
}

template <bool kBf16>
__device__ __forceinline__ void SmQToF16(uint16_t* sQ, float* qs, int pt) {
  const int r = pt >> 3, part = pt & 7;
  auto val = [](uint32_t h) { return SmQVal<kBf16>(h); };
  const float sc = SmQRowScale<kBf16>(sQ, qs, r, part);
#pragma unroll
  for (int i = 0; i < 9; ++i) {
    uint16_t* ptr = sQ + Off16(r, part + 8 * i);
    const uint4 v = *reinterpret_cast<const uint4*>(ptr);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) o[kk] = Pack2<false>(val(w[kk] & 0xFFFF) * sc, val(w[kk] >> 16) * sc);
    StShared16(ptr, o[0], o[1], o[2], o[3]);
  }
}

// kNc consumer warpgroups (1 or 2; the producer is warpgroup kNc). With two, consumer w takes the tiles
// k with k % 2 == w (so buffer w), each keeps its own (m, l, O^T) and the two merge exactly at the end of a
// segment through shared memory: one consumer's softmax and barriers overlap the other's tensor work (a
// single consumer leaves the tensor cores idle during its softmax).
// kVar (timing probes of the standalone driver only; not correct kernels): bit 0 (quantized pages, with
// bit 2): the producer neither loads nor converts: the consumers' math alone; bit 1: the consumer does no
// math (waits for each tile, releases it): the producer alone; bit 2 (quantized pages): the producer
// issues no global loads (converts whatever its registers hold): dequantization + math alone; bit 3: two
// tiles of raw bytes in flight instead of one; bit 4: a producer-side proxy fence after each unit.
template <bool kBf16, int kFmt = kFmtNative, int kNc = 1, int kNp = 1, int kVar = 0>
__global__ void __launch_bounds__(128 * (kNc + kNp), 1) mla_small_gh(Params p, Sched s, QParams qp) {
  PlanThisPart(p, s);  // first: waits for the inputs (PDL); ptxas spilled more with anything live across it
  static_assert(kNc == 1 || kNc == 2, "one or two consumer warpgroups");
  static_assert(kNp == 1 || (kNp == 2 && kFmt != kFmtNative), "two producer warpgroups dequantize; cp.async uses one");
  constexpr int kH = 2 / kNp;  // tokens per producer thread
  constexpr bool kMathBf16 = kFmt == kFmtNative ? kBf16 : false;  // quantized pages: f16 tiles and Q
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  unsigned char* kbuf = smem + kSmQBytes;
  uint16_t* sPT = reinterpret_cast<uint16_t*>(smem + kSmQBytes + 2 * kSmKvBytes);  // [kNc][16 x 64]
  float* sRed = reinterpret_cast<float*>(sPT + 2 * kSmRows * 64);                 // [kNc][2][4 warps][16]
  float* sQs = sRed + 2 * 2 * 4 * 16;  // [16] quantized pages: per-row logit factor of the f16 Q (SmQToF16)
  float* sMerge = sQs + kSmRows;       // kNc == 2: [72][128] consumer 1's O^T, m, L (thread-linear)
  SsBars* bars = reinterpret_cast<SsBars*>(sMerge + (kNc == 2 ? 72 * 128 : 0));

  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 9; ++c) MbarInit(&bars->full[b][c], 128 * kNp);
      MbarInit(&bars->empty[b][0], 128);
    }
    MbarInit(&bars->q_full, 128 * kNp);
    MbarInit(&bars->q_empty, 128 * kNc);
  }
  __syncthreads();

  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  const int2 range = PartRange(p, s);  // written by PlanThisPart

  if (wg >= kNc && kFmt != kFmtNative) {
    // ---------------- producer, quantized pages: load raw bytes kAhead tiles ahead, dequantize ----------------
    if constexpr (kFmt != kFmtNative) {
      // kSlots tiles of raw bytes in registers; each unit's registers are refilled with the unit of the tile
      // kSlots ahead right after it is converted, so about kSlots tiles of bytes stay in flight.
      // One slot measured best (H200, B=64): a second tile in flight made fp8 / nvfp4 no faster (the
      // dequantization, not the loads, sets the pace) and costs registers (spills with two consumers).
      constexpr int kSlots = 1 + ((kVar & 8) ? 1 : 0);
      // Four warpgroups: registers move to the consumers (they start at 128 each, the budget of 512 threads).
      if constexpr (kNc + kNp == 4) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(SmProdRegs(kVar)));
      const int pt = threadIdx.x - 128 * kNc, tok = pt >> 2, q = pt & 3;  // tokens tok + 32 h, h < kH
      SmRaw<kFmt, kH> raw[kSlots];
      if constexpr ((kVar & 4) != 0)
#pragma unroll
        for (int d = 0; d < kSlots; ++d) raw[d] = SmRaw<kFmt, kH>{};
      SmCursor ld{range.x, range.y, 0, 0, 0, 0, 0};
      ld.Settle(p, s);
      SmCursor cv = ld;
      int pg[kH];
      size_t row[kH];
      bool lvalid[kH];
#pragma unroll
      for (int h = 0; h < kH; ++h) pg[h] = 0, row[h] = 0, lvalid[h] = false;
      if (ld.valid()) SmTilePages(pg, p, ld, tok);
      // ld: the next tile to load; row / lvalid: its rows; pg: page ids of the tile after it (read ahead).
      auto prefetch_pages = [&]() {
        SmCursor nx = ld;
        nx.Next(p, s);
        if (nx.valid()) SmTilePages(pg, p, nx, tok);
      };
      auto advance = [&]() {
        ld.Next(p, s);
#pragma unroll
        for (int h = 0; h < kH; ++h) lvalid[h] = false;
        if (ld.valid()) {
          SmTileRows(row, lvalid, p, ld, pg, tok);
          prefetch_pages();
        }
      };
      if (ld.valid()) {
        SmTilePages(pg, p, ld, tok);
        SmTileRows(row, lvalid, p, ld, pg, tok);
        prefetch_pages();
      }
#pragma unroll
      for (int d = 0; d < kSlots; ++d) {
        if (ld.valid()) {
          if constexpr ((kVar & 4) == 0)
#pragma unroll
            for (int j = 0; j < 9; ++j) SmLoadUnit<kFmt, kH>(raw[d], qp, row, lvalid, q, j);
          advance();
        }
      }
      int k = 0, sc = 0;
      while (cv.valid()) {
#pragma unroll
        for (int ph = 0; ph < kSlots; ++ph) {
          if (!cv.valid()) break;
          if (cv.j == 0) {  // a new segment: its Q, rewritten as f16 with per-row scales
            if (sc >= 1) MbarWait(&bars->q_empty, (sc - 1) & 1);
            SmLoadQ(sQ, p, cv.b, pt, 128 * kNp);
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            NamedBarSync(3, 128 * kNp);  // the whole Q tile has landed
            if (pt < 128) SmQToF16<kBf16>(sQ, sQs, pt);
            MbarArrive(&bars->q_full);  // the consumer's proxy fence follows its first block wait
            ++sc;
          }
          const int buf = k & 1, u = k >> 1;
          uint16_t* dst = reinterpret_cast<uint16_t*>(kbuf + buf * kSmKvBytes);
          if (u >= 1) MbarWait(&bars->empty[buf][0], (u - 1) & 1);
          const bool refill = ld.valid();
#pragma unroll
          for (int j = 0; j < 9; ++j) {
            if constexpr ((kVar & 1) == 0) SmConvertUnit<kFmt, kH>(dst, raw[ph], tok, q, j);
            if constexpr ((kVar & 4) == 0)
              if (refill) SmLoadUnit<kFmt, kH>(raw[ph], qp, row, lvalid, q, j);  // the tile kSlots ahead
            // No proxy fence here: the consumer fences after its acquire, as for cp.async-filled tiles (a
            // per-unit fence here also waited for the refill loads just issued: kVar bit 4 restores it).
            if constexpr ((kVar & 16) != 0) FenceProxyAsync();
            MbarArrive(&bars->full[buf][j]);
          }
          if (refill) advance();
          ++k;
          cv.Next(p, s);
        }
      }
    }
    return;
  }
  if (wg >= kNc) {
    // ---------------- producer (the seesaw's copy pattern, whole-buffer release) ----------------
    const int pt = threadIdx.x - 128 * kNc;
    const int cq = pt & 7, tg = pt >> 3;
    int k = 0, sc = 0;
    for (int si = range.x; si < range.y; ++si) {
      const int4 seg = s.seg[SegRow(p) + si];
      const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
      if (n <= 0) continue;
      const int len = SeqLen(p.bounds, b, p.G, p.cap);
      if (sc >= 1) MbarWait(&bars->q_empty, (sc - 1) & 1);
      SmLoadQ(sQ, p, b, pt, 128);
      CpAsyncMbarArrive(&bars->q_full);
      int pg_next[4];
      TilePages(p, b, blk0 * kTokTile, len, tg, pg_next);
      for (int j = 0; j < n; ++j, ++k) {
        const int buf = k & 1, u = k >> 1;
        uint16_t* dst = reinterpret_cast<uint16_t*>(kbuf + buf * kSmKvBytes);
        uint32_t row[4];
        TileRows(p, (blk0 + j) * kTokTile, len, tg, pg_next, row);
        if (j + 1 < n) TilePages(p, b, (blk0 + j + 1) * kTokTile, len, tg, pg_next);
        if (u >= 1) MbarWait(&bars->empty[buf][0], (u - 1) & 1);
#pragma unroll
        for (int c = 0; c < 9; ++c) {
          CopyKvBlock(dst, p, row, tg, cq, c);
          CpAsyncMbarArrive(&bars->full[buf][c]);
        }
      }
      ++sc;
    }
    CpAsyncWait<0>();
    return;
  }

  // ---------------- consumers ----------------
  if constexpr (kNc + kNp == 4) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(SmConsRegs(kVar)));
  const int lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3, w = kNc == 2 ? wg : 0;
  const int ta = wi * 16 + (lane >> 2), tb = ta + 8;  // this thread's two token rows of S^T (and dims of O^T)
  const int tid = threadIdx.x & 127;
  uint16_t* myPT = sPT + w * (kSmRows * 64);
  float* myRed = sRed + w * 128;
  const uint32_t qa = SmemAddr(sQ), kb0 = SmemAddr(kbuf), pta = SmemAddr(myPT);
  // Quantized pages: the tile holds code values; the per-tensor scale folds into logits and output.
  float sl2 = p.scale_log2, out_mul = 1.f;
  if constexpr (kFmt != kFmtNative) {
    out_mul = __frcp_rn(__ldg(qp.kv_scale));
    sl2 = p.scale_log2 * out_mul;
  }
  int kbase = 0, sc = 0;
  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[SegRow(p) + si];
    const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
    if (n <= 0) {
      if (w == 0 && wi == 0 && lane < 4) SmEmptyPartial(p, si, lane);
      continue;
    }
    int bq[2][2];  // bounds of this thread's four query rows (columns of S^T): q = n8 * 8 + 2 (lane & 3) + e
    SmRowBounds(bq, p, b, lane & 3);
    MbarWait(&bars->q_full, sc & 1);
    float slq[2][2];  // logit factor per query row: scale * log2(e) [* 1/kv_scale * Q row factor]
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        slq[n8][e] = kFmt == kFmtNative ? sl2 : sl2 * sQs[n8 * 8 + (lane & 3) * 2 + e];

    float oacc[8][2][4], m[2][2], l[2][2];
    StartSegmentState(oacc, m, l);

    int own = 0;  // tiles of this segment this consumer has taken
    for (int j = (kNc == 2 && ((kbase & 1) != w)) ? 1 : 0; j < n; j += kNc, ++own) {
      const int k = kbase + j, buf = k & 1, par = (k >> 1) & 1;
      const uint32_t base = kb0 + buf * kSmKvBytes;
      if constexpr ((kVar & 2) != 0) {  // probe: no math
        for (int c = 0; c < 9; ++c) MbarWait(&bars->full[buf][c], par);
        if (kNc == 2) MbarArrive(&bars->empty[buf][0]);
        else if (own >= 1) MbarArrive(&bars->empty[(k - 1) & 1][0]);
        continue;
      }
      // S^T = K Q^T: M = 64 tokens, N = 16 rows, K = 576 (9 blocks x 4 k-steps).
      float st[2][4];
      st[0][0] = st[0][1] = st[0][2] = st[0][3] = st[1][0] = st[1][1] = st[1][2] = st[1][3] = 0.f;
      FenceRegs(st);
#pragma unroll
      for (int c = 0; c < 9; ++c) {
        MbarWait(&bars->full[buf][c], par);
        FenceProxyAsync();
        WgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          Wgmma16<kMathBf16, 0, 0>(st, Desc(base + c * kBlockBytes + kk * 32, 16, 1024),
                                   Desc(qa + c * (kSmRows * 128) + kk * 32, 16, 1024));
      }
      WgCommit();
      WgWait0();  // one consumer: also retires PV_{j-1}, whose buffer goes back to the producer
      FenceRegs(st);
      FenceAcc(oacc);
      if (kNc == 1 && own >= 1) MbarArrive(&bars->empty[(k - 1) & 1][0]);

      // Column softmax (log2 units): mask token t by row q's bound, max over the 64 tokens.
      const int t0 = (blk0 + j) * kTokTile;
      float cm[2][2];
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          st[n8][e] = t0 + ta < bq[n8][e] ? st[n8][e] * slq[n8][e] : -INFINITY;
          st[n8][2 + e] = t0 + tb < bq[n8][e] ? st[n8][2 + e] * slq[n8][e] : -INFINITY;
          float v = fmaxf(st[n8][e], st[n8][2 + e]);
#pragma unroll
          for (int off = 4; off <= 16; off <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
          cm[n8][e] = v;
        }
      float* red = myRed + (own & 1) * 64;  // [4 warps][16 rows], alternating so the next tile never overwrites
      SmPutColumns(red, wi, lane, cm);
      NamedBarSync(1 + w, 128);
      float al[2][2], mu[2][2];
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = n8 * 8 + (lane & 3) * 2 + e;
          const float mx = fmaxf(fmaxf(red[q], red[16 + q]), fmaxf(red[32 + q], red[48 + q]));
          const float mn = fmaxf(m[n8][e], mx);
          mu[n8][e] = mn == -INFINITY ? 0.f : mn;
          al[n8][e] = exp2f(m[n8][e] - mu[n8][e]);
          m[n8][e] = mn;
        }
      // P^T [16 rows x 64 tokens] -> shared memory (K-major B operand of O^T += V^T P^T).
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = n8 * 8 + (lane & 3) * 2 + e;
          const float pa = exp2f(st[n8][e] - mu[n8][e]), pb = exp2f(st[n8][2 + e] - mu[n8][e]);
          l[n8][e] = l[n8][e] * al[n8][e] + pa + pb;
          uint32_t pk = Pack2<kMathBf16>(pa, pb);
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
      FenceProxyAsync();          // P^T stores -> wgmma
      NamedBarSync(1 + w, 128);   // all of P^T written
      FenceAcc(oacc);
      WgFence();
      // O^T[64 i.., 16] += V^T[dims 64 i.., 16 tokens] P^T[16 tokens, 16 rows], V^T read MN-major.
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 8; ++i)
          Wgmma16<kMathBf16, 1, 0>(oacc[i], Desc(base + i * kBlockBytes + kk * 16 * 128, kBlockBytes, 1024),
                                   Desc(pta + kk * 32, 16, 1024));
      WgCommit();
      if constexpr (kNc == 2) {
        // Two consumers: buffer w holds this consumer's next tile too, so it is released as soon as PV is
        // done (the other consumer's work fills the gap a one-consumer kernel covers by deferring).
        WgWait0();
        FenceAcc(oacc);
        MbarArrive(&bars->empty[buf][0]);
      }
    }
    WgWait0();
    FenceAcc(oacc);
    if (kNc == 1 && own >= 1) MbarArrive(&bars->empty[(kbase + n - 1) & 1][0]);  // the segment's last tile
    MbarArrive(&bars->q_empty);

    // Column sums over the 64 token rows: shuffle, then the 4 warps through shared memory.
    float Lq[2][2];  // red: the buffer the last tile's max exchange did not use
    SmColumnSums(Lq, l, myRed + (own & 1) * 64, w, wi, lane);
    if constexpr (kNc == 2) SmMergeConsumers(w, tid, sMerge, oacc, m, Lq);  // consumer 0 writes the partial
    if (w == 0) {
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = n8 * 8 + (lane & 3) * 2 + e;
          const float L = Lq[n8][e];
          if (q >= p.GH) continue;
          const float inv = L > 0.f ? out_mul / L : 0.f;
          uint16_t* o = p.o_part + ((long long)si * p.GH + q) * kDl;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const uint32_t u = Pack2<kBf16>(oacc[i][n8][e] * inv, oacc[i][n8][2 + e] * inv);
            o[i * 64 + ta] = (uint16_t)(u & 0xffffu);
            o[i * 64 + tb] = (uint16_t)(u >> 16);
          }
          if (wi == 0 && lane < 4) p.lse_part[(long long)si * p.GH + q] = L > 0.f ? (m[n8][e] + __log2f(L)) * kLn2 : -INFINITY;
        }
    }
    if constexpr (kNc == 2) NamedBarSync(4, 256);  // sMerge is rewritten by the next segment
    NamedBarSync(1 + w, 128);                     // red is reused by the next segment
    kbase += n;
    ++sc;
  }
}

}  // namespace
}  // namespace helix_ffi
