// NVFP4 pages, G*H <= 16 query rows (HELIX_MLA_DECODE_DEQUANT=auto|small4, the default for nvfp4): the raw
// tile (E2M1 codes + E4M3 block scales, 324 B per token) stays raw in shared memory and both products take
// their A operand from registers, decoded there. Included by mla_decode_cuda.cu after mla_decode_small_q8.cuh
// (same warpgroups and ring; its RawTileSoftmax and RawTileSegmentEnd; see that file).
//
// Why: Hopper has no fp4 tensor cores, so every code needs a decode to f16, and the producer-dequantizing kernel
// of mla_decode_small.cuh writes the decoded 16-bit tile back to shared memory (72 KB per tile) and reads it
// twice: 0.98x of bf16 at B=64, H=16, G=1, L=64K. Here, per 64-token tile (20736 B raw, see Q4Off):
//   S^T[64 tok, 16 rows] = K Q^T as 36 x m64n16k16 f16 with A = K from registers. The k order inside the
//       product is ours to choose (Q^T is written in the same order), so thread c4 (lane % 4) owns latent
//       dims 128 c4 .. 128 c4 + 127 of its two token rows: one 16-byte ld.shared per token per 8 k-steps
//       (32 codes = two scale blocks) and one 8-byte load of the token's 8 block scales per tile; the rope
//       (64 dims) is one 8-byte load (rope block c4). k-step s, slot 2 c + e0 + 8 e1 <-> latent dim
//       128 c + 4 s + 2 e1 + e0 (Q4Perm);
//   O^T[512, 16] += V^T P^T as 32 x m64n16k16 f16 with A = V^T from registers, M rows permuted as in
//       mla_small_q8 (row 16 w + g + 8 h of m-block i = latent dim 128 w + 16 g + 2 i + h), so a thread's
//       16 dims per token are one scale block: 8 code bytes + 1 scale per token.
// Decode: E2m1x4ToF16 (byte-permute lookup of the f16 high bytes, the sign by a second permute) and one
// f16x2 multiply by the block scale (e2m1 * sf has <= 6 significant bits in [2^-10, 2688]: exact in f16).
// Q is rewritten once per segment as f16 with a power-of-two row scale (Q4FromQ, as SmQToF16), so the logits
// take scale * log2(e) * fl32(1 / global_scale) * 2^-k_r and the output fl32(1 / global_scale): the kernel
// computes the reference's dequantized decode up to float32 rounding.
#pragma once

namespace helix_ffi {
namespace {

// Even: consumer w takes the tiles k with k % 2 == w, so with an even ring a buffer's previous tile was the same
// consumer's and its full barrier can only be one phase behind the one waited for. With an odd ring (5, measured)
// the previous tile of a buffer belonged to the other consumer, could still be in flight, and a parity wait for
// the next phase then returned at once: a B=64 run read unloaded tiles and ended in a launch failure.
constexpr int kQ4Bufs = 4;
static_assert(kQ4Bufs % 2 == 0, "the full-barrier parity waits need each buffer to stay with one consumer");
constexpr int kQ4TileUsed = kNv4RawBytes;  // 20736: latent codes 16384 + rope codes 2048 + latent sf 2048 + rope sf 256
constexpr int kQ4TileBytes = 21504;          // stride: the 128-byte-swizzle latent blocks need 1024-byte alignment
constexpr int kQ4RopeOff = 16384, kQ4LsfOff = 18432, kQ4RsfOff = 20480;
static_assert(kQ4TileBytes % 1024 == 0 && kQ4TileBytes >= kQ4TileUsed, "q4 tile stride");
struct Q4Bars {
  uint64_t full[kQ4Bufs];   // TMA: 1 arrival + the tile's bytes; cp.async producer: 128 (one per producer thread)
  uint64_t empty[kQ4Bufs];  // one arrival per warp of the consuming warpgroup
  uint64_t q_full, q_empty;
};
// Byte -> f16x2 decode table (the default decode; kVar bits 5 / 6 decode by permutes instead): 256 entries x 32 lanes x 4 B, entry e of lane l at (32 e + l) * 4, so a
// warp's lookups of any 32 bytes hit 32 distinct banks.
constexpr int kQ4LutBytes = 256 * 32 * 4;
// Ring, 16-bit Q as loaded, f16 Q in the product's k order, P^T x 2, softmax exchange x 2, Q row factors,
// merge area, decode table, barriers.
constexpr int kQ4SmemBytes = kQ4Bufs * kQ4TileBytes + 2 * kSmQBytes + 2 * kSmRows * 64 * 2 + 2 * 2 * 4 * 16 * 4 +
                             kSmRows * 4 + 72 * 128 * 4 + kQ4LutBytes + (int)sizeof(Q4Bars) + 1024;
static_assert(kQ4SmemBytes <= 227 * 1024, "mla_small_q4 exceeds the opt-in shared memory");

// Byte offset of 16-byte latent-code chunk ch (0..15) of token row t: 2 blocks of [64 x 128 B], 128-byte swizzle.
__device__ __forceinline__ int Q4Off(int t, int ch) {
  return (ch >> 3) * (kTokTile * 128) + t * 128 + (((ch & 7) ^ (t & 7)) << 4);
}

// Position of feature f (0..575) in the f16 Q tile's k order (see the header): latent f = 128 c + 4 s + 2 e1 + e0
// -> 16 s + 2 c + 8 e1 + e0; rope f = 512 + 16 c + 4 s + 2 e1 + e0 -> 512 + 16 s + 2 c + 8 e1 + e0.
__device__ __forceinline__ int Q4Perm(int f) {
  const int e0 = f & 1, e1 = (f >> 1) & 1;
  if (f < kDl) return 16 * ((f & 127) >> 2) + 2 * (f >> 7) + 8 * e1 + e0;
  const int r = f - kDl;
  return kDl + 16 * ((r & 15) >> 2) + 2 * (r >> 4) + 8 * e1 + e0;
}

// The 16-bit Q tile (Off16 layout, rows >= G*H zero) -> f16 in Q4Perm order (Off16 layout over the permuted
// index) with a power-of-two row scale 2^k (row max in [2^14, 2^15), as SmQToF16); qs[r] = 2^-k. 8 threads per row.
template <bool kBf16>
__device__ __forceinline__ void Q4FromQ(uint16_t* sQp, float* qs, const uint16_t* sQ, int pt) {
  const int r = pt >> 3, part = pt & 7;
  auto val = [](uint32_t h) { return SmQVal<kBf16>(h); };
  const float sc = SmQRowScale<kBf16>(sQ, qs, r, part);
#pragma unroll 1
  for (int i = 0; i < 9; ++i) {
    const int ch = part + 8 * i;  // features 8 ch .. 8 ch + 7
    const uint4 v = *reinterpret_cast<const uint4*>(sQ + Off16(r, ch));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // features 8 ch + 2 kk, + 1 -> positions kappa, kappa + 1 (kappa even)
      const int kap = Q4Perm(8 * ch + 2 * kk);
      *reinterpret_cast<uint32_t*>(sQp + Off16(r, kap >> 3) + (kap & 7)) = Pack2<false>(val(w[kk]) * sc, val(w[kk] >> 16) * sc);
    }
  }
}

// Raw bytes of token row tg of a tile by cp.async (zero fill past the bound: code 0 = 0.0, scale 0), half h of
// the 16-byte units (2 threads per token): latent chunks h, h + 2, .., rope codes and latent scales unit h, the
// rope scales (4 B) by h = 0.
__device__ __forceinline__ void Q4CopyRow(unsigned char* dst, const QParams& qp, size_t row, bool valid, int tg, int h) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int ch = h + 2 * i;
    CpAsync16(dst + Q4Off(tg, ch), qp.kv_lat8 + row * (kDl / 2) + ch * 16, valid);
  }
  CpAsync16(dst + kQ4RopeOff + tg * 32 + h * 16, qp.kv_rope8 + row * (kDr / 2) + h * 16, valid);
  CpAsync16(dst + kQ4LsfOff + tg * 32 + h * 16, qp.lat_sf + row * (kDl / 16) + h * 16, valid);
  if (h == 0) CpAsync4(dst + kQ4RsfOff + tg * 4, qp.rope_sf + row * (kDr / 16), valid);
}

// Block scale byte pair (lo: token t, hi: token t + 1) -> f16x2.
__device__ __forceinline__ uint32_t Sf2(uint32_t lo, uint32_t hi) { return Fp8x2ToT<false>(lo | (hi << 8)); }

// Eight E2M1 codes (4 bytes) times the f16x2 scale sf2 -> 4 f16x2 words: out[i] from byte i (low nibble -> low
// half). kLut: each byte looked up in the shared-memory table (lut_lane = the table's address + 4 lane): a byte
// permute, an address multiply-add and one conflict-free ld.shared per byte, instead of ~3.5 integer-pipe
// operations per byte (two permutes, a mask, a shift, a logic op), the pipe that bounds the register decode.
template <bool kNoDecode, bool kLut>
__device__ __forceinline__ void E2m1x8Scaled(uint32_t w, uint32_t sf2, uint32_t (&out)[4], uint32_t lut_lane) {
  if constexpr (kNoDecode) {  // probe: raw bits, no lookup, no multiply
    out[0] = w; out[1] = w >> 8; out[2] = w >> 16; out[3] = w >> 24;
  } else if constexpr (kLut) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t byte = Prmt(w, 0u, 0x4440u | i), addr = lut_lane + byte * 128u;
      uint32_t v;
      asm("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));  // the table is constant after the kernel's first barrier
      out[i] = MulF16x2(v, sf2);
    }
  } else {
    E2m1x4ToF16(w, out[0], out[1]);
    E2m1x4ToF16(w >> 16, out[2], out[3]);
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = MulF16x2(out[k], sf2);
  }
}

// kVar (timing probes of the standalone driver only; not correct kernels): bit 0: the producer issues no loads
// (arrives on empty tiles): the consumers' math alone; bit 1: the consumers do no math: the producer alone;
// bit 2: no decode (raw code bits into the products); bit 3: no S wgmma; bit 4: no PV wgmma.
// Variants (correct): bits 5 / 6: S / PV decode in registers by byte permutes (E2m1x4ToF16) instead of the table;
// bit 7: the cp.async producer even where TMA could run (chosen by the launch); bit 8: every consumer thread arrives
// on a buffer's empty barrier (instead of lane 0 of each warp after __syncwarp).
template <bool kBf16, bool kTma, int kVar = 0>
__global__ void __launch_bounds__(384, 1) mla_small_q4(Params p, Sched s, QParams qp, const __grid_constant__ Q4Maps maps) {
  PlanThisPart(p, s);  // first: waits for the inputs (PDL); ptxas spilled more with anything live across it
  constexpr bool kNoDecode = (kVar & 4) != 0, kLutS = (kVar & 32) == 0, kLutPV = (kVar & 64) == 0;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  unsigned char* ring = smem;                                      // 1024-aligned tiles
  uint16_t* sQ = reinterpret_cast<uint16_t*>(ring + kQ4Bufs * kQ4TileBytes);  // 16-bit Q as loaded (Off16 layout)
  uint16_t* sQp = sQ + kSmQBytes / 2;                              // f16 Q in Q4Perm order
  uint16_t* sPT = sQp + kSmQBytes / 2;                             // [2][16 x 64]
  float* sRed = reinterpret_cast<float*>(sPT + 2 * kSmRows * 64);  // [2][2][4 warps][16]
  float* sQs = sRed + 2 * 2 * 4 * 16;                              // [16] per Q row: 2^-k
  float* sMerge = sQs + kSmRows;                                   // [72][128] consumer 1's O^T, m, L
  uint32_t* sLut = reinterpret_cast<uint32_t*>(sMerge + 72 * 128); // [256][32] decode table (kLut)
  Q4Bars* bars = reinterpret_cast<Q4Bars*>(sLut + kQ4LutBytes / 4);

  if constexpr (kLutS || kLutPV) {
    for (int i = threadIdx.x; i < 256 * 32; i += 384) {
      uint32_t lo, hi;
      E2m1x4ToF16(i >> 5, lo, hi);  // byte i / 32: its two codes -> f16x2
      sLut[i] = lo;
    }
  }

  if (threadIdx.x == 0) {
    for (int b = 0; b < kQ4Bufs; ++b) {
      MbarInit(&bars->full[b], kTma ? 1 : 128);
      MbarInit(&bars->empty[b], (kVar & 256) ? 128 : 4);  // kVar bit 8: every consumer thread arrives
    }
    MbarInit(&bars->q_full, 128);
    MbarInit(&bars->q_empty, 256);
  }
  __syncthreads();

  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  const int2 range = PartRange(p, s);  // written by PlanThisPart

  if (wg == 2) {
    // ---------------- producer: Q per segment, raw KV tiles (TMA + one bulk copy, or cp.async) ----------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 96;\n");
    const int pt = threadIdx.x - 256;
    if constexpr (kTma) {
      if (pt == 0) {
        PrefetchTensorMap(&maps.lat);
        PrefetchTensorMap(&maps.rope);
        PrefetchTensorMap(&maps.lsf);
      }
    }
    const int tg = pt >> 1, hh = pt & 1;  // cp.async: token row tg, half hh of its units
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
      Q4FromQ<kBf16>(sQp, sQs, sQ, pt);
      FenceProxyAsync();     // f16 Q (generic stores) -> the consumers' wgmma
      MbarArrive(&bars->q_full);
      ++sc;
      auto page_of = [&](int t0) { return t0 < len ? PageOf(p, b, t0) : 0; };
      if constexpr (kTma) {
        // Warp 0 waits, lane 0 issues whole tiles (3 boxes + 1 bulk copy; page id read a tile ahead). A partial
        // last tile goes through cp.async by all 128 threads; after a producer barrier thread 0 arrives.
        int pg_next = pt < 32 ? page_of(blk0 * kTokTile) : 0;
        for (int j = 0; j < n; ++j, ++k) {
          const int buf = k % kQ4Bufs, u = k / kQ4Bufs, t0 = (blk0 + j) * kTokTile;
          unsigned char* dst = ring + buf * kQ4TileBytes;
          if (WholeTile(t0, len)) {
            if (pt >= 32) continue;
            const int y = pg_next * p.P + t0 % p.P;
            if (j + 1 < n) pg_next = page_of(t0 + kTokTile);
            if (u >= 1) MbarWait(&bars->empty[buf], (u - 1) & 1);
            if (pt == 0) {
              MbarArriveExpectTx(&bars->full[buf], kQ4TileUsed);
              if constexpr ((kVar & 1) == 0) {
                Nv4TmaTile(dst, dst + kQ4RopeOff, dst + kQ4LsfOff, dst + kQ4RsfOff, maps, qp, y, &bars->full[buf]);
              } else {
                asm volatile("mbarrier.complete_tx.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(&bars->full[buf])),
                             "r"(kQ4TileUsed) : "memory");
              }
            }
            __syncwarp();
          } else {
            // Warps 1..3 skipped the whole tiles' empty waits; a parity wait can only be trusted for the latest
            // phase, so warp 0 waits first and the others follow it through the barrier.
            if (pt < 32 && u >= 1) MbarWait(&bars->empty[buf], (u - 1) & 1);
            NamedBarSync(5, 128);
            const int t = t0 + tg;
            const bool valid = t < len;
            const size_t row = valid ? (size_t)PageOf(p, b, t) * p.P + t % p.P : 0;
            if constexpr ((kVar & 1) == 0) Q4CopyRow(dst, qp, row, valid, tg, hh);
            CpAsyncWaitAll();
            NamedBarSync(5, 128);
            if (pt == 0) MbarArrive(&bars->full[buf]);
          }
        }
        continue;
      }
      // cp.async: 2 threads per token row, page id read a tile ahead.
      int pg = (blk0 * kTokTile + tg) < len ? __ldg(p.page_table + (long long)b * p.npp + (blk0 * kTokTile + tg) / p.P) : 0;
      for (int j = 0; j < n; ++j, ++k) {
        const int buf = k % kQ4Bufs, u = k / kQ4Bufs;
        const int t = (blk0 + j) * kTokTile + tg;
        const bool valid = t < len;
        const size_t row = valid ? (size_t)min(max(pg, 0), p.N - 1) * p.P + t % p.P : 0;
        if (j + 1 < n) pg = t + kTokTile < len ? __ldg(p.page_table + (long long)b * p.npp + (t + kTokTile) / p.P) : 0;
        if (u >= 1) MbarWait(&bars->empty[buf], (u - 1) & 1);
        if constexpr ((kVar & 1) == 0) Q4CopyRow(ring + buf * kQ4TileBytes, qp, row, valid, tg, hh);
        CpAsyncMbarArrive(&bars->full[buf]);
      }
    }
    CpAsyncWaitAll();
    return;
  }

  // ---------------- consumers: w takes the tiles k with k % 2 == w ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 200;\n");  // 96 + 2 x 200 <= 3 x 168
  const int w = wg, lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3, tid = threadIdx.x & 127;
  const int g = lane >> 2, c4 = lane & 3;
  const int ta = wi * 16 + g, tb = ta + 8;  // this thread's two token rows of S^T
  uint16_t* myPT = sPT + w * (kSmRows * 64);
  float* myRed = sRed + w * 128;
  const uint32_t qpa = SmemAddr(sQp), pta = SmemAddr(myPT), lut_lane = SmemAddr(sLut) + 4 * lane;
  const float out_mul = __frcp_rn(__ldg(qp.kv_scale)), sl2 = p.scale_log2 * out_mul;
  int kbase = 0, sc = 0;
  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[SegRow(p) + si];
    const int b = seg.x, blk0 = seg.y, n = seg.z - seg.y;
    if (n <= 0) {
      if (w == 0 && wi == 0 && lane < 4) SmEmptyPartial(p, si, lane);
      continue;
    }
    int bq[2][2];  // bounds of this thread's four query rows (columns of S^T): q = n8 * 8 + 2 c4 + e
    SmRowBounds(bq, p, b, c4);
    MbarWait(&bars->q_full, sc & 1);
    float slq[2][2];  // scale * log2(e) / global_scale * 2^-k of the row
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int e = 0; e < 2; ++e) slq[n8][e] = sl2 * sQs[n8 * 8 + c4 * 2 + e];

    float oacc[8][2][4], m[2][2], l[2][2];
    StartSegmentState(oacc, m, l);

    int own = 0;
    for (int j = ((kbase & 1) != w) ? 1 : 0; j < n; j += 2, ++own) {
      const int k = kbase + j, buf = k % kQ4Bufs, par = (k / kQ4Bufs) & 1;
      const unsigned char* tile = ring + buf * kQ4TileBytes;
      MbarWait(&bars->full[buf], par);
      if constexpr ((kVar & 2) != 0) {  // probe: no math
        __syncwarp();
        if ((kVar & 256) || lane == 0) MbarArrive(&bars->empty[buf]);
        continue;
      }
      // S^T = K Q^T in 9 units of 4 k-steps (one scale block per token row each): units 2 G, 2 G + 1 share one
      // 16-byte load per token row (latent group G: 128 dims), unit 8 is the rope. One commit group per unit, at
      // most two in flight, so 32 fragment registers stay pinned (more made ptxas serialise the wgmmas: C7511).
      float s2[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) s2[i][0] = s2[i][1] = s2[i][2] = s2[i][3] = 0.f;
      FenceRegs(s2);
      const uint2 sfa = *reinterpret_cast<const uint2*>(tile + kQ4LsfOff + ta * 32 + 8 * c4);  // blocks 8 c4 .. + 7
      const uint2 sfb = *reinterpret_cast<const uint2*>(tile + kQ4LsfOff + tb * 32 + 8 * c4);
      uint4 xa = make_uint4(0, 0, 0, 0), xb = xa;
#pragma unroll
      for (int un = 0; un < 9; ++un) {
        // The A registers of unit un - 2 are free again after a wait. The first one retires everything (this
        // consumer's last PVs of its previous tile too): with wait_group 1 there ptxas could not tell which PV
        // groups were still in flight and serialised every wgmma (C7514).
        if (un == 2) WgWait0();
        else if (un > 2) WgWait<1>();
        uint32_t wa[2], wb[2], s2a, s2b;
        if (un < 8) {
          if ((un & 1) == 0) {
            xa = *reinterpret_cast<const uint4*>(tile + Q4Off(ta, 4 * c4 + (un >> 1)));
            xb = *reinterpret_cast<const uint4*>(tile + Q4Off(tb, 4 * c4 + (un >> 1)));
          }
          wa[0] = (un & 1) ? xa.z : xa.x; wa[1] = (un & 1) ? xa.w : xa.y;
          wb[0] = (un & 1) ? xb.z : xb.x; wb[1] = (un & 1) ? xb.w : xb.y;
          const int sh = 8 * (un & 3);  // block 8 c4 + un: byte un of the thread's 8 scale bytes
          const uint32_t sa = ((un < 4 ? sfa.x : sfa.y) >> sh) & 0xFF, sb = ((un < 4 ? sfb.x : sfb.y) >> sh) & 0xFF;
          s2a = Sf2(sa, sa); s2b = Sf2(sb, sb);
        } else {  // rope: codes 8 c4 .. 8 c4 + 7 of the token's 32, block c4
          const uint2 ra = *reinterpret_cast<const uint2*>(tile + kQ4RopeOff + ta * 32 + 8 * c4);
          const uint2 rb = *reinterpret_cast<const uint2*>(tile + kQ4RopeOff + tb * 32 + 8 * c4);
          wa[0] = ra.x; wa[1] = ra.y; wb[0] = rb.x; wb[1] = rb.y;
          const uint32_t sa = tile[kQ4RsfOff + ta * 4 + c4], sb = tile[kQ4RsfOff + tb * 4 + c4];
          s2a = Sf2(sa, sa); s2b = Sf2(sb, sb);
        }
        uint32_t af[4][4];  // [k-step of the unit][fragment register]: word q holds k-steps 2 q (bytes 0, 1), 2 q + 1
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          uint32_t da[4], db[4];
          E2m1x8Scaled<kNoDecode, kLutS>(wa[q], s2a, da, lut_lane);
          E2m1x8Scaled<kNoDecode, kLutS>(wb[q], s2b, db, lut_lane);
          af[2 * q][0] = da[0]; af[2 * q][2] = da[1]; af[2 * q + 1][0] = da[2]; af[2 * q + 1][2] = da[3];
          af[2 * q][1] = db[0]; af[2 * q][3] = db[1]; af[2 * q + 1][1] = db[2]; af[2 * q + 1][3] = db[3];
        }
        WgFence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const int kstep = 4 * un + ks;  // 0..35; Q4Perm positions 16 kstep .. 16 kstep + 15
          if constexpr ((kVar & 8) == 0)
            Wgmma_m64n16_f16_rs(s2, af[ks], Desc(qpa + (kstep >> 2) * (kSmRows * 128) + (kstep & 3) * 32, 16, 1024));
          else
            s2[0][0] += __uint_as_float(af[ks][0] ^ af[ks][1] ^ af[ks][2] ^ af[ks][3]) * 0.f;
        }
        WgCommit();
      }
      WgWait0();  // also retires this consumer's PV of its previous tile
      FenceRegs(s2);
      float st[2][4];  // logits (log2 units, before masking) of query rows n8 * 8 + 2 c4 + (i & 1)
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
        for (int i = 0; i < 4; ++i) st[n8][i] = s2[n8][i] * slq[n8][i & 1];
      FenceAcc(oacc);

      // Column softmax (log2 units), P^T, O^T rescaled.
      RawTileSoftmax(st, bq, (blk0 + j) * kTokTile, ta, tb, w, wi, lane, myRed + (own & 1) * 64, myPT, m, l, oacc);
      FenceAcc(oacc);
      // O^T += V^T P^T, 16 tokens per step. A thread's dims are latent block 8 wi + g: code bytes 64 wi + 8 g .. + 7
      // (logical chunk 4 wi + g / 2, half g & 1) and scale byte 8 wi + g of each token.
      const unsigned char* vt = tile + (wi >> 1) * (kTokTile * 128) + (g & 1) * 8;
      const int vch = 4 * (wi & 1) + (g >> 1);
      const unsigned char* vsf = tile + kQ4LsfOff + 8 * wi + g;
      // One commit group per 16 tokens and half of the m-blocks, at most two in flight: 32 fragment registers
      // pinned (whole 16-token steps pinned 64 and spilled at setmaxnreg 200).
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t xw[2][2], yw[2][2], sf2[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {  // tokens t = 16 kk + 2 c4 + 8 hh and t + 1
          const int t = 16 * kk + 2 * c4 + 8 * hh;
          const uint2 x = *reinterpret_cast<const uint2*>(vt + t * 128 + ((vch ^ (t & 7)) << 4));
          const uint2 y = *reinterpret_cast<const uint2*>(vt + (t + 1) * 128 + ((vch ^ ((t + 1) & 7)) << 4));
          sf2[hh] = Sf2(vsf[t * 32], vsf[(t + 1) * 32]);
          xw[hh][0] = x.x; xw[hh][1] = x.y; yw[hh][0] = y.x; yw[hh][1] = y.y;
        }
        // kk == 3: every read of this buffer is done (S's wgmma read registers only): back to the producer
        if (kk == 3) ReleaseAfterLoads<true>(&bars->empty[buf], (kVar & 256) != 0);
#pragma unroll
        for (int q = 0; q < 2; ++q) {  // code bytes 4 q .. 4 q + 3 of the 8: m-blocks 4 q .. 4 q + 3
          if (2 * kk + q >= 2) WgWait<1>();
          uint32_t a[4][4];
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            // byte i of lo: (x low nibble, y low nibble) of byte i -> dim 2 i (h = 0) of tokens t, t + 1; hi: h = 1
            const uint32_t lo = (xw[hh][q] & 0x0F0F0F0Fu) | ((yw[hh][q] << 4) & 0xF0F0F0F0u);
            const uint32_t hi = ((xw[hh][q] >> 4) & 0x0F0F0F0Fu) | (yw[hh][q] & 0xF0F0F0F0u);
            uint32_t dl[4], dh[4];
            E2m1x8Scaled<kNoDecode, kLutPV>(lo, sf2[hh], dl, lut_lane);
            E2m1x8Scaled<kNoDecode, kLutPV>(hi, sf2[hh], dh, lut_lane);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              a[i][2 * hh] = dl[i];
              a[i][2 * hh + 1] = dh[i];
            }
          }
          WgFence();
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if constexpr ((kVar & 16) == 0) Wgmma_m64n16_f16_rs(oacc[4 * q + i], a[i], Desc(pta + kk * 32, 16, 1024));
            else oacc[4 * q + i][0][0] += __uint_as_float(a[i][0] ^ a[i][1] ^ a[i][2] ^ a[i][3]) * 0.f;  // keep the decode
          WgCommit();
        }
      }
    }
    RawTileSegmentEnd<kBf16>(p, si, w, wi, lane, tid, own, myRed, sMerge, oacc, m, l, out_mul, &bars->q_empty);
    kbase += n;
    ++sc;
  }
}

}  // namespace
}  // namespace helix_ffi
