// Split-KV kernel for G*H <= 16 query rows (HELIX_MLA_DECODE_KERNEL=small; experimental). Included by
// mla_decode_cuda.cu after mla_decode_seesaw.cuh (reuses its mbarrier helpers and the SsBars layout).
//
// With few query rows a 64-row tile is 3/4 padding, so the math runs transposed with the 64 tokens of a KV
// tile as the wgmma M dimension: S^T[64 tok, 16 rows] = K Q^T (A = the K tile, K-major; B = Q, 16 rows) and
// O^T[512, 16] += V^T P^T (A = the same tile read MN-major, 8 x m64 blocks of latent dims; B = P^T [16 rows,
// 64 tokens] in shared memory). A quarter of the padded kernel's tensor work, so the KV loads set the pace.
// One consumer warpgroup walks the tiles in order (one tile in math while the next loads), the softmax is
// per column (query row): max / sum over the 64 tokens through a warp shuffle and a 4-warp exchange.
// The producer warpgroup is the seesaw's (cp.async, per-block full barriers); a buffer is released whole.
#pragma once

namespace helix_ffi {
namespace {

constexpr int kSmRows = 16;
constexpr int kSmQBytes = kSmRows * kD * 2;   // 18432: 9 blocks of [16 rows x 128 B]
constexpr int kSmKvBytes = kTileElems * 2;    // 73728 per 64-token tile
constexpr int kSmSmemBytes = kSmQBytes + 2 * kSmKvBytes + kSmRows * 64 * 2 + 4 * 16 * 4 * 2 + 64 * 8 + 1024;

// Q (16 rows) and P^T (16 rows x 64 tokens): 128-byte-swizzle K-major blocks of [16 rows x 64 elements].
__device__ __forceinline__ int Off16(int row, int ch) {
  return (ch >> 3) * (kSmRows * 64) + row * 64 + (((ch & 7) ^ (row & 7)) << 3);
}

template <bool kBf16, int kTA, int kTB>
__device__ __forceinline__ void Wgmma16(float (&d)[2][4], uint64_t da, uint64_t db) {
  if constexpr (kBf16) Wgmma_m64n16_bf16<kTA, kTB>(d, da, db); else Wgmma_m64n16_f16<kTA, kTB>(d, da, db);
}

template <bool kBf16>
__global__ void __launch_bounds__(256, 1) mla_small_gh(Params p, Sched s) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  unsigned char* kbuf = smem + kSmQBytes;
  uint16_t* sPT = reinterpret_cast<uint16_t*>(smem + kSmQBytes + 2 * kSmKvBytes);
  float* sRed = reinterpret_cast<float*>(smem + kSmQBytes + 2 * kSmKvBytes + kSmRows * 64 * 2);  // [2][4 warps][16]
  SsBars* bars = reinterpret_cast<SsBars*>(sRed + 2 * 4 * 16);

  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 9; ++c) MbarInit(&bars->full[b][c], 128);
      MbarInit(&bars->empty[b][0], 128);
    }
    MbarInit(&bars->q_full, 128);
    MbarInit(&bars->q_empty, 128);
  }
  __syncthreads();

  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  const int2 range = s.part[blockIdx.x];

  if (wg == 1) {
    // ---------------- producer (the seesaw's copy pattern, whole-buffer release) ----------------
    const int pt = threadIdx.x - 128;
    const int cq = pt & 7, tg = pt >> 3;
    int k = 0, sc = 0;
    for (int si = range.x; si < range.y; ++si) {
      const int4 seg = s.seg[si];
      const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
      if (n <= 0) continue;
      const int len = SeqLen(p.bounds, b, p.G, p.cap);
      if (sc >= 1) MbarWait(&bars->q_empty, (sc - 1) & 1);
      for (int i = pt; i < kSmRows * kChunks; i += 128) {
        const int r = i / kChunks, ch = i - r * kChunks;
        const bool valid = r < p.GH;
        const long long qrow = (long long)b * p.GH + r;
        CpAsync16(sQ + Off16(r, ch), valid ? QChunk(p, qrow, ch) : p.q_lat, valid);
      }
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

  // ---------------- consumer: one warpgroup ----------------
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int ta = wi * 16 + (lane >> 2), tb = ta + 8;  // this thread's two token rows of S^T (and dims of O^T)
  const uint32_t qa = SmemAddr(sQ), kb0 = SmemAddr(kbuf), pta = SmemAddr(sPT);
  int kbase = 0, sc = 0;
  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[si];
    const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
    if (n <= 0) {
      for (int q = lane & 3; q < p.GH; q += 4)  // never produced by the schedule; keep the partial defined
        if (wi == 0 && lane < 4) {
          for (int d = 0; d < kDl; ++d) p.o_part[((long long)si * p.GH + q) * kDl + d] = 0.f;
          p.lse_part[(long long)si * p.GH + q] = -INFINITY;
        }
      continue;
    }
    // This thread's four query rows (columns of S^T): q = n8 * 8 + (lane & 3) * 2 + e.
    int bq[2][2];
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q = n8 * 8 + (lane & 3) * 2 + e;
        bq[n8][e] = q < p.GH ? min(max(p.bounds[b * p.G + q / p.H], 0), p.cap) : 0;
      }
    MbarWait(&bars->q_full, sc & 1);

    float oacc[8][2][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) oacc[i][n8][0] = oacc[i][n8][1] = oacc[i][n8][2] = oacc[i][n8][3] = 0.f;
    float m[2][2], l[2][2];
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8) m[n8][0] = m[n8][1] = -INFINITY, l[n8][0] = l[n8][1] = 0.f;

    for (int j = 0; j < n; ++j) {
      const int k = kbase + j, buf = k & 1, par = (k >> 1) & 1;
      const uint32_t base = kb0 + buf * kSmKvBytes;
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
          Wgmma16<kBf16, 0, 0>(st, Desc(base + c * kBlockBytes + kk * 32, 16, 1024),
                               Desc(qa + c * (kSmRows * 128) + kk * 32, 16, 1024));
      }
      WgCommit();
      WgWait0();  // also retires PV_{j-1}: its buffer goes back to the producer
      FenceRegs(st);
      FenceRegs(oacc[0]); FenceRegs(oacc[1]); FenceRegs(oacc[2]); FenceRegs(oacc[3]);
      FenceRegs(oacc[4]); FenceRegs(oacc[5]); FenceRegs(oacc[6]); FenceRegs(oacc[7]);
      if (j >= 1) MbarArrive(&bars->empty[(k - 1) & 1][0]);

      // Column softmax (log2 units): mask token t by row q's bound, max over the 64 tokens.
      const int t0 = (blk0 + j) * kTokTile;
      float cm[2][2];
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          st[n8][e] = t0 + ta < bq[n8][e] ? st[n8][e] * p.scale_log2 : -INFINITY;
          st[n8][2 + e] = t0 + tb < bq[n8][e] ? st[n8][2 + e] * p.scale_log2 : -INFINITY;
          float v = fmaxf(st[n8][e], st[n8][2 + e]);
#pragma unroll
          for (int off = 4; off <= 16; off <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
          cm[n8][e] = v;
        }
      float* red = sRed + (j & 1) * 64;  // [4 warps][16 rows], alternating so the next tile never overwrites
      if (lane < 4)
#pragma unroll
        for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
          for (int e = 0; e < 2; ++e) red[wi * 16 + n8 * 8 + lane * 2 + e] = cm[n8][e];
      NamedBarSync(1, 128);
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
          uint32_t pk = Pack2<kBf16>(pa, pb);
          sPT[Off16(q, ta >> 3) + (ta & 7)] = (uint16_t)(pk & 0xFFFF);
          sPT[Off16(q, tb >> 3) + (tb & 7)] = (uint16_t)(pk >> 16);
        }
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int n8 = 0; n8 < 2; ++n8) {
          oacc[i][n8][0] *= al[n8][0]; oacc[i][n8][1] *= al[n8][1];
          oacc[i][n8][2] *= al[n8][0]; oacc[i][n8][3] *= al[n8][1];
        }
      FenceProxyAsync();       // P^T stores -> wgmma
      NamedBarSync(1, 128);    // all of P^T written
      FenceRegs(oacc[0]); FenceRegs(oacc[1]); FenceRegs(oacc[2]); FenceRegs(oacc[3]);
      FenceRegs(oacc[4]); FenceRegs(oacc[5]); FenceRegs(oacc[6]); FenceRegs(oacc[7]);
      WgFence();
      // O^T[64 i.., 16] += V^T[dims 64 i.., 16 tokens] P^T[16 tokens, 16 rows], V^T read MN-major.
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 8; ++i)
          Wgmma16<kBf16, 1, 0>(oacc[i], Desc(base + i * kBlockBytes + kk * 16 * 128, kBlockBytes, 1024),
                               Desc(pta + kk * 32, 16, 1024));
      WgCommit();
    }
    WgWait0();
    FenceRegs(oacc[0]); FenceRegs(oacc[1]); FenceRegs(oacc[2]); FenceRegs(oacc[3]);
    FenceRegs(oacc[4]); FenceRegs(oacc[5]); FenceRegs(oacc[6]); FenceRegs(oacc[7]);
    MbarArrive(&bars->empty[(kbase + n - 1) & 1][0]);
    MbarArrive(&bars->q_empty);

    // Column sums over the 64 token rows: shuffle, then the 4 warps through shared memory.
    float* red = sRed + (n & 1) * 64;  // the buffer the last tile's max exchange did not use
    float lt[2][2];
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = l[n8][e];
#pragma unroll
        for (int off = 4; off <= 16; off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        lt[n8][e] = v;
      }
    NamedBarSync(1, 128);
    if (lane < 4)
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int e = 0; e < 2; ++e) red[wi * 16 + n8 * 8 + lane * 2 + e] = lt[n8][e];
    NamedBarSync(1, 128);
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q = n8 * 8 + (lane & 3) * 2 + e;
        const float L = red[q] + red[16 + q] + red[32 + q] + red[48 + q];
        if (q >= p.GH) continue;
        const float inv = L > 0.f ? 1.f / L : 0.f;
        float* o = p.o_part + ((long long)si * p.GH + q) * kDl;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          o[i * 64 + ta] = oacc[i][n8][e] * inv;
          o[i * 64 + tb] = oacc[i][n8][2 + e] * inv;
        }
        if (wi == 0 && lane < 4) p.lse_part[(long long)si * p.GH + q] = L > 0.f ? (m[n8][e] + __log2f(L)) * kLn2 : -INFINITY;
      }
    NamedBarSync(1, 128);  // red is reused by the next segment
    kbase += n;
    ++sc;
  }
}

}  // namespace
}  // namespace helix_ffi
