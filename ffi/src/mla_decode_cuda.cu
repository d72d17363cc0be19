// CUDA handlers of the helix_mla_decode{,_fp8,_nvfp4} FFI targets for Hopper (sm_90a).
//
// Two launches per call, both on XLA's stream:
//   1. the main kernel (num_parts x row tiles): the step's total KV work is split evenly over `num_parts` CTAs
//                                  per 64-row query tile (split-KV, like FlashMLA's metadata, but each CTA plans
//                                  its own part from kv_bounds at its start: PlanPart), segments (b, first
//                                  block, end block) in (b, block) order. The first form, mla_split_kv:
//      mla_split_kv   (256 threads) each CTA walks its segments; per segment
//                                  it keeps a 64-row x 512 fp32 output tile (two column halves over two
//                                  sets of 4 warps), streams 64-token KV tiles through a cp.async double
//                                  buffer, runs QK^T and PV on tensor cores (mma.sync m16n8k16) and
//                                  writes a locally normalised partial (o, lse) per segment.
//   2. mla_combine    (1-8 warps a row) exact LSE-weighted merge of a sequence's segments into o / lse
//                                  (mla_combine_wide, B*G*H x 4 blocks, where sequences have >= 4 segments
//                                  on average, e.g. B = 1). The 16-bit seesaws write a sequence that one
//                                  segment covers straight into o / lse (Params::o_out); the combine skips it.
// Query rows = G*H folded (row r = g*H + h); each row is masked by its own token's bound.
// Only slots < max_g bound of a sequence are read, only through its page table; zero-filled otherwise.
//
// Quantized pages (targets helix_mla_decode_fp8 / helix_mla_decode_nvfp4; layouts of helix_jax/quant.py):
// where G*H <= 16 the small-G*H kernel of mla_decode_small.cuh (its producers dequantize); otherwise the
// same kernel as below, templated on the KV format. A 64-token tile's raw bytes (fp8: 576 B/token; nvfp4:
// 288 B of packed E2M1 codes + 36 E4M3 block scales, staged at 336 B/token) stream through a cp.async
// double buffer that occupies the bf16 kernel's second KV tile; at the top of each iteration all 256
// threads dequantize the staged tile into the (single) 16-bit KV tile in the wgmma layout, while the
// next tile's raw bytes are in flight. The per-tensor scale is folded out of the tile: the tile holds
// the exact code values (fp8: E4M3 -> f16 via cvt.rn.f16x2.e4m3x2, exact in bf16/f16; nvfp4: e2m1 * sf,
// at most 6 significant bits, exact too), S is scaled by softmax_scale * fl32(1/scale) and the output by
// fl32(1/scale). So the kernel computes the reference's dequantized decode up to float32 rounding
// (reference: fl32(q * fl32(1/s)) per element; here: (sum q*code) * fl32(1/s)).
#include "xla/ffi/api/ffi.h"  // before any other CUDA/CUTLASS header (DESIGN.md, FFI pitfalls)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // CUtensorMap and the cuTensorMapEncodeTiled signature (called through the runtime's entry point)

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <type_traits>

#include "env_int.h"
#include "mla_decode_common.h"
#include "mla_decode_wgmma.h"

namespace helix_ffi {
namespace {

constexpr int kDl = 512, kDr = 64, kD = kDl + kDr;
constexpr int kRowsTile = 64, kTokTile = 64, kThreads = 256;
constexpr int kChunks = kD / 8;                       // 16-byte chunks per 576-wide row
constexpr int kTileElems = kRowsTile * kD;            // one Q or KV tile, elements
constexpr int kSmemBytes = 3 * kTileElems * 2 + kRowsTile * kTokTile * 2 + 2 * kRowsTile * 4 + 1024;  // +1 KB to align to 1024
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kSegOverhead = 1;                       // cost of starting a segment, in KV tiles (HELIX_MLA_DECODE_SEG_COST=auto)
constexpr int kMid8SegCost = 8;                       // the same for mla_mid_q8s under auto (SegCost)
constexpr int kMaxSegOverhead = 64;                   // the largest HELIX_MLA_DECODE_SEG_COST (CostFits holds for it)
constexpr int kMaxParts = 160;                        // >= SMs of any Hopper part; mirrors ffi.py MAX_PARTS

// What the main kernels need of the split-KV schedule: each CTA plans its own part (PlanThisPart) and writes its
// segments into its row tile's table; the first CTA also writes every sequence's segment range for the combine.
struct Sched {
  int4* seg;        // [row tiles][B + kMaxParts] (b, blk0, blk1, -), each CTA writes its part's segments
  int2* part;       // [row tiles][kMaxParts] (seg_begin, seg_end), each CTA writes its part's range
  int2* batch;      // [B] (seg_begin, nseg), written by CTA (0, 0) of the main kernel
  int num_parts;    // CTAs per row tile (grid x)
  int seg_cost;     // cost of starting a segment, in KV tiles (kSegOverhead unless HELIX_MLA_DECODE_SEG_COST)
};

__host__ __device__ inline int SeqLen(const int* bounds, int b, int G, int cap) {
  int len = 0;
  for (int g = 0; g < G; ++g) {
    const int v = bounds[b * G + g] < 0 ? 0 : (bounds[b * G + g] > cap ? cap : bounds[b * G + g]);
    len = v > len ? v : len;
  }
  return len;
}
// Whether the 64-token tile starting at token t0 lies wholly below len: the TMA producers load those whole tiles and
// send a sequence's partial last tile through cp.async (generic-proxy writes, which the consumers' wgmma reads need a
// proxy fence for); producers and consumers decide with this one predicate.
__host__ __device__ inline bool WholeTile(int t0, int len) { return t0 + kTokTile <= len; }

// The split-KV schedule, in "cost space": sequence b with n_b > 0 tiles occupies ov + n_b positions
// [c_b, c_b + ov + n_b) of a line of total = sum of those (the first ov positions stand for the cost of starting a
// segment, its tiles follow; ov = Sched::seg_cost); part p takes positions [p W, (p + 1) W) with
// W = ceil(total / num_parts), and a segment is one part's share of one sequence's tiles. Segments come out in
// (b, tile) order, each part's contiguous, each part's cost (tiles + ov per segment) at most W + ov.
// Every piece is a function of (c_b, n_b, W): each CTA of the main kernel plans its own part (PlanPart; no
// schedule kernel: the separate 1-block one cost 3.3-4.3 us a call on the H200).
__host__ __device__ inline int SeqTiles(const int* bounds, int b, int G, int cap) {
  return (SeqLen(bounds, b, G, cap) + kTokTile - 1) / kTokTile;
}
__host__ __device__ inline int SeqCost(int n, int ov) { return n ? n + ov : 0; }
// All cost-space arithmetic is 32-bit: the handlers reject B * (max tiles + kMaxSegOverhead) >= 2^30 (CostFits),
// and 64-bit divisions are calls that made ptxas spill around the kernels' segment walks.
__host__ __device__ inline int SeqSegCount(int c, int n, int W, int ov) {
  if (n <= 0) return 0;
  const int f = c + ov;
  return (f + n - 1) / W - f / W + 1;
}
// Segment k of sequence b (offset c, n tiles): (b, first tile, end tile, 0); *part = its part.
__host__ __device__ inline int4 SeqSeg(int b, int c, int n, int W, int k, int* part, int ov) {
  const int f = c + ov, p = f / W + k;
  const int lo = (p * W > f ? p * W : f) - f, hi = ((p + 1) * W < f + n ? (p + 1) * W : f + n) - f;
  *part = p;
  return make_int4(b, lo, hi, 0);
}
__host__ __device__ inline int SchedWidth(int total, int num_parts) {
  return total > 0 ? (total + num_parts - 1) / num_parts : 1;
}
// Sequence b (offset c, n tiles, cnt segments from index sb) in part q's plan: adds its segments with a part < q
// (< q + 1) to *lo (*hi) — summed over the sequences, the range of part q's segments — and writes its segment in part
// q (a sequence has at most one per part) into seg[] (nullable). One body for PlanPart and its host reference.
__host__ __device__ inline void PlanSeq(int b, int c, int n, int cnt, int sb, int W, int q, int4* seg, int* lo, int* hi,
                                        int ov) {
  if (n <= 0) return;
  const int k = q - (c + ov) / W;  // index of b's part-q segment among its own, if 0 <= k < cnt
  *lo += k <= 0 ? 0 : (k < cnt ? k : cnt);
  *hi += k < 0 ? 0 : (k + 1 < cnt ? k + 1 : cnt);
  if (seg != nullptr && k >= 0 && k < cnt) {
    int part;
    seg[sb + k] = SeqSeg(b, c, n, W, k, &part, ov);
  }
}
// The handlers' bound on the batch's cost (every sequence at its cap): 32-bit cost space holds it.
inline bool CostFits(long long B, long long cap) {
  return B * ((cap + kTokTile - 1) / kTokTile + kMaxSegOverhead) < (1LL << 30);  // (p + 1) * W stays below 2^31
}

// Serial reference of PlanPart (host-callable: tests/mla_decode_schedule_check.cu checks it against BuildSchedule).
[[maybe_unused]]  // (the CUDA build does not call it)
__host__ __device__ inline int2 PlanPartSerial(const int* bounds, int B, int G, int cap, int num_parts, int q, int4* seg,
                                               int ov = kSegOverhead) {
  int total = 0;
  for (int b = 0; b < B; ++b) total += SeqCost(SeqTiles(bounds, b, G, cap), ov);
  const int W = SchedWidth(total, num_parts);
  int c = 0, sb = 0, lo = 0, hi = 0;
  for (int b = 0; b < B; ++b) {
    const int n = SeqTiles(bounds, b, G, cap), cnt = SeqSegCount(c, n, W, ov);
    PlanSeq(b, c, n, cnt, sb, W, q, seg, &lo, &hi, ov);
    sb += cnt;
    c += SeqCost(n, ov);
  }
  return make_int2(lo, hi);
}

#ifdef __CUDACC__
template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T WarpExclusiveScan(T v, int lane) {
  T x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x - v;
}

// Part q's plan by one warp (lanes take 32 sequences at a time; a pass for the total, a second for the offsets: two
// warp scans per 32 sequences): PlanPartSerial's range, and each lane writes its sequence's part-q segment into seg[]
// (no serial walk: a part holding hundreds of short sequences costs no more than one). batch != nullptr: also every
// sequence's (first segment, count).
__device__ __forceinline__ int2 PlanPart(const int* __restrict__ bounds, int B, int G, int cap, int num_parts, int q,
                                         int4* seg, int2* batch, int ov) {
  const int lane = threadIdx.x & 31;
  constexpr int kKept = 4;  // tile counts of the first 128 sequences stay in registers between the passes
  int kept[kKept];
  int total = 0;
#pragma unroll
  for (int i = 0; i < kKept; ++i) {
    const int b = 32 * i + lane;
    kept[i] = b < B ? SeqTiles(bounds, b, G, cap) : 0;
    total += SeqCost(kept[i], ov);
  }
  for (int b = 32 * kKept + lane; b < B; b += 32) total += SeqCost(SeqTiles(bounds, b, G, cap), ov);
  total = WarpSum(total);
  const int W = SchedWidth(total, num_parts);
  int c0 = 0, s0 = 0, lo = 0, hi = 0;  // c0, s0: cost offset and first segment of the current 32-sequence chunk
  auto chunk = [&](int b0, int n) {
    const int b = b0 + lane;
    const int cost = SeqCost(n, ov);
    const int c = c0 + WarpExclusiveScan(cost, lane);
    const int cnt = SeqSegCount(c, n, W, ov);
    const int sb = s0 + WarpExclusiveScan(cnt, lane);
    if (batch != nullptr && b < B) batch[b] = make_int2(sb, cnt);
    PlanSeq(b, c, n, cnt, sb, W, q, seg, &lo, &hi, ov);  // n = 0 past B
    c0 += WarpSum(cost);
    s0 += WarpSum(cnt);
  };
#pragma unroll
  for (int i = 0; i < kKept; ++i)
    if (32 * i < B) chunk(32 * i, kept[i]);
  for (int b0 = 32 * kKept; b0 < B; b0 += 32) chunk(b0, b0 + lane < B ? SeqTiles(bounds, b0 + lane, G, cap) : 0);
  return make_int2(WarpSum(lo), WarpSum(hi));
}

#endif

// Full table (host reference for the checks; segment i's part into sp[i], B + num_parts ints).
struct SchedTable {
  int4* seg;   // [B + num_parts] (b, blk0, blk1, -)
  int2* part;  // [num_parts] (seg_begin, seg_end)
  int2* batch; // [B] (seg_begin, nseg)
};
[[maybe_unused]]  // (host tables for the standalone driver and tests; the CUDA build does not call it)
inline void BuildSchedule(const int* bounds, int B, int G, int cap, int num_parts, SchedTable s, int* sp,
                          int ov = kSegOverhead) {
  int total = 0;
  for (int b = 0; b < B; ++b) total += SeqCost(SeqTiles(bounds, b, G, cap), ov);
  const int W = SchedWidth(total, num_parts);
  int c = 0;
  int nseg = 0;
  for (int b = 0; b < B; ++b) {
    const int n = SeqTiles(bounds, b, G, cap), cnt = SeqSegCount(c, n, W, ov);
    s.batch[b] = make_int2(nseg, cnt);
    for (int k = 0; k < cnt; ++k, ++nseg) s.seg[nseg] = SeqSeg(b, c, n, W, k, &sp[nseg], ov);
    c += SeqCost(n, ov);
  }
  int q = 0;  // parts are sorted along the segments: part q starts at the first segment whose part is >= q
  for (int i = 0; i < nseg; ++i)
    for (; q <= sp[i]; ++q) s.part[q].x = i;
  for (; q < num_parts; ++q) s.part[q].x = nseg;
  for (q = 0; q < num_parts; ++q) s.part[q].y = q + 1 < num_parts ? s.part[q + 1].x : nseg;
}

// Programmatic dependent launch (sm_90): the main and combine kernels are launched so they may start while
// the kernel before them in the stream still runs (their launch and prologue overlap it); each waits with
// GridDepWait() before reading what that kernel wrote (its inputs, the partials). No-op without PDL.
__device__ __forceinline__ void GridDepWait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Programmatic dependent launch of the main and combine kernels (HELIX_MLA_DECODE_PDL=0 turns it off), read once.
inline bool PdlFromEnv() {
  static const bool on = [] {
    const char* v = std::getenv("HELIX_MLA_DECODE_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// cudaLaunchKernelEx with the programmatic-stream-serialization attribute where PdlFromEnv(), plus `extra`
// (the seesaw's cluster dimension) when given.
template <typename... KArgs, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         const cudaLaunchAttribute* extra, Args... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (extra != nullptr) attr[n++] = *extra;
  if (PdlFromEnv()) {
    attr[n] = cudaLaunchAttribute{};
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0 bytes read -> zero fill
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits for every earlier cp.async of this thread, committed to a group or not (wait_group covers only
// committed groups: the mbarrier-tracked copies of the warp-specialized kernels are never committed).
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(SmemAddr(p)));
}
__device__ __forceinline__ void Ldsm4TAddr(uint32_t (&r)[4], uint32_t a) {  // (a shared-window address)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], const void* p) { Ldsm4TAddr(r, SmemAddr(p)); }

template <bool kBf16>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <bool kBf16>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}
template <bool kBf16>
__device__ __forceinline__ float2 Unpack2(uint32_t u) {
  if constexpr (kBf16) return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  else return __half22float2(*reinterpret_cast<const __half2*>(&u));
}
// Segment partials o (normalised, |o| <= max |V|) are stored in the activation dtype, as the op's own outputs and the
// Helix exchange's partials are: half the bytes of f32 for the main kernels' last write and the combine's read
// (B=1 H=128: 17 -> 8.5 MB). The combine merges in f32.
template <bool kBf16>
__device__ __forceinline__ void StPart2(uint16_t* o, float a, float b) {
  *reinterpret_cast<uint32_t*>(o) = Pack2<kBf16>(a, b);
}
// Row h (0: lr0 in acc[.][0..1], 1: lr1 in acc[.][2..3]) of a wgmma accumulator (lanes 4r..4r+3 hold columns
// 8 nt + 2 (lane & 3) + {0, 1}) into a 16-bit partial row from o (its first column). Neighbouring lanes swap halves so
// that each lane stores 8 bytes and one warp store fills whole 32-byte sectors: 4-byte stores filling half-sectors made
// the seesaw's B=1 H=128 main kernel 48 -> 53 us on the H200. All lanes must call it (valid: this lane's row exists).
template <bool kBf16, int kNt>
__device__ __forceinline__ void StPartRow(uint16_t* o, const float (&acc)[kNt][4], int h, float inv, int lane, bool valid) {
  const bool odd = lane & 1;
#pragma unroll
  for (int nt = 0; nt < kNt; nt += 2) {
    const uint32_t a = Pack2<kBf16>(acc[nt][2 * h] * inv, acc[nt][2 * h + 1] * inv);
    const uint32_t b = Pack2<kBf16>(acc[nt + 1][2 * h] * inv, acc[nt + 1][2 * h + 1] * inv);
    const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
    if (valid)
      *reinterpret_cast<uint2*>(o + (nt + (odd ? 1 : 0)) * 8 + (lane & 2) * 2) = odd ? make_uint2(got, b) : make_uint2(a, got);
  }
}
template <bool kBf16>
__device__ __forceinline__ void StPart4(uint16_t* o, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(o) = make_uint2(Pack2<kBf16>(a, b), Pack2<kBf16>(c, d));
}

// Shared-memory tile layout = wgmma's K-major 128-byte-swizzle canonical layout: a 64-row x 576 tile is
// 9 column blocks of [64 rows x 64 elements] (8 KB each); in a block, row r is 128 bytes at r*128 and its
// 16-byte chunk c sits at chunk c ^ (r & 7). The same bytes read as an N-major (transposed) operand give
// V = latent columns for P*V. The XOR also keeps ldmatrix's 8 rows on 8 distinct bank groups.
__device__ __forceinline__ int TileOff(int row, int ch) {
  return (ch >> 3) * (kRowsTile * 64) + row * 64 + (((ch & 7) ^ (row & 7)) << 3);
}
constexpr int kBlockBytes = kRowsTile * 128;  // one 64 x 64 column block

// wgmma shared-memory descriptor with 128-byte swizzle (addresses/offsets in bytes).
__device__ __forceinline__ uint64_t Desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
// Descriptor d moved on by `bytes` (a multiple of 16). The start-address field is addr >> 4 of a shared-memory address
// below 2^18, so adding bytes >> 4 to the low word cannot carry into LBO: one add per k-step, where rebuilding the
// descriptor from the address (add, mask, shift, or) put a chain of ~9 uniform instructions before each wgmma.
__device__ __forceinline__ uint64_t DescAdd(uint64_t d, uint32_t bytes) {
  return (d & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)d + (bytes >> 4));
}
__device__ __forceinline__ void WgFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgWait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void WgWait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Pins accumulator registers at this point so the compiler cannot move their uses across wgmma
// issue/wait (the async instruction writes them after the asm statement that names them).
template <int N>
__device__ __forceinline__ void FenceRegs(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(d[i][j])::"memory");
}
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <bool kBf16>
__device__ __forceinline__ void WgmmaS(float (&d)[4][4], uint64_t da, uint64_t db) {
  if constexpr (kBf16) Wgmma_m64n32_bf16<0>(d, da, db); else Wgmma_m64n32_f16<0>(d, da, db);
}
template <bool kBf16>
__device__ __forceinline__ void WgmmaPV(float (&d)[32][4], uint64_t da, uint64_t db) {
  if constexpr (kBf16) Wgmma_m64n256_bf16<1>(d, da, db); else Wgmma_m64n256_f16<1>(d, da, db);
}

// Kernel variants: mma.sync + ldmatrix (the first, simpler path) or wgmma (sm_90a, default). For V read
// N-major, LBO = stride between 64-column blocks and SBO = stride between 8-token groups (the swapped
// reading was built and failed the reference check on the H200, 2026-11-30).
// kWgmmaPipe exists for quantized pages only: S is issued per 64-column block right after the warpgroup
// has dequantized that block of its own 32 tokens, so the dequantization of block j+1 runs while the
// tensor cores work on block j (see mla_split_kv).
// kWgmmaFp8Qk (FP8 pages only, opt-in): S = Q K^T on fp8 tensor cores (see mla_split_kv).
enum KernelMode { kMma = 0, kWgmma = 1, kWgmmaPipe = 2, kWgmmaFp8Qk = 3, kSeesaw = 4, kSmallGh = 5, kSmallQ8 = 6, kSmallQ4 = 7, kMidQ8 = 8 };
// KV page formats: native 16-bit (bf16/f16, the q dtype), FP8 E4M3 per-tensor scale, NVFP4.
enum KvFmt { kFmtNative = 0, kFmtFp8 = 1, kFmtNvfp4 = 2 };
// Staged bytes per token of a quantized tile. nvfp4 row: [0,256) latent codes, [256,288) rope codes,
// [288,320) latent block scales, [320,324) rope block scales, padded to 16 bytes. With this order the
// 16-value group c (0..35: 32 latent, then 4 rope) has its 8 code bytes at 8c and its scale at 288 + c.
constexpr int kFp8RowBytes = kD, kNv4RowBytes = 336;
__host__ __device__ constexpr int StageRowBytes(int fmt) { return fmt == kFmtFp8 ? kFp8RowBytes : kNv4RowBytes; }
static_assert(2 * kTokTile * kFp8RowBytes <= kTileElems * 2, "fp8 staging must fit the second KV tile");
static_assert(2 * kTokTile * kNv4RowBytes <= kTileElems * 2, "nvfp4 staging must fit the second KV tile");

struct Params {
  const uint16_t* q_lat;   // [B, GH, 512]
  const uint16_t* q_rope;  // [B, GH, 64]
  const uint16_t* c_lat;   // [N, P, 512]
  const uint16_t* k_rope;  // [N, P, 64]
  const int* page_table;   // [B, npp]
  const int* bounds;       // [B, G]
  uint16_t* o_part;        // [max_segs, GH, 512] in the activation dtype (StPartRow / StPart2 / StPart4)
  float* lse_part;         // [max_segs, GH]
  int B, G, H, GH, P, npp, N, cap;
  float scale_log2;
  // The final outputs [B, GH, 512] / [B, GH] where a main kernel writes a sequence's rows itself when one segment covers
  // it (the 16-bit seesaws; the combine then skips that sequence: LaunchCombine), else nullptr (every row via o_part).
  uint16_t* o_out;
  float* lse_out;
};

// Pool page of token t of sequence b, clamped into the pool (a stale table entry past a bound reads a valid page, never
// outside it).
__device__ __forceinline__ int PageOf(const Params& p, int b, int t) {
  return min(max(__ldg(p.page_table + (long long)b * p.npp + t / p.P), 0), p.N - 1);
}

// Every main kernel's start, with all its threads (it first waits for the kernel before): the first warp plans the CTA's part
// (blockIdx.x) and writes its range and segments into the row tile's tables; the first warp of CTA (0, 0) writes the
// combine's per-sequence ranges. The kernels then read their range (PartRange) and segments (s.seg[SegRow(p) + si])
// as they read the schedule kernel's table before. Keeping the planned range in registers from here on, or walking
// the cursor inside the segment loops, made ptxas spill 100-400 bytes more in the seesaw kernel (5 % slower at
// B=64 H=128 on the H200).
__device__ __noinline__ void PlanAndWritePart(const int* __restrict__ bounds, int B, int G, int cap, int num_parts,
                                              int4* seg, int2* part, int2* batch, int ov) {
  const bool writer = blockIdx.x == 0 && blockIdx.y == 0;
  const int2 range = PlanPart(bounds, B, G, cap, num_parts, blockIdx.x, seg, writer ? batch : nullptr, ov);
  if (threadIdx.x == 0) *part = range;
}
// First row of this CTA's row tile in the segment table.
__device__ __forceinline__ long long SegRow(const Params& p) { return (long long)blockIdx.y * (p.B + kMaxParts); }
__device__ __forceinline__ void PlanThisPart(const Params& p, const Sched& s) {
  GridDepWait();  // inputs written by the kernel before (programmatic dependent launch)
  if (threadIdx.x < 32)
    PlanAndWritePart(p.bounds, p.B, p.G, p.cap, s.num_parts, s.seg + SegRow(p),
                     s.part + blockIdx.y * kMaxParts + blockIdx.x, s.batch, s.seg_cost);
  __syncthreads();  // the tables are read by other threads
}
__device__ __forceinline__ int2 PartRange(const Params& p, const Sched& s) {
  return s.part[blockIdx.y * kMaxParts + blockIdx.x];
}

// Quantized pages only (kFmt != kFmtNative): a separate kernel parameter so the native kernel's
// parameter block and code stay as they were.
struct QParams {
  const uint8_t* kv_lat8;   // fp8 [N, P, 512] e4m3 | nvfp4 [N, P, 256] packed e2m1
  const uint8_t* kv_rope8;  // fp8 [N, P, 64] e4m3  | nvfp4 [N, P, 32] packed e2m1
  const uint8_t* lat_sf;    // nvfp4 [N, P, 32] e4m3 block scales
  const uint8_t* rope_sf;   // nvfp4 [N, P, 4] e4m3 block scales
  const float* kv_scale;    // [1] per-tensor orig->quant scale (fp8 scale / nvfp4 global_scale)
  int l2_next;              // nvfp4 decoding seesaw: prefetch the next raw tile into L2 (HELIX_MLA_DECODE_NV4_L2)
};

// Global address of 16-byte chunk ch (0..71: 64 latent, then 8 rope) of pool row `row` / query row `qrow`.
__device__ __forceinline__ const uint16_t* KvChunk(const Params& p, size_t row, int ch) {
  return ch < kDl / 8 ? p.c_lat + row * kDl + ch * 8 : p.k_rope + row * kDr + (ch - kDl / 8) * 8;
}
__device__ __forceinline__ const uint16_t* QChunk(const Params& p, long long qrow, int ch) {
  return ch < kDl / 8 ? p.q_lat + qrow * kDl + ch * 8 : p.q_rope + qrow * kDr + (ch - kDl / 8) * 8;
}

// One 64-token KV tile (latent + rope, 576 wide) of sequence b into shared memory; slots >= len are
// zero-filled without a global read. Four threads per token: one page-table read and one division per
// thread, then 18 independent 16-byte copies (a per-chunk lookup serialised ~18 dependent loads).
__device__ __forceinline__ void LoadKv(uint16_t* sk, const Params& p, int b, int blk, int len) {
  static_assert(kThreads == 4 * kTokTile, "4 threads per token");
  const int tok = threadIdx.x >> 2, q = threadIdx.x & 3;
  const int t = blk * kTokTile + tok;
  const bool valid = t < len;
  long long row = 0;
  if (valid) {
    const int page = min(max(p.page_table[(long long)b * p.npp + t / p.P], 0), p.N - 1);
    row = (long long)page * p.P + (t % p.P);
  }
#pragma unroll
  for (int j = 0; j < kChunks / 4; ++j) {
    const int ch = q + 4 * j;
    CpAsync16(sk + TileOff(tok, ch), KvChunk(p, row, ch), valid);
  }
}

__device__ __forceinline__ void LoadQ(uint16_t* sq, const Params& p, int b, int row0) {
  for (int i = threadIdx.x; i < kRowsTile * kChunks; i += kThreads) {
    const int r = i / kChunks, ch = i - r * kChunks;
    const int gr = row0 + r;
    const bool valid = gr < p.GH;
    const long long qrow = (long long)b * p.GH + gr;
    CpAsync16(sq + TileOff(r, ch), valid ? QChunk(p, qrow, ch) : p.q_lat, valid);
  }
}

__device__ __forceinline__ void CpAsync4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddr(dst)), "l"(src), "r"(valid ? 4 : 0));
}

// Raw bytes of one 64-token quantized tile into the staging buffer `st` (StageRowBytes per token);
// slots >= len are zero-filled (code 0 = 0.0, block scale 0) without a global read.
// fp8 staging in wgmma's K-major 64-byte-swizzle layout (kWgmmaFp8Qk): 9 column blocks of [64 tokens x
// 64 bytes] (4 KB each); in a block, token t's 16-byte chunk j sits at t*64 + ((j ^ ((t >> 1) & 3)) << 4).
__device__ __forceinline__ int Swz64Off(int tok, int ch) {
  return (ch >> 2) * (kTokTile * 64) + tok * 64 + (((ch & 3) ^ ((tok >> 1) & 3)) << 4);
}

template <int kFmt, bool kSwz64 = false>
__device__ __forceinline__ void LoadKvRaw(unsigned char* st, const Params& p, const QParams& qp, int b, int blk, int len) {
  const int tok = threadIdx.x >> 2, q = threadIdx.x & 3;
  const int t = blk * kTokTile + tok;
  const bool valid = t < len;
  long long row = 0;
  if (valid) {
    const int page = min(max(p.page_table[(long long)b * p.npp + t / p.P], 0), p.N - 1);
    row = (long long)page * p.P + (t % p.P);
  }
  unsigned char* dst = st + (kSwz64 ? 0 : tok * StageRowBytes(kFmt));
  if constexpr (kFmt == kFmtFp8) {
    const uint8_t* lat = qp.kv_lat8 + row * kDl;
    const uint8_t* rope = qp.kv_rope8 + row * kDr;
#pragma unroll
    for (int j = 0; j < 9; ++j) {  // 36 chunks of 16 B: 32 latent + 4 rope
      const int ch = q + 4 * j;
      CpAsync16(dst + (kSwz64 ? Swz64Off(tok, ch) : ch * 16), ch < 32 ? lat + ch * 16 : rope + (ch - 32) * 16, valid);
    }
  } else {
    const uint8_t* lat = qp.kv_lat8 + row * (kDl / 2);
    const uint8_t* rope = qp.kv_rope8 + row * (kDr / 2);
    const uint8_t* lsf = qp.lat_sf + row * (kDl / 16);
#pragma unroll
    for (int j = 0; j < 5; ++j) {  // 20 chunks of 16 B: 16 latent codes, 2 rope codes, 2 latent scales
      const int ch = q + 4 * j;
      CpAsync16(dst + ch * 16, ch < 16 ? lat + ch * 16 : ch < 18 ? rope + (ch - 16) * 16 : lsf + (ch - 18) * 16, valid);
    }
    if (q == 0) CpAsync4(dst + 320, qp.rope_sf + row * (kDr / 16), valid);  // rope scales: 4 B per row
  }
}

// Two E4M3 codes (low byte = lower element) -> two exact 16-bit values of the kernel's type.
template <bool kBf16>
__device__ __forceinline__ uint32_t Fp8x2ToT(uint32_t v) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"((unsigned short)(v & 0xFFFF)));
  if constexpr (!kBf16) return h;
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return Pack2<true>(f.x, f.y);  // every E4M3 value is a bf16 value: exact
}

// One E4M3 block scale as float.
__device__ __forceinline__ float E4m3ToFloat(uint32_t v) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"((unsigned short)(v & 0xFF)));
  return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFF)));
}

__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint32_t MulF16x2(uint32_t a, uint32_t b) {  // no .ftz: f16 subnormals kept
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Two E2M1 codes (one byte, element 2k in the low nibble) times block scale sf -> two 16-bit values.
// The 3 magnitude bits of a code, placed at f16 bits 9..11, read as an f16 equal to e2m1 * 2^-14
// (code exponent 0 lands on the f16 subnormals, which is exactly E2M1's subnormal 0.5); one f16x2
// multiply by 2^14 (subnormals kept: no .ftz) gives the values. e2m1 * sf has <= 6 significant bits
// and lies in [2^-10, 2688]: exact in f32, bf16 and f16.
template <bool kBf16>
__device__ __forceinline__ uint32_t Fp4x2ToT(uint32_t byte, float sf) {
  const uint32_t lo = byte & 15u, hi = (byte >> 4) & 15u;
  const uint32_t bits = ((lo & 8u) << 12) | ((lo & 7u) << 9) | ((hi & 8u) << 28) | ((hi & 7u) << 25);
  const uint32_t h = MulF16x2(bits, 0x74007400u);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return Pack2<kBf16>(f.x * sf, f.y * sf);
}

// 16-byte shared-memory store (nvcc split some uint4 stores of DequantUnit into four 4-byte stores).
__device__ __forceinline__ void StShared16(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(SmemAddr(p)), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// One dequantization unit: 16 consecutive values of token `tok` (fp8: 16 code bytes; nvfp4: one 16-value
// block = 8 code bytes + its scale), unit c = 0..35 (32 latent, 4 rope) -> element chunks 2c, 2c+1 of
// that token in the 16-bit KV tile sk (wgmma layout).
template <bool kBf16, int kFmt, bool kSwz64 = false>
__device__ __forceinline__ void DequantUnit(uint16_t* sk, const unsigned char* st, int tok, int c) {
  uint32_t out[8];
  if constexpr (kFmt == kFmtFp8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(st + (kSwz64 ? Swz64Off(tok, c) : tok * kFp8RowBytes + c * 16));
    out[0] = Fp8x2ToT<kBf16>(raw.x); out[1] = Fp8x2ToT<kBf16>(raw.x >> 16);
    out[2] = Fp8x2ToT<kBf16>(raw.y); out[3] = Fp8x2ToT<kBf16>(raw.y >> 16);
    out[4] = Fp8x2ToT<kBf16>(raw.z); out[5] = Fp8x2ToT<kBf16>(raw.z >> 16);
    out[6] = Fp8x2ToT<kBf16>(raw.w); out[7] = Fp8x2ToT<kBf16>(raw.w >> 16);
  } else {
    const unsigned char* row = st + tok * kNv4RowBytes;
    const uint2 raw = *reinterpret_cast<const uint2*>(row + c * 8);
    const float sf = E4m3ToFloat(row[288 + c]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[k] = Fp4x2ToT<kBf16>(raw.x >> (8 * k), sf);
      out[4 + k] = Fp4x2ToT<kBf16>(raw.y >> (8 * k), sf);
    }
  }
  StShared16(sk + TileOff(tok, 2 * c), out[0], out[1], out[2], out[3]);
  StShared16(sk + TileOff(tok, 2 * c + 1), out[4], out[5], out[6], out[7]);
}

// Whole staged tile -> sk by all 256 threads (kWgmma variant): 64 tokens x 36 units = 9 per thread.
template <bool kBf16, int kFmt>
__device__ __forceinline__ void DequantTile(uint16_t* sk, const unsigned char* st) {
#pragma unroll 3
  for (int i = 0; i < (kTokTile * 36) / kThreads; ++i) {
    const int u = threadIdx.x + i * kThreads;
    const int tok = u / 36;
    DequantUnit<kBf16, kFmt>(sk, st, tok, u - tok * 36);
  }
}

// D[64 x 32] += A[64 x 32] * B[32 x 32], both E4M3 K-major from shared-memory descriptors (no transpose
// for 8-bit types), fp32 accumulators in the layout of Wgmma_m64n32_bf16.
__device__ __forceinline__ void Wgmma_m64n32k32_e4m3(float (&d)[4][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3])
      : "l"(da), "l"(db), "r"(1));
}

// The same with N = 64 (mla_mid_q8: 32 query rows as two E4M3 terms; mla_mid_q8s: 64 tokens of a tile as N).
__device__ __forceinline__ void Wgmma_m64n64k32_e4m3(float (&d)[8][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void WgmmaE4m3K32(float (&d)[4][4], uint64_t da, uint64_t db) { Wgmma_m64n32k32_e4m3(d, da, db); }
__device__ __forceinline__ void WgmmaE4m3K32(float (&d)[8][4], uint64_t da, uint64_t db) { Wgmma_m64n64k32_e4m3(d, da, db); }

// wgmma descriptor with 64-byte swizzle (layout type 2); SBO = 8 rows x 64 B.
__device__ __forceinline__ uint64_t Desc64(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(16 >> 4) << 16) | ((uint64_t)(512 >> 4) << 32) | (2ull << 62);
}

// Two floats -> two E4M3 codes (RNE, saturating), lower byte = lo.
__device__ __forceinline__ uint32_t F32x2ToE4m3(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// kWgmmaFp8Qk: the 64-row bf16/f16 Q tile `sq16` (wgmma 128B layout) -> E4M3 tile `sq8` (64B-swizzle layout,
// 36 KB) with one scale per row, s_r = 448 / amax_r (1 for an all-zero row): q8 = RNE(sat(q * s_r)).
// `qinv[r]` = fl32(1 / s_r) multiplies row r's logits. 4 threads per row, 9 16-value units each.
template <bool kBf16>
__device__ __forceinline__ void QuantizeQ(unsigned char* sq8, float* qinv, const uint16_t* sq16) {
  const int r = threadIdx.x >> 2, q = threadIdx.x & 3;
  auto val = [&](uint32_t w, int hi) {
    const uint16_t h = hi ? (uint16_t)(w >> 16) : (uint16_t)(w & 0xFFFF);
    if constexpr (kBf16) return __uint_as_float((uint32_t)h << 16);
    else return __half2float(__ushort_as_half(h));
  };
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < 18; ++j) {  // this thread's 18 chunks of 8 values: chunks q + 4j
    const uint4 v = *reinterpret_cast<const uint4*>(sq16 + TileOff(r, q + 4 * j));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(val(w[k >> 1], k & 1)));
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float sc = amax > 0.f ? __fdiv_rn(448.f, amax) : 1.f;
  if (q == 0) qinv[r] = __frcp_rn(sc);
#pragma unroll
  for (int j = 0; j < 9; ++j) {  // 16-value units c = q + 4j -> 16 bytes at Swz64Off(r, c)
    const int c = q + 4 * j;
    const uint4 a = *reinterpret_cast<const uint4*>(sq16 + TileOff(r, 2 * c));
    const uint4 b = *reinterpret_cast<const uint4*>(sq16 + TileOff(r, 2 * c + 1));
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint32_t o[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t p0 = F32x2ToE4m3(val(w[2 * k], 0) * sc, val(w[2 * k], 1) * sc);
      const uint32_t p1 = F32x2ToE4m3(val(w[2 * k + 1], 0) * sc, val(w[2 * k + 1], 1) * sc);
      o[k] = p0 | (p1 << 16);
    }
    StShared16(sq8 + Swz64Off(r, c), o[0], o[1], o[2], o[3]);
  }
}

// Barrier over the 128 threads of one warpgroup (ids 1, 2; __syncthreads uses 0).
__device__ __forceinline__ void WarpgroupSync(int half) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + half) : "memory");
}

template <bool kBf16, int kMode, int kFmt = kFmtNative>
__global__ void __launch_bounds__(kThreads, 1) mla_split_kv(Params p, Sched s, QParams qp) {
  PlanThisPart(p, s);  // first: waits for the inputs (PDL); ptxas spilled more with anything live across it
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // 128-byte swizzle atoms must start on 1024-byte boundaries.
  unsigned char* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK0 = sQ + kTileElems;
  uint16_t* sP = sQ + 3 * kTileElems;                              // [64 rows][64 tokens]
  float* sRed = reinterpret_cast<float*>(sP + kRowsTile * kTokTile);  // [2][64]
  // Quantized formats: one 16-bit KV tile (sK0); the second tile's space holds two raw staging buffers.
  unsigned char* stage = reinterpret_cast<unsigned char*>(sQ + 2 * kTileElems);
  // kWgmmaFp8Qk: sQ's space holds the E4M3 Q tile (36 KB) and the per-row 1/s after it.
  float* sQinv = reinterpret_cast<float*>(smem + kRowsTile * kD);
  constexpr int kStageBytes = kTokTile * StageRowBytes(kFmt);
  // Per-tensor scale folded into the logit scale and the output (see the header comment).
  float q_scale_log2 = 0.f, q_out_mul = 1.f;
  if constexpr (kFmt != kFmtNative) {
    q_out_mul = __frcp_rn(__ldg(qp.kv_scale));   // fl32(1/scale), IEEE-rounded as in the reference
    q_scale_log2 = p.scale_log2 * q_out_mul;
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp & 3;   // rows 16*rg .. 16*rg+15 of the tile
  const int half = warp >> 2;  // QK^T: tokens 32*half..; PV: output columns 256*half..
  const int row0 = blockIdx.y * kRowsTile;
  const int2 range = PartRange(p, s);
  const int lr0 = rg * 16 + lane / 4, lr1 = lr0 + 8;  // this thread's two tile rows

  for (int si = range.x; si < range.y; ++si) {
    const int4 seg = s.seg[SegRow(p) + si];
    const int b = seg.x, blk0 = seg.y, blk1 = seg.z;
    const int len = SeqLen(p.bounds, b, p.G, p.cap);
    int bnd0 = 0, bnd1 = 0;
    if (row0 + lr0 < p.GH) bnd0 = min(max(p.bounds[b * p.G + (row0 + lr0) / p.H], 0), p.cap);
    if (row0 + lr1 < p.GH) bnd1 = min(max(p.bounds[b * p.G + (row0 + lr1) / p.H], 0), p.cap);

    // kWgmmaFp8Qk: the 16-bit Q tile lands in the (still free) KV tile and is quantized into sQ's space.
    LoadQ(kMode == kWgmmaFp8Qk ? sK0 : sQ, p, b, row0);
    if constexpr (kFmt == kFmtNative) LoadKv(sK0, p, b, blk0, len);
    else LoadKvRaw<kFmt, kMode == kWgmmaFp8Qk>(stage, p, qp, b, blk0, len);
    CpAsyncCommit();

    float acc[32][4];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    for (int blk = blk0; blk < blk1; ++blk) {
      uint16_t* sK = kFmt == kFmtNative ? sK0 + ((blk - blk0) & 1) * kTileElems : sK0;
      if (blk + 1 < blk1) {
        if constexpr (kFmt == kFmtNative) LoadKv(sK0 + ((blk + 1 - blk0) & 1) * kTileElems, p, b, blk + 1, len);
        else LoadKvRaw<kFmt, kMode == kWgmmaFp8Qk>(stage + ((blk + 1 - blk0) & 1) * kStageBytes, p, qp, b, blk + 1, len);
        CpAsyncCommit();
        CpAsyncWait<1>();
      } else {
        CpAsyncWait<0>();
      }
      if constexpr (kFmt != kFmtNative && kMode != kWgmmaPipe && kMode != kWgmmaFp8Qk) {
        // The staging buffer read here was last written by cp.async (this thread's wait covers only its
        // own copies: the barrier publishes all of them); the tile it fills was last read by the
        // previous iteration's PV, which ended with a barrier. The next tile's copies stay in flight.
        __syncthreads();
        DequantTile<kBf16, kFmt>(sK, stage + ((blk - blk0) & 1) * kStageBytes);
      }
      if constexpr (kMode != kMma) FenceProxyAsync();  // cp.async writes -> wgmma (async proxy) reads
      __syncthreads();

      // S = Q K^T for rows 16*rg.., tokens 32*half.. (fp32 accumulate).
      float sc[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
      if constexpr (kMode == kWgmmaFp8Qk) {
        // FP8 QK: once per segment, quantize Q (loaded into sK) per row into sQ's space; then per tile
        // S[64 rows, 32 tokens] of warpgroup `half` = 18 m64n32k32 E4M3 wgmmas straight from the staged
        // bytes (64B-swizzle layout), issued before the warpgroup dequantizes the latent part of its 32
        // tokens for PV (8 units per thread), which therefore overlaps the tensor cores. Logits get
        // fl32(1/s_row) (sQinv) on top of softmax_scale * fl32(1/scale_kv).
        static_assert(kFmt == kFmtFp8, "kWgmmaFp8Qk is for fp8 pages");
        if (blk == blk0) {
          __syncthreads();  // previous tile's readers of sQ8 are done (covered already; explicit for clarity)
          QuantizeQ<kBf16>(reinterpret_cast<unsigned char*>(sQ), sQinv, sK);
          FenceProxyAsync();
          __syncthreads();  // sQ8 complete before any wgmma; sK (16-bit Q) free for the dequant below
        }
        const unsigned char* st = stage + ((blk - blk0) & 1) * kStageBytes;
        const uint32_t qa = SmemAddr(sQ), ka = SmemAddr(st) + half * 32 * 64;
        FenceRegs(sc);
        WgFence();
#pragma unroll
        for (int ks = 0; ks < kD / 32; ++ks) {
          const uint32_t off = (ks >> 1) * (kTokTile * 64) + (ks & 1) * 32;
          Wgmma_m64n32k32_e4m3(sc, Desc64(qa + off), Desc64(ka + off));
        }
        WgCommit();
        const int wt = threadIdx.x & 127;
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // latent units of this warpgroup's tokens: 32 tokens x 32 units
          const int u = wt + 128 * i;
          DequantUnit<kBf16, kFmt, true>(sK, st, half * 32 + (u >> 5), u & 31);
        }
        FenceProxyAsync();  // dequantized V -> PV's wgmma; published by the softmax barrier below
        WgWait0();
        FenceRegs(sc);
      } else if constexpr (kMode == kWgmmaPipe) {
        // Quantized pages, pipelined: the tokens a warpgroup multiplies in S (32*half..+31) are the ones its
        // own threads staged (LoadKvRaw: token = thread / 4), so a warpgroup barrier suffices between its
        // dequant of column block cb and the wgmmas that read it; those run asynchronously while the
        // warpgroup dequantizes block cb+1 (different bytes). One unit per thread per block. The other
        // warpgroup's tokens (needed by PV) are published by the softmax __syncthreads below, each
        // writer having fenced its generic-proxy stores for the async proxy.
        static_assert(kFmt != kFmtNative, "kWgmmaPipe is for quantized pages");
        const uint32_t qa = SmemAddr(sQ), ka = SmemAddr(sK) + half * 32 * 128;
        const unsigned char* st = stage + ((blk - blk0) & 1) * kStageBytes;
        const int wt = threadIdx.x & 127;
        FenceRegs(sc);
        WgFence();
#pragma unroll
        for (int cb = 0; cb < kD / 64; ++cb) {
          DequantUnit<kBf16, kFmt>(sK, st, half * 32 + (wt >> 2), cb * 4 + (wt & 3));
          FenceProxyAsync();
          WarpgroupSync(half);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const uint32_t off = cb * kBlockBytes + k * 32;
            WgmmaS<kBf16>(sc, Desc(qa + off, 16, 1024), Desc(ka + off, 16, 1024));
          }
          WgCommit();
        }
        WgWait0();
        FenceRegs(sc);
      } else if constexpr (kMode == kMma) {
#pragma unroll 4
        for (int ks = 0; ks < kD / 16; ++ks) {
          uint32_t a[4];
          const int ar = rg * 16 + (lane & 15);
          Ldsm4(a, sQ + TileOff(ar, ks * 2 + (lane >> 4)));
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            uint32_t bb[4];
            const int tok = half * 32 + np * 16 + (lane >> 4) * 8 + (lane & 7);
            Ldsm4(bb, sK + TileOff(tok, ks * 2 + ((lane >> 3) & 1)));
            Mma<kBf16>(sc[np * 2], a, bb[0], bb[1]);
            Mma<kBf16>(sc[np * 2 + 1], a, bb[2], bb[3]);
          }
        }
      } else {
        // Warpgroup `half`: S[64 rows, 32 tokens] over K = 576 (36 x m64n32k16), both operands K-major.
        const uint32_t qa = SmemAddr(sQ), ka = SmemAddr(sK) + half * 32 * 128;
        FenceRegs(sc);
        WgFence();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
          const uint32_t off = (ks >> 2) * kBlockBytes + (ks & 3) * 32;
          WgmmaS<kBf16>(sc, Desc(qa + off, 16, 1024), Desc(ka + off, 16, 1024));
        }
        WgCommit();
        WgWait0();
        FenceRegs(sc);
      }
      // Scale to log2 units, mask by each row's own bound, row max over this warp's 32 tokens.
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int t = blk * kTokTile + half * 32 + nt * 8 + (lane & 3) * 2 + j;
          const float sl2 = kFmt == kFmtNative ? p.scale_log2 : q_scale_log2;
          const float sl2a = kMode == kWgmmaFp8Qk ? sl2 * sQinv[lr0] : sl2;
          const float sl2b = kMode == kWgmmaFp8Qk ? sl2 * sQinv[lr1] : sl2;
          sc[nt][j] = t < bnd0 ? sc[nt][j] * sl2a : -INFINITY;
          sc[nt][2 + j] = t < bnd1 ? sc[nt][2 + j] * sl2b : -INFINITY;
          mx0 = fmaxf(mx0, sc[nt][j]);
          mx1 = fmaxf(mx1, sc[nt][2 + j]);
        }
      }
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
      }
      if ((lane & 3) == 0) {
        sRed[half * kRowsTile + lr0] = mx0;
        sRed[half * kRowsTile + lr1] = mx1;
      }
      __syncthreads();
      const float mn0 = fmaxf(m0, fmaxf(sRed[lr0], sRed[kRowsTile + lr0]));
      const float mn1 = fmaxf(m1, fmaxf(sRed[lr1], sRed[kRowsTile + lr1]));
      const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
      const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
      m0 = mn0;
      m1 = mn1;
      float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        sc[nt][0] = exp2f(sc[nt][0] - mu0);
        sc[nt][1] = exp2f(sc[nt][1] - mu0);
        sc[nt][2] = exp2f(sc[nt][2] - mu1);
        sc[nt][3] = exp2f(sc[nt][3] - mu1);
        rs0 += sc[nt][0] + sc[nt][1];
        rs1 += sc[nt][2] + sc[nt][3];
        const int tok = half * 32 + nt * 8 + (lane & 3) * 2;
        *reinterpret_cast<uint32_t*>(sP + TileOff(lr0, tok >> 3) + (tok & 7)) = Pack2<kBf16>(sc[nt][0], sc[nt][1]);
        *reinterpret_cast<uint32_t*>(sP + TileOff(lr1, tok >> 3) + (tok & 7)) = Pack2<kBf16>(sc[nt][2], sc[nt][3]);
      }
      l0 = l0 * al0 + rs0;
      l1 = l1 * al1 + rs1;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        acc[i][0] *= al0;
        acc[i][1] *= al0;
        acc[i][2] *= al1;
        acc[i][3] *= al1;
      }
      if constexpr (kMode != kMma) FenceProxyAsync();  // P stores -> wgmma reads
      __syncthreads();

      // O[rows 16*rg.., cols 256*half..] += P[rows, 64 tokens] V[64 tokens, cols].
      if constexpr (kMode == kMma) {
#pragma unroll
        for (int ks = 0; ks < kTokTile / 16; ++ks) {
          uint32_t a[4];
          const int ar = rg * 16 + (lane & 15);
          Ldsm4(a, sP + TileOff(ar, ks * 2 + (lane >> 4)));
          const int tok = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
          for (int nc = 0; nc < 16; ++nc) {
            uint32_t bb[4];
            Ldsm4T(bb, sK + TileOff(tok, half * 32 + nc * 2 + (lane >> 4)));
            Mma<kBf16>(acc[nc * 2], a, bb[0], bb[1]);
            Mma<kBf16>(acc[nc * 2 + 1], a, bb[2], bb[3]);
          }
        }
      } else {
        // Warpgroup `half`: O[64, 256 columns] += P[64, 64] (K-major) * V[64 tokens, 256] (N-major).
        const uint32_t pa = SmemAddr(sP), va = SmemAddr(sK) + half * 4 * kBlockBytes;
        constexpr uint32_t lbo = kBlockBytes, sbo = 1024;
        FenceRegs(acc);
        WgFence();
#pragma unroll
        for (int ks = 0; ks < kTokTile / 16; ++ks)
          WgmmaPV<kBf16>(acc, Desc(pa + ks * 32, 16, 1024), Desc(va + ks * 16 * 128, lbo, sbo));
        WgCommit();
        WgWait0();
        FenceRegs(acc);
      }
      __syncthreads();
    }

    // Row sums: 4 lanes per row in this warp, then the two token halves through shared memory.
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, off);
      l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    if ((lane & 3) == 0) {
      sRed[half * kRowsTile + lr0] = l0;
      sRed[half * kRowsTile + lr1] = l1;
    }
    __syncthreads();
    const float L0 = sRed[lr0] + sRed[kRowsTile + lr0], L1 = sRed[lr1] + sRed[kRowsTile + lr1];
    float inv0 = L0 > 0.f ? 1.f / L0 : 0.f, inv1 = L1 > 0.f ? 1.f / L1 : 0.f;
    if constexpr (kFmt != kFmtNative) {  // V = code values: the per-tensor dequant scale applies once here
      inv0 *= q_out_mul;
      inv1 *= q_out_mul;
    }
    const int gr0 = row0 + lr0, gr1 = row0 + lr1;
    StPartRow<kBf16>(p.o_part + ((long long)si * p.GH + gr0) * kDl + half * 256, acc, 0, inv0, lane, gr0 < p.GH);
    StPartRow<kBf16>(p.o_part + ((long long)si * p.GH + gr1) * kDl + half * 256, acc, 1, inv1, lane, gr1 < p.GH);
    if (half == 0 && (lane & 3) == 0) {
      if (gr0 < p.GH) p.lse_part[(long long)si * p.GH + gr0] = L0 > 0.f ? (m0 + __log2f(L0)) * kLn2 : -INFINITY;
      if (gr1 < p.GH) p.lse_part[(long long)si * p.GH + gr1] = L1 > 0.f ? (m1 + __log2f(L1)) * kLn2 : -INFINITY;
    }
    __syncthreads();  // sQ / sRed are rewritten by the next segment
  }
}

}  // namespace
}  // namespace helix_ffi

#include "mla_decode_seesaw.cuh"
#include "mla_decode_small.cuh"
#include "mla_decode_small_q8.cuh"
#include "mla_decode_small_q4.cuh"
#include "mla_decode_mid_q8.cuh"
#include "mla_decode_mid_q8s.cuh"

namespace helix_ffi {
namespace {

// Online merge of segment partials into a running (m, sum, acc): acc = sum_i exp(lse_i - m) o_i[col..col+3],
// sum = sum_i exp(lse_i - m), m = max_i lse_i, over segments i = first, first + step, ... < count of the
// sequence's partial rows r_i = (base + i) * GH + row. Segments go in batches of 4 whose lse and o loads issue
// together, the next batch's before this one's arithmetic: one L2 round trip per 8 segments of a thread
// instead of two per segment (the lse pass, then each o load behind its weight's test). A segment of weight 0
// (lse = -inf: no token of the row in it) adds nothing, whatever its o holds.
struct MergeState {
  float m = -INFINITY, sum = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
};
__device__ __forceinline__ void MergeBatch(MergeState& st, const float (&l)[4], const float4 (&v)[4]) {
  const float mb = fmaxf(fmaxf(l[0], l[1]), fmaxf(l[2], l[3]));
  if (mb > st.m) {  // new max: rescale what is held (exp(-inf) = 0 for the first finite batch)
    const float a = __expf(st.m - mb);
    st.sum *= a;
    st.acc.x *= a; st.acc.y *= a; st.acc.z *= a; st.acc.w *= a;
    st.m = mb;
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const bool live = l[k] > -INFINITY;  // then st.m is finite too
    const float w = live ? __expf(l[k] - st.m) : 0.f;
    st.sum += w;
    st.acc.x += live ? w * v[k].x : 0.f; st.acc.y += live ? w * v[k].y : 0.f;
    st.acc.z += live ? w * v[k].z : 0.f; st.acc.w += live ? w * v[k].w : 0.f;
  }
}
template <bool kBf16>
__device__ __forceinline__ void MergeSegments(MergeState& st, const uint16_t* __restrict__ o_part,
                                              const float* __restrict__ lse_part, int base, int count, int GH, int row,
                                              int col, int first, int step) {
  auto load = [&](int i0, float (&l)[4], float4 (&v)[4]) {  // segments i0 + k step, k < 4 (past count: lse -inf)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = i0 + k * step;
      const long long r = (long long)(base + min(i, count - 1)) * GH + row;
      l[k] = i < count ? lse_part[r] : -INFINITY;
      const uint2 u = *reinterpret_cast<const uint2*>(o_part + r * kDl + col);
      const float2 a = Unpack2<kBf16>(u.x), b = Unpack2<kBf16>(u.y);
      v[k] = make_float4(a.x, a.y, b.x, b.y);
    }
  };
  if (first >= count) return;
  float l0[4], l1[4];
  float4 v0[4], v1[4];
  load(first, l0, v0);
  for (int i0 = first; i0 < count; i0 += 8 * step) {
    const bool more = i0 + 4 * step < count;
    if (more) load(i0 + 4 * step, l1, v1);
    MergeBatch(st, l0, v0);
    if (!more) break;
    if (i0 + 8 * step < count) load(i0 + 8 * step, l0, v0);
    MergeBatch(st, l1, v1);
  }
}

// Exact merge of a sequence's segment partials: 2^wpr_log2 warps per (b, row) (one where sequences have a few segments,
// up to 8 where they have many: CombWarpsPerRowLog2), 16 columns per lane, four segments per step (two 16-byte loads
// each); the row's warps take every 2^wpr_log2-th segment and merge their states through shared memory. Blocks of
// kCombRowWarps warps, at most kCombBlocksPerSm per SM, walk the rows gridDim.x blocks apart (one warp per row: by a
// ballot over the rows that need a merge). One 128-thread block per row (the form before session 43) spent most of its
// time launching blocks: 6 us at B*G*H = 8192 rows where every block returned at once (Params::o_out).
constexpr int kCombRowWarps = 8, kCombBlocksPerSm = 3;
template <bool kBf16>
__device__ __forceinline__ void UnpackPartRow(const uint4 (&d)[2], float (&v)[16]) {
  const uint32_t w[8] = {d[0].x, d[0].y, d[0].z, d[0].w, d[1].x, d[1].y, d[1].z, d[1].w};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float2 f = Unpack2<kBf16>(w[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}
template <bool kBf16>
__global__ void __launch_bounds__(32 * kCombRowWarps, kCombBlocksPerSm)
    mla_combine(const uint16_t* __restrict__ o_part, const float* __restrict__ lse_part, Sched s, int rows, int GH,
                uint16_t* __restrict__ o, float* __restrict__ lse, int direct, int wpr_log2) {
  __shared__ float red_acc[kCombRowWarps][16][33];  // [warp][column][lane] (+1: no bank conflicts)
  __shared__ float red_m[kCombRowWarps], red_sum[kCombRowWarps];
  GridDepWait();  // the main kernel's partials
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, col = lane * 16;
  const int wpr = 1 << wpr_log2, sub = warp & (wpr - 1), rows_per_block = kCombRowWarps >> wpr_log2;
  const int groups = (rows + rows_per_block - 1) / rows_per_block;
  // Whether a sequence's rows need a merge (else the main kernel wrote them itself: Params::o_out).
  auto needs_merge = [&](int2 bs) { return !(direct && bs.y == 1); };
  // Segments sub, sub + wpr, ... of row `row` (segments bs.x .. bs.x + bs.y - 1) into (m, sum, acc).
  auto merge = [&](int row, int2 bs, float& m, float& sum, float (&acc)[16]) {
    for (int i = sub; i < bs.y; i += 4 * wpr) {
      float l[4];
      uint4 d[4][2];
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // (warp-uniform predicates)
        const int j = i + k * wpr;
        l[k] = -INFINITY;
        d[k][0] = d[k][1] = make_uint4(0u, 0u, 0u, 0u);
        if (j < bs.y) {
          const long long rr = (long long)(bs.x + j) * GH + row;
          l[k] = lse_part[rr];
          const uint4* src = reinterpret_cast<const uint4*>(o_part + rr * kDl + col);
          d[k][0] = src[0];
          d[k][1] = src[1];
        }
      }
      const float mn = fmaxf(m, fmaxf(fmaxf(l[0], l[1]), fmaxf(l[2], l[3])));
      if (!(mn > -INFINITY)) continue;  // nothing live yet (a dead partial's o is never read into acc)
      const float a = __expf(m - mn);
      sum *= a;
#pragma unroll
      for (int c = 0; c < 16; ++c) acc[c] *= a;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (!(l[k] > -INFINITY)) continue;
        const float w = __expf(l[k] - mn);
        float v[16];
        UnpackPartRow<kBf16>(d[k], v);
        sum += w;
#pragma unroll
        for (int c = 0; c < 16; ++c) acc[c] += w * v[c];
      }
      m = mn;
    }
  };
  auto store = [&](int r, float m, float sum, const float (&acc)[16]) {
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = Pack2<kBf16>(acc[2 * k] * inv, acc[2 * k + 1] * inv);
    uint4* dst = reinterpret_cast<uint4*>(o + (long long)r * kDl + col);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    if (lane == 0) lse[r] = sum > 0.f ? m + __logf(sum) : -INFINITY;
  };
  if (wpr == 1) {
    // One warp per row, no barriers: lane k reads the segment range of the warp's k-th next row, and the warp walks
    // only the rows that need a merge (a sequence the main kernel wrote itself costs one load shared by 32 rows).
    for (int g0 = blockIdx.x; g0 < groups; g0 += 32 * gridDim.x) {
      const int gk = g0 + lane * gridDim.x, rk = gk * kCombRowWarps + warp;
      int2 bk = make_int2(0, 0);
      bool need = false;
      if (gk < groups && rk < rows) {
        bk = s.batch[rk / GH];
        need = needs_merge(bk);
      }
      for (uint32_t mask = __ballot_sync(0xffffffffu, need); mask != 0; mask &= mask - 1) {
        const int k = __ffs(mask) - 1;
        const int r = (g0 + k * gridDim.x) * kCombRowWarps + warp;
        const int2 bs = make_int2(__shfl_sync(0xffffffffu, bk.x, k), __shfl_sync(0xffffffffu, bk.y, k));
        float m = -INFINITY, sum = 0.f, acc[16];
#pragma unroll
        for (int c = 0; c < 16; ++c) acc[c] = 0.f;
        merge(r % GH, bs, m, sum, acc);
        store(r, m, sum, acc);
      }
    }
    return;
  }
  for (int g = blockIdx.x; g < groups; g += gridDim.x) {  // block-uniform: every warp reaches the barriers
    const int r = g * rows_per_block + (warp >> wpr_log2);
    int2 bs = make_int2(0, 0);
    bool live = r < rows;
    if (live) {
      bs = s.batch[r / GH];
      live = needs_merge(bs);
    }
    float m = -INFINITY, sum = 0.f, acc[16];
#pragma unroll
    for (int c = 0; c < 16; ++c) acc[c] = 0.f;
    if (live) merge(r % GH, bs, m, sum, acc);
    // the row's other warps' states into its first warp
    __syncthreads();  // the previous group's reads of red_* are done
    if (sub != 0) {
#pragma unroll
      for (int c = 0; c < 16; ++c) red_acc[warp][c][lane] = acc[c];
      if (lane == 0) red_m[warp] = m, red_sum[warp] = sum;
    }
    __syncthreads();
    if (sub != 0 || !live) continue;
    for (int k = 1; k < wpr; ++k) {
      const float mk = red_m[warp + k];
      if (!(mk > -INFINITY)) continue;  // a warp without a live segment
      const float mn = fmaxf(m, mk), a = __expf(m - mn), ak = __expf(mk - mn);
      sum = sum * a + red_sum[warp + k] * ak;
#pragma unroll
      for (int c = 0; c < 16; ++c) acc[c] = acc[c] * a + red_acc[warp + k][c][lane] * ak;
      m = mn;
    }
    store(r, m, sum, acc);
  }
}

// log2 of mla_combine's warps per row: about ceil(num_parts / B) + 1 segments per sequence, up to 4 per warp.
inline int CombWarpsPerRowLog2(int B, int num_parts) {
  const int segs = (num_parts + B - 1) / B + 1;
  return segs <= 4 ? 0 : segs <= 8 ? 1 : segs <= 16 ? 2 : 3;
}

// The same merge, split wider for few long sequences (B = 1: ~66 segments per row, and the one-block-per-row
// kernel above keeps only 4 warps per SM): grid (B*GH, 4), each block merges one 128-column quarter of a row; its
// kCombWarps warps take every kCombWarps-th segment, then merge their (m, sum, acc) through shared memory.
constexpr int kCombWarps = 8;
template <bool kBf16>
__global__ void __launch_bounds__(32 * kCombWarps) mla_combine_wide(const uint16_t* __restrict__ o_part,
                                                                    const float* __restrict__ lse_part, Sched s, int GH,
                                                                    uint16_t* __restrict__ o, float* __restrict__ lse,
                                                                    int direct) {
  __shared__ float4 red[kCombWarps][32];
  __shared__ float red_m[kCombWarps], red_sum[kCombWarps];
  GridDepWait();  // the main kernel's partials
  const int b = blockIdx.x / GH, row = blockIdx.x % GH;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int2 bs = s.batch[b];
  const int col = blockIdx.y * 128 + lane * 4;
  if (direct && bs.y == 1) return;  // the main kernel wrote this sequence's rows (Params::o_out)
  MergeState st;
  MergeSegments<kBf16>(st, o_part, lse_part, bs.x, bs.y, GH, row, col, warp, kCombWarps);
  red[warp][lane] = st.acc;
  if (lane == 0) red_m[warp] = st.m, red_sum[warp] = st.sum;
  __syncthreads();
  if (warp != 0) return;
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kCombWarps; ++k) m = fmaxf(m, red_m[k]);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kCombWarps; ++k) {
    const float mk = red_m[k];
    if (!(mk > -INFINITY)) continue;  // a warp without a live segment
    const float a = __expf(mk - m);
    const float4 v = red[k][lane];
    acc.x += a * v.x; acc.y += a * v.y; acc.z += a * v.z; acc.w += a * v.w;
    sum += a * red_sum[k];
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const long long orow = (long long)b * GH + row;
  uint32_t* dst = reinterpret_cast<uint32_t*>(o + orow * kDl + col);
  dst[0] = Pack2<kBf16>(acc.x * inv, acc.y * inv);
  dst[1] = Pack2<kBf16>(acc.z * inv, acc.w * inv);
  if (blockIdx.y == 0 && lane == 0) lse[orow] = sum > 0.f ? m + __logf(sum) : -INFINITY;
}

// Which combine: the wide one for few query rows in all (at most one per SM) with >= 4 segments per sequence on
// average. The narrow kernel's B*G*H blocks leave SMs idle there; from ~2 rows per SM up it is faster (H200, L=64K, `mla_standalone comb`,
// session 10: 128 rows 5.8 vs 4.4 us wide, 256 rows 4.2 vs 4.8, 1024 rows 4.6 vs 12.4, 2048 rows 5.3 vs 19.9; the
// earlier rule, B*4 <= parts alone, picked wide up to B=32 and cost up to 15 us a call).
inline bool CombineWide(int B, int GH, int num_parts, int num_sms) {
  return (long long)B * 4 <= num_parts && (long long)B * GH <= num_sms;
}

template <bool kBf16>
void LaunchCombine(const Params& p, const Sched& s, int num_parts, int num_sms, uint16_t* o, float* lse, cudaStream_t stream,
                   int wide = -1) {
  if (wide < 0 ? CombineWide(p.B, p.GH, num_parts, num_sms) : wide)
    (void)LaunchKernel(mla_combine_wide<kBf16>, dim3((unsigned)(p.B * p.GH), 4), dim3(32 * kCombWarps), 0, stream, nullptr,
                       (const uint16_t*)p.o_part, (const float*)p.lse_part, s, p.GH, o, lse, (int)(p.o_out != nullptr));
  else
  {
    const int rows = p.B * p.GH, wl = CombWarpsPerRowLog2(p.B, num_parts);
    const int groups = (rows + (kCombRowWarps >> wl) - 1) / (kCombRowWarps >> wl);
    const int blocks = max(1, min(groups, num_sms * kCombBlocksPerSm));
    (void)LaunchKernel(mla_combine<kBf16>, dim3((unsigned)blocks), dim3(32 * kCombRowWarps), 0, stream, nullptr,
                       (const uint16_t*)p.o_part, (const float*)p.lse_part, s, rows, p.GH, o, lse, (int)(p.o_out != nullptr), wl);
  }
}

#define HELIX_CUDA_CHECK(expr)                                                                      \
  do {                                                                                              \
    cudaError_t e_ = (expr);                                                                        \
    if (e_ != cudaSuccess)                                                                          \
      return ffi::Error::Internal(std::string("helix_mla_decode: ") + #expr + ": " + cudaGetErrorString(e_)); \
  } while (0)

size_t AlignUp(size_t x) { return (x + 255) & ~size_t(255); }

// Workspace layout (mirrors helix_jax/ops/mla_decode/ffi.py:workspace_bytes): the row tiles' segment and part
// tables, per-batch segment ranges, partial lse [segs, GH] f32, partial o [segs, GH, 512] in the activation dtype,
// each 256-aligned;
// segs = B + kMaxParts bounds the schedule's segments.
struct WsLayout {
  size_t seg, part, batch, lse, o, total;
};
WsLayout Layout(long long B, long long GH) {
  const long long segs = B + kMaxParts, mtiles = (GH + kRowsTile - 1) / kRowsTile;
  WsLayout l;
  l.seg = 0;
  l.part = l.seg + AlignUp(sizeof(int4) * segs * mtiles);
  l.batch = l.part + AlignUp(sizeof(int2) * kMaxParts * mtiles);
  l.lse = l.batch + AlignUp(sizeof(int2) * B);
  l.o = l.lse + AlignUp(sizeof(float) * segs * GH);
  l.total = l.o + AlignUp(sizeof(uint16_t) * segs * GH * kDl);
  return l;
}

// The value of environment variable `var` among `names` (unset: the first entry's), -1 for any other value (Launch
// reports it with the allowed names). The *FromEnv functions below read theirs once per process.
struct EnvName {
  const char* name;
  int value;
};
inline int EnvChoice(const char* var, std::initializer_list<EnvName> names) {
  const char* v = std::getenv(var);
  if (v == nullptr) return names.begin()->value;
  for (const EnvName& n : names)
    if (std::strcmp(v, n.name) == 0) return n.value;
  return -1;
}

// Quantized-page variant from HELIX_MLA_DECODE_DEQUANT (auto | small8 | small4 | small | pipe | tile | fp8qk), read
// once (kSmallQ8 stands for "the raw-tile kernel of the page format"):
//   auto (default): where G*H <= 16, fp8 pages run mla_small_q8 (raw E4M3 tiles into the tensor cores, Q as two
//     E4M3 terms; B=64, H=16, G=1, L=64K on the H200: 1.8x the bf16 kernel) and nvfp4 pages mla_small_q4 (raw
//     E2M1 tiles, both products' A operands decoded in registers); where G*H > 16, fp8 pages run mla_mid_q8s
//     (consumers alternating raw tiles, PV on E4M3 tensor cores) or mla_mid_q8 (HELIX_MLA_DECODE_MID8), nvfp4 pages
//     the seesaw kernel with a decoding producer where P % 64 == 0 (mla_seesaw kLoad 4, or 6 for bf16 activations
//     (HELIX_MLA_DECODE_NV4_MATH): TMA raw tiles decoded in place into f16 tiles; 1.4x pipe on the H200), else pipe;
//   small8, small4: same as auto;
//   small: the producer-dequantizing small-G*H kernel for both formats where G*H <= 16, else pipe;
//   tile: all threads dequantize the whole staged tile, barrier, then S (simple, one more barrier);
//   pipe: per-warpgroup dequant of 64-column blocks interleaved with the S wgmmas;
//   fp8qk (fp8 pages only; nvfp4 runs pipe): S on fp8 tensor cores with Q quantized per row in the kernel.
int DequantModeFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_DEQUANT", {{"auto", kSmallQ8}, {"small8", kSmallQ8}, {"small4", kSmallQ8},
                                                                 {"small", kSmallGh}, {"pipe", kWgmmaPipe}, {"tile", kWgmma},
                                                                 {"fp8qk", kWgmmaFp8Qk}});
  return mode;
}

// Q's E4M3 terms in mla_mid_q8s's S from HELIX_MLA_DECODE_FP8_Q, read once: two (default): hi + lo with one row scale,
// rounding-level agreement with the bf16 product of the stored codes; one: the hi term alone (Q rounded once to E4M3 per
// row, scale amax / 448), half of S's tensor work, with Q's own rounding (~2^-5 relative per element) added to the logits
// (H200, session 25: 1.23x / 1.41x the bf16 kernel at H=128 G=1 / H=16 G=4, B=64, L=64K, against 0.74x / 1.19x with two
// terms; o off the float64 decode of the unquantized KV by 0.06 mean / 0.14 max against 0.05 / 0.12, test budget 0.07 /
// 0.15). Under one, FP8_S=auto keeps the fast chain at every G*H: the f32 chains shrink an error Q's rounding dominates.
// Only mla_mid_q8s has the one-term form (fp8 pages at G*H > 16, HELIX_MLA_DECODE_MID8 auto / seesaw); the other fp8
// kernels keep two terms.
// Returns the LaunchMain kVar bit (65536 for one), -1 for anything else.
int Fp8QFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_FP8_Q", {{"two", 0}, {"one", 65536}});
  return mode;
}

// S accumulation of the fp8 raw-tile kernels (mla_small_q8, mla_mid_q8s, mla_mid_q8) from HELIX_MLA_DECODE_FP8_S, read once:
//   fast: one fp8 tensor-core accumulator chain over the 576 features of a logit;
//   f32: shorter chains (mla_small_q8 / mla_mid_q8: per 128-feature block; mla_mid_q8s: per 32-token half and latent
//     block, the rope with the last) added in f32 on the CUDA cores;
//   auto (default): fast where G*H <= 64, f32 where G*H > 64 (mla_mid_q8s under HELIX_MLA_DECODE_FP8_Q=one: fast).
// The fp8 tensor cores keep fewer accumulator bits than f32 (~14): on the standalone driver's full-range E4M3 codes
// fast is off the double reference by lse up to 2.1e-2 (mla_small_q8, 16 x 8192 tokens) / 2.8e-2 (mla_mid_q8s; 3.7e-2 on
// an 80-row case), f32 by 4.9e-3 / 1.8e-2 (mla_mid_q8s keeps its one-scale Q terms' rounding). mla_small_q8's f32 costs ~10 % of its speed,
// mla_mid_q8s's ~30 % (H200, benchmarks/NOTES.md sessions 10 and 15). Where G*H > 64, mla_mid_q8s's fast chain
// missed the lse bounds (3.66e-2 on an 80-row standalone case against 3e-2; 2.09e-2 at H=128 in the GPU format tests
// against 2e-2 before the lse took the unrounded weights' sum), hence auto.
// Returns 1 for f32, 0 for fast, 2 for auto, -1 for anything else; Fp8SF32 resolves auto for a call.
int Fp8SFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_FP8_S", {{"auto", 2}, {"fast", 0}, {"f32", 1}});
  return mode;
}
bool Fp8SF32(int gh) {
  const int mode = Fp8SFromEnv();
  return mode == 1 || (mode == 2 && gh > kM8Rows);
}

// fp8 pages at G*H > 16 from HELIX_MLA_DECODE_MID8, read once (one CTA per 64 query rows; HELIX_MLA_DECODE_FP8_S picks
// the S accumulation of either):
//   auto (default), seesaw: mla_mid_q8s (consumers alternate tiles; P rounded to E4M3 for PV on fp8 tensor cores);
//   lockstep: mla_mid_q8 (both consumers on every tile, P in f16: o about 2x closer to the reference, ~0.75x the speed);
//   decode: the seesaw kernel with a decoding producer (mla_seesaw kLoad 5: E4M3 tiles converted in place to f16, f16
//     math, Q rewritten as f16 for bf16 activations) where P % 64 == 0, else mla_mid_q8s. Correct, but 0.92x bf16
//     against mla_mid_q8s' 1.23x at H=16 G=4 B=64 L=64K (session 20: the producer's raw load -> decode chain sets the
//     pace); kept for experiments.
// Returns the LaunchMain kVar bit (16384 = mla_mid_q8s) or 0 for lockstep, 1 for decode, -1 for anything else.
int Mid8FromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_MID8",
                                    {{"auto", 16384}, {"seesaw", 16384}, {"lockstep", 0}, {"decode", 1}});
  return mode;
}

// Kernel variant from HELIX_MLA_DECODE_KERNEL, read once: auto (default) = the small-G*H kernel of
// mla_decode_small.cuh where G*H <= 16 (B=64, H=16, G=1: 4.15 TB/s = 97.5 % of copy on the H200, vs 3.1 for
// seesaw) and the warp-specialized seesaw kernel of mla_decode_seesaw.cuh otherwise (2-14 % faster than
// wgmma); small (same as auto), seesaw, wgmma, mma force one.
int KernelModeFromEnv() {
  // auto (default): the small-G*H kernel where G*H <= 16, else seesaw (Launch falls back by G*H).
  static const int mode = EnvChoice("HELIX_MLA_DECODE_KERNEL", {{"auto", kSmallGh}, {"seesaw", kSeesaw}, {"wgmma", kWgmma},
                                                                {"mma", kMma}, {"small", kSmallGh}});
  return mode;
}

// The 16-bit seesaw kernel's consumer schedule from HELIX_MLA_DECODE_SCHED, read once: seesaw = the tile-by-tile
// hand-off (own_tile); pair = tiles in pairs with one running max per pair and the four PVs of a pair in flight together
// (mla_seesaw kVar bit 16, FlashMLA's order; TMA loads only, cp.async tiles keep seesaw); auto (default) = seesaw
// (SsSched). Under pair the KV copies follow the load path: multicast over two row tiles (auto where the row
// tiles pair, tma_multicast) is issued by producer warps 0-1 once both CTAs released a buffer half (attempt 72);
// evict-first TMA (auto otherwise, tma_evict_first) is issued by the consumers themselves (attempt 70); tma keeps the
// producer refilling whole parts (attempt 66's form, 21 % slower). benchmarks/NOTES.md, sessions 31-33.
// Returns 1 for auto, 0 for seesaw, 2048 (the LaunchMain kVar bit) for pair, -1 for anything else.
int SsSchedFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_SCHED", {{"auto", 1}, {"seesaw", 0}, {"pair", 2048}});
  return mode;
}

// KV load path of the seesaw kernel from HELIX_MLA_DECODE_LOAD, read once: auto (default) = tma_multicast
// where the row tiles come in pairs, else tma_evict_first (session 7: multicast was 1-5 % faster with two or
// more row tiles, and no slower at B = 1); tma_evict_first (TMA with an L2 evict-first hint where the page
// size is a multiple of 64, else cp.async), tma (no hint), cpasync, tma_multicast (evict-first TMA multicast
// over the two row tiles of a cluster of two CTAs where the row tiles come in pairs, else tma_evict_first).
// Returns kLoad (0..3), 4 for auto, or -1 for a bad value.
int LoadModeFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_LOAD", {{"auto", 4}, {"tma_evict_first", 2}, {"cpasync", 0}, {"tma", 1},
                                                              {"tma_multicast", 3}});
  return mode;
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no libcuda link), looked up once; null if absent.
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The nvfp4 decoding seesaw's math with bf16 activations, from HELIX_MLA_DECODE_NV4_MATH (auto | f16 | bf16; read once):
// auto = f16 rewrites Q as f16 with a power-of-two row scale and decodes into f16 tiles (kLoad 6: one byte permute less
// per four codes; 1.08-1.09x kLoad 4 under JAX at L=64K, session 20); bf16 decodes into bf16 tiles (kLoad 4). Returns
// 1 for f16, 0 for bf16, -1 for anything else.
int Nv4MathFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_NV4_MATH", {{"auto", 1}, {"f16", 1}, {"bf16", 0}});
  return mode;
}

// The nvfp4 decoding seesaw's staging slot, from HELIX_MLA_DECODE_NV4_STAGE (auto | on | off; read once): on loads the
// next tile's scales and first codes during this tile's decode (mla_seesaw kVar bit 8; benchmarks/NOTES.md, session 22:
// 5.5-6.4 % faster under JAX on the H200 at every G*H > 16 shape measured), so auto = on. Returns 1 / 0, -1 for anything
// else.
int Nv4StageFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_NV4_STAGE", {{"auto", 1}, {"on", 1}, {"off", 0}});
  return mode;
}

// The decoding seesaws' (nvfp4; fp8 with HELIX_MLA_DECODE_MID8=decode) L2 prefetch of the next raw tile, from
// HELIX_MLA_DECODE_NV4_L2 (on | off; default on), read once; -1 for anything else (Launch reports it). Session 20:
// nvfp4 0.3-1 % faster with it under JAX at L=64K, the fp8 decoding seesaw 1.10x.
int Nv4L2FromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_NV4_L2", {{"on", 1}, {"off", 0}});
  return mode;
}

// The split-KV schedule's cost of starting a segment, in KV tiles, from HELIX_MLA_DECODE_SEG_COST (auto, or an integer
// 1..64), read once: 0 for auto (Launch picks kSegOverhead, or kMid8SegCost for mla_mid_q8s), -1 for anything else. A
// part that holds the end of one sequence and the start of the next pays a second Q load, o store and pipeline start
// (mla_mid_q8s at H=16 G=4 B=64 on the H200: its two-segment CTAs end 15-25 us, ~11-18 tiles, after the one-segment
// ones; session 27's trace), and the kernel ends with its slowest CTA: a larger cost gives those parts fewer tiles.
// Measured (session 29, B=64 L=64K, two rounds): cost 8 made mla_mid_q8s 0.5 % faster (two terms H=16 G=4 0.9079 /
// 0.9097 vs 0.9135 / 0.9136 ms, one term 0.7333 / 0.7347 vs 0.7382 / 0.7381), the bf16 seesaw / small kernels equal;
// cost 20 was slower everywhere.
int SegCostFromEnv() {
  static const int v = [] {
    const char* e = std::getenv("HELIX_MLA_DECODE_SEG_COST");
    if (e == nullptr || std::strcmp(e, "auto") == 0) return 0;
    int n;
    return ParseWholeInt(e, 1, kMaxSegOverhead, &n) ? n : -1;
  }();
  return v;
}
// The segment cost a launch uses: the variable's, else (auto) kMid8SegCost for mla_mid_q8s and kSegOverhead for the
// other kernels (Launch reports a bad value before it gets here).
int SegCost(bool mid8s) { return SegCostFromEnv() > 0 ? SegCostFromEnv() : mid8s ? kMid8SegCost : kSegOverhead; }

// L2 promotion of every KV-pool tensor map, from HELIX_MLA_DECODE_TMA_L2 (128 | 256 | none; default 128), read once.
// Streaming random 64-token pages as the kernels do (one box of [64 rows x 128 B] per column block), 256-byte
// promotion held one CTA per SM to 4.05-4.08 TB/s (1 KB rows) / 3.90-3.93 (512 B rows), 128-byte or none to 4.40 /
// 4.23, where one contiguous bulk copy per page reaches 4.45 / 4.32 (H200, benchmarks/tma_stream_probe.cu, session 10).
// Returns -1 for a value it does not know (Launch reports it).
int TmaL2FromEnv() {
  static const int v = EnvChoice("HELIX_MLA_DECODE_TMA_L2", {{"128", CU_TENSOR_MAP_L2_PROMOTION_L2_128B},
                                                             {"256", CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
                                                             {"none", CU_TENSOR_MAP_L2_PROMOTION_NONE}});
  return v;
}
inline CUtensorMapL2promotion TmaL2() { return (CUtensorMapL2promotion)TmaL2FromEnv(); }

// A per-thread one-entry cache of a pool's two tensor maps, keyed by the pool pointers and row count (a
// decode loop calls with the same pool every step); `build` encodes them on a miss. One cache per call site.
template <typename Maps, typename Build>
cudaError_t CachedPoolMaps(const void* lat, const void* rope, long long rows, Maps* maps, Build build) {
  struct Key {
    const void *lat, *rope;
    long long rows;
  };
  thread_local Key last{nullptr, nullptr, -1};
  thread_local Maps cached;
  if (last.lat == lat && last.rope == rope && last.rows == rows) {
    *maps = cached;
    return cudaSuccess;
  }
  const cudaError_t err = build(maps);
  if (err != cudaSuccess) return err;
  cached = *maps;
  last = Key{lat, rope, rows};
  return cudaSuccess;
}

// Encodes the seesaw kernel's two KV-pool tensor maps (see SsMaps). cuTensorMapEncodeTiled is a host-only
// driver call reached through the runtime's entry point (no libcuda link).
cudaError_t EncodeKvMaps(const Params& p, SsMaps* maps) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return cudaErrorSymbolNotFound;
  const long long rows = (long long)p.N * p.P;
  return CachedPoolMaps(p.c_lat, p.k_rope, rows, maps, [&](SsMaps* m) {
    const cuuint32_t box[2] = {64, 64}, estride[2] = {1, 1};
    auto one = [&](CUtensorMap* t, const void* base, int width) {
      const cuuint64_t dims[2] = {(cuuint64_t)width, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)width * 2};
      // 2-byte elements; TMA copies bytes, so the bf16 map serves f16 pools as well.
      return encode(t, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, estride,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, TmaL2(),
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    return one(&m->lat, p.c_lat, kDl) != CUDA_SUCCESS || one(&m->rope, p.k_rope, kDr) != CUDA_SUCCESS
               ? cudaErrorInvalidValue : cudaSuccess;
  });
}

// One tensor map of a byte pool [rows, width B] with boxes of box_w B x 64 rows (the raw-tile kernels' maps).
bool EncodeBytes2d(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap* t, const void* base, int width, long long rows,
                   int box_w, CUtensorMapSwizzle swz) {
  const cuuint32_t estride[2] = {1, 1}, box[2] = {(cuuint32_t)box_w, 64};
  const cuuint64_t dims[2] = {(cuuint64_t)width, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)width};
  return encode(t, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, estride,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swz, TmaL2(),
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The fp8 pool's tensor maps for mla_small_q8 (see Q8Maps): bytes, latent box 128 B x 64 with the 128-byte
// swizzle, rope box 64 B x 64 with the 64-byte swizzle.
cudaError_t EncodeQ8Maps(const Params& p, const QParams& qp, Q8Maps* maps) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return cudaErrorSymbolNotFound;
  const long long rows = (long long)p.N * p.P;
  return CachedPoolMaps(qp.kv_lat8, qp.kv_rope8, rows, maps, [&](Q8Maps* m) {
    return EncodeBytes2d(encode, &m->lat, qp.kv_lat8, kDl, rows, 128, CU_TENSOR_MAP_SWIZZLE_128B) &&
                   EncodeBytes2d(encode, &m->rope, qp.kv_rope8, kDr, rows, 64, CU_TENSOR_MAP_SWIZZLE_64B)
               ? cudaSuccess : cudaErrorInvalidValue;
  });
}

// The nvfp4 pool's tensor maps for mla_small_q4 (see Q4Maps): latent codes box 128 B x 64 with the 128-byte
// swizzle; rope codes and latent block scales box 32 B x 64, no swizzle. Keyed by the codes and the scales.
cudaError_t EncodeQ4Maps(const Params& p, const QParams& qp, Q4Maps* maps) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return cudaErrorSymbolNotFound;
  const long long rows = (long long)p.N * p.P;
  // The cache keys two pointers: the latent codes and the latent scales (the rope arrays change with them).
  return CachedPoolMaps(qp.kv_lat8, qp.lat_sf, rows, maps, [&](Q4Maps* m) {
    return EncodeBytes2d(encode, &m->lat, qp.kv_lat8, kDl / 2, rows, 128, CU_TENSOR_MAP_SWIZZLE_128B) &&
                   EncodeBytes2d(encode, &m->rope, qp.kv_rope8, kDr / 2, rows, 32, CU_TENSOR_MAP_SWIZZLE_NONE) &&
                   EncodeBytes2d(encode, &m->lsf, qp.lat_sf, kDl / 16, rows, 32, CU_TENSOR_MAP_SWIZZLE_NONE) &&
                   EncodeBytes2d(encode, &m->lat64, qp.kv_lat8, kDl / 2, rows, 64, CU_TENSOR_MAP_SWIZZLE_64B)
               ? cudaSuccess : cudaErrorInvalidValue;
  });
}

// The >48 KB shared-memory opt-in of `kernel` is per device: set it once for each device this process
// launches on (a once-per-process flag left every GPU but the first failing the launch). `ready` holds
// one bit per device and belongs to the kernel instantiation.
template <typename Kernel>
cudaError_t OptInSharedMemory(Kernel* kernel, int bytes, std::atomic<uint64_t>& ready) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const uint64_t bit = dev < 64 ? (1ull << dev) : 0;
  if (bit != 0 && (ready.load(std::memory_order_acquire) & bit)) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) ready.fetch_or(bit, std::memory_order_acq_rel);
  return err;
}

// The seesaw kernel's clusters of 1 x 2 x 1 CTAs (kLoad 3), as a launch attribute.
cudaLaunchAttribute SeesawPairAttr() {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1;
  attr.val.clusterDim.y = 2;
  attr.val.clusterDim.z = 1;
  return attr;
}

// Launch configuration of the seesaw kernel in those clusters (the occupancy query's); attr is cfg's attribute.
void SeesawPairConfig(cudaLaunchConfig_t* cfg, cudaLaunchAttribute* attr, dim3 grid, cudaStream_t stream) {
  *attr = SeesawPairAttr();
  *cfg = cudaLaunchConfig_t{};
  cfg->gridDim = grid;
  cfg->blockDim = dim3(kSsThreads);
  cfg->dynamicSmemBytes = kSsSmemBytes;
  cfg->stream = stream;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
}

// How many 1 x 2 clusters of seesaw CTAs fit on the current device at once (cudaOccupancyMaxActiveClusters;
// 66 on the H200), once per device; 0 where they cannot run (the query fails or finds none).
template <bool kBf16>
int SeesawClusters() {
  static std::atomic<int> cached[64];  // clusters + 1; 0 = not asked yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  int c = cached[dev].load(std::memory_order_acquire);
  if (c == 0) {
    int clusters = 0;
    static std::atomic<uint64_t> ready{0};
    cudaError_t err = OptInSharedMemory(mla_seesaw<kBf16, 0, 3>, kSsSmemBytes, ready);
    if (err == cudaSuccess) {
      cudaLaunchConfig_t cfg;
      cudaLaunchAttribute attr;
      SeesawPairConfig(&cfg, &attr, dim3(1, 2), nullptr);
      err = cudaOccupancyMaxActiveClusters(&clusters, mla_seesaw<kBf16, 0, 3>, &cfg);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // this query's error only: the caller falls back to unclustered launches
      clusters = 0;
    }
    c = max(clusters, 0) + 1;
    cached[dev].store(c, std::memory_order_release);
  }
  return c - 1;
}

// The seesaw kernel's load path for this call: the env's (or kVarLoad's: kVar bits 8 / 16 / 32 / 64 of the
// standalone driver force cp.async / TMA / TMA evict-first / multicast), reduced to what the shape allows:
// TMA needs 64 consecutive pool rows per tile (P % 64 == 0), multicast pairs of row tiles (and, for auto,
// a device where such clusters fit: else evict-first TMA), the same under the pair schedule (kvar bit 2048). -1: bad env
// value.
template <bool kBf16>
int SeesawLoad(const Params& p, int mtiles, int kvar = 0) {
  int load = (kvar & 8) ? 0 : (kvar & 16) ? 1 : (kvar & 32) ? 2 : (kvar & 64) ? 3 : LoadModeFromEnv();
  if (load < 0) return load;
  if (p.P % kTokTile != 0) return 0;
  if (load == 4) return mtiles % 2 == 0 && SeesawClusters<kBf16>() > 0 ? 3 : 2;  // no cluster query for odd tiles
  if (load == 3 && mtiles % 2 != 0) return 2;
  return load;
}

// Which buffer halves the pair schedule's multicast kernel multicasts (HELIX_MLA_DECODE_PAIR_MC, read once): right (the
// default: the right V half multicast, the left half and the rope block loaded by each CTA alone), both, or left (the
// left half and the rope block multicast, the right half alone). A part loaded alone waits only for its own CTA's release
// (session 34, attempt 73: right 0.9 / 1.5 % faster than both at H=128 G=4, B = 16 / 64; left 2.6-4.6 % slower). Returns
// the LaunchMain kVar bits (4096: the left half alone, 8192: the right half alone), -1 for a bad value.
int PairMcFromEnv() {
  static const int mode = EnvChoice("HELIX_MLA_DECODE_PAIR_MC", {{"right", 4096}, {"both", 0}, {"left", 8192}});
  return mode;
}

// The 16-bit seesaw's schedule for this call (kVar bit 2048 for pair, else 0; SsSchedFromEnv checked first). auto is the
// seesaw everywhere (session 38): since the setmaxnreg budgets of attempt 79 (session 37) it is ahead of the multicast pair
// schedule at 4 and 8 row tiles too (H=64 G=4: +3-4 % at B=16 and over 400 back-to-back calls at B=64; H=128 G=4 B=16
// +1.6 %; H=128 G=1 pair 5 % slower; benchmarks/NOTES.md, session 38), where sessions 33-36 had measured the pair
// schedule 2.4-8 % ahead. HELIX_MLA_DECODE_SCHED=pair keeps it: with PAIR_MC=right at exactly 4 row tiles, the kernel with
// one consumer code copy per warpgroup (bit 32768; +0.3-1.7 % over the shared copy there, session 36).
template <bool kBf16>
int SsSched(const Params& p, int mtiles) {
  if (SsSchedFromEnv() != 2048) return 0;  // auto and seesaw
  const int sched = 2048 | PairMcFromEnv();
  const bool mc4 = mtiles == 4 && SeesawLoad<kBf16>(p, mtiles) == 3;  // multicast over exactly 4 row tiles
  return sched == (2048 | 4096) && mc4 ? sched | 32768 : sched;
}

template <bool kBf16, int kMode, int kFmt = kFmtNative, int kVar = 0>
cudaError_t LaunchMain(const Params& p, const Sched& s, int num_parts, int mtiles, cudaStream_t stream,
                       const QParams& qp = QParams{}) {
  static std::atomic<uint64_t> ready{0};
  const dim3 grid(num_parts, mtiles);
  cudaError_t err;
  if constexpr (kMode == kSmallGh) {
    // kVar bits 64 / 32 (standalone driver) force one / two consumer warpgroups, bits 128 / 256 one / two
    // producer warpgroups (quantized pages); defaults kSmConsumers / SmProducers.
    constexpr int kNc = (kVar & 64) ? 1 : (kVar & 32) ? 2 : kSmConsumers;
    constexpr int kNp = kFmt == kFmtNative ? 1 : (kVar & 128) ? 1 : (kVar & 256) ? 2 : SmProducers(kFmt);
    constexpr int kV = kVar & 31;
    if ((err = OptInSharedMemory(mla_small_gh<kBf16, kFmt, kNc, kNp, kV>, kSmSmemBytes, ready)) != cudaSuccess) return err;
    if ((err = LaunchKernel(mla_small_gh<kBf16, kFmt, kNc, kNp, kV>, grid, dim3(128 * (kNc + kNp)), kSmSmemBytes, stream,
                            nullptr, p, s, qp)) != cudaSuccess) return err;
  } else if constexpr (kMode == kSmallQ8 || kMode == kSmallQ4 || kMode == kMidQ8) {
    // The raw-tile kernels: mla_small_q8 and mla_mid_q8 / mla_mid_q8s (kVar bit 14; fp8 pages), mla_small_q4 (nvfp4 pages). TMA where a tile is 64
    // consecutive pool rows (P % 64 == 0; kVar bit 7 forces cp.async), else cp.async.
    constexpr bool kQ8 = kMode != kSmallQ4;
    static_assert(kFmt == (kQ8 ? kFmtFp8 : kFmtNvfp4), "mla_small_q8 / mla_mid_q8 read fp8 pages, mla_small_q4 nvfp4 pages");
    constexpr int kSmem = kMode == kSmallQ8 ? kQ8SmemBytes
                          : kMode == kMidQ8 ? ((kVar & 16384) != 0 ? kS8SmemBytes : kM8SmemBytes)
                                            : kQ4SmemBytes;
    std::conditional_t<kQ8, Q8Maps, Q4Maps> maps{};
    const bool tma = p.P % kTokTile == 0 && !(kVar & 128);
    if (tma) {
      if constexpr (kQ8) err = EncodeQ8Maps(p, qp, &maps);
      else err = EncodeQ4Maps(p, qp, &maps);
      if (err != cudaSuccess) return err;
    }
    auto launch = [&](auto use_tma) {  // one instantiation (and shared-memory opt-in flag) per producer kind
      constexpr bool kT = decltype(use_tma)::value;
      // The cp.async producer: every consumer thread arrives on a buffer's empty barrier (kVar bit 8). With one
      // arrival per warp after __syncwarp, racecheck reported the producer's cp.async writes against the other
      // lanes' ld.shared on the ring-wrapping standalone cases (the TMA kernels were clean either way); with
      // every lane arriving it reports 0 hazards (H200, session 10), and mla_small_q8 runs as fast.
      constexpr int kV = (kVar & ~128) | (kT ? 0 : 256);
      constexpr auto kernel = [] {
        if constexpr (kMode == kSmallQ8) return mla_small_q8<kBf16, kT, kV>;
        else if constexpr (kMode == kMidQ8 && (kV & 16384) != 0) return mla_mid_q8s<kBf16, kT, kV & ~(256 | 16384)>;
        else if constexpr (kMode == kMidQ8) return mla_mid_q8<kBf16, kT, kV & ~256>;  // (every consumer thread arrives)
        else return mla_small_q4<kBf16, kT, kV>;
      }();
      static std::atomic<uint64_t> opted{0};
      cudaError_t e = OptInSharedMemory(kernel, kSmem, opted);
      return e != cudaSuccess ? e : LaunchKernel(kernel, grid, dim3(384), kSmem, stream, nullptr, p, s, qp, maps);
    };
    if ((err = tma ? launch(std::true_type{}) : launch(std::false_type{})) != cudaSuccess) return err;
  } else if constexpr (kMode == kSeesaw && kFmt != kFmtNative) {
    // Quantized pages, G*H > 16, P % 64 == 0 (Launch checks): the decoding producer, TMA raw tiles, no clusters. nvfp4:
    // kLoad 4, or with kVar bit 8 (HELIX_MLA_DECODE_NV4_MATH auto / f16) and bf16 activations kLoad 6 (f16 math, Q
    // rewritten as f16, the cheaper f16 decode; f16 activations decode into f16 already); fp8: kLoad 5 (f16 math). kVar
    // bit 16 (nvfp4, HELIX_MLA_DECODE_NV4_STAGE): the staging slot (the kernel's kVar bit 8; more shared memory).
    constexpr int kLoad = kFmt == kFmtFp8 ? 5 : ((kVar & 8) != 0 && kBf16) ? 6 : 4;
    constexpr bool kStage = (kVar & 16) != 0 && kFmt == kFmtNvfp4;
    constexpr auto kernel = mla_seesaw<kBf16, (kVar & 7) | (kStage ? 8 : 0), kLoad>;
    constexpr int kSmemBytes = kStage ? kSsSmemBytesStage : kSsSmemBytes;
    SsMapsT<kLoad> maps{};
    if constexpr (kFmt == kFmtFp8) err = EncodeQ8Maps(p, qp, &maps);
    else err = EncodeQ4Maps(p, qp, &maps);
    if (err != cudaSuccess) return err;
    if ((err = OptInSharedMemory(kernel, kSmemBytes, ready)) != cudaSuccess) return err;
    if ((err = LaunchKernel(kernel, grid, dim3(kSsThreads), kSmemBytes, stream, nullptr, p, s, maps, qp)) != cudaSuccess)
      return err;
  } else if constexpr (kMode == kSeesaw) {
    constexpr int kV = kVar & 7, kVp = kV | ((kVar & 2048) ? 16 : 0);  // kVar bit 2048: the pair schedule (TMA loads)
    // kVar bits 4096 / 8192 (HELIX_MLA_DECODE_PAIR_MC): the multicast pair kernel loads its left / right half alone.
    // kVar bit 32768: the multicast pair kernel with one copy of the consumer code per warpgroup (mla_seesaw bit 128).
    constexpr int kVp3 = kVp | ((kVar & 4096) ? 32 : 0) | ((kVar & 8192) ? 64 : 0) | ((kVar & 32768) ? 128 : 0);
    const int load = SeesawLoad<kBf16>(p, mtiles, kVar);
    if (load < 0) return cudaErrorInvalidValue;  // Launch checks the variable first and names it
    SsMaps maps{};
    if (load != 0 && (err = EncodeKvMaps(p, &maps)) != cudaSuccess) return err;
    // One instantiation per load path, each with its own per-device shared-memory opt-in flags.
    // The pair schedule (kVp): kLoad 1 refilled by the producer, kLoad 2 by the consumers themselves (kSelf), kLoad 3
    // multicast by producer warps 0-1 once both CTAs released.
    static decltype(&mla_seesaw<kBf16, kV, 0>) const kernels[4] = {mla_seesaw<kBf16, kV, 0>, mla_seesaw<kBf16, kVp, 1>,
                                                                   mla_seesaw<kBf16, kVp, 2>, mla_seesaw<kBf16, kVp3, 3>};
    static std::atomic<uint64_t> ready_by_load[4];
    // The pair schedule's kLoad 2 and 3 kernels also have WG0's P block (kSsSmemBytesP0).
    const int smem = (kVar & 2048) != 0 && (load == 2 || load == 3) ? kSsSmemBytesP0 : kSsSmemBytes;
    if ((err = OptInSharedMemory(kernels[load], smem, ready_by_load[load])) != cudaSuccess) return err;
    if (load == 3) {  // clusters of the two row tiles of a part (the caller sized num_parts: SeesawClusterParts)
      const cudaLaunchAttribute attr = SeesawPairAttr();
      return LaunchKernel(kernels[load], grid, dim3(kSsThreads), smem, stream, &attr, p, s, maps, QParams{});
    }
    if ((err = LaunchKernel(kernels[load], grid, dim3(kSsThreads), smem, stream, nullptr, p, s, maps, QParams{})) !=
        cudaSuccess)
      return err;
  } else {
    if ((err = OptInSharedMemory(mla_split_kv<kBf16, kMode, kFmt>, kSmemBytes, ready)) != cudaSuccess) return err;
    if ((err = LaunchKernel(mla_split_kv<kBf16, kMode, kFmt>, grid, dim3(kThreads), kSmemBytes, stream, nullptr, p, s, qp)) !=
        cudaSuccess)
      return err;
  }
  return cudaGetLastError();
}

// Most parts (grid x) whose 1 x 2 clusters of seesaw CTAs all fit on the device at once (a cluster's CTAs
// share a GPC, so fewer pairs than SMs / 2 may fit; a second wave would double the time).
template <bool kBf16>
int SeesawClusterParts(int mtiles, int num_parts) {
  const int clusters = SeesawClusters<kBf16>();
  return clusters <= 0 ? num_parts : max(1, min(num_parts, clusters * 2 / mtiles));
}

// CTAs per row tile (grid x, the schedule's parts): the SMs shared by the row tiles, at most kMaxParts, fewer
// where the seesaw kernel runs in 1 x 2 clusters (kvar: the standalone driver's forced load path).
template <bool kBf16>
int MainParts(const Params& p, int num_sms, int mtiles, bool seesaw, int kvar = 0) {
  const int parts = min(max(num_sms / mtiles, 1), kMaxParts);
  return seesaw && SeesawLoad<kBf16>(p, mtiles, kvar) == 3 ? SeesawClusterParts<kBf16>(mtiles, parts) : parts;
}

// Native pages: HELIX_MLA_DECODE_KERNEL picks auto (small | seesaw by G*H) | seesaw | wgmma | mma. Quantized pages:
// HELIX_MLA_DECODE_DEQUANT picks auto (the raw-tile kernel: small_q8 for fp8, small_q4 for nvfp4 | pipe by G*H) | small | pipe | tile | fp8qk.
template <bool kBf16, int kFmt = kFmtNative>
ffi::Error Launch(cudaStream_t stream, char* ws, const Params& base, int num_sms, uint16_t* o, float* lse,
                  const QParams& qp = QParams{}) {
  const int mode = kFmt == kFmtNative ? KernelModeFromEnv() : DequantModeFromEnv();
  if (kFmt == kFmtNative && LoadModeFromEnv() < 0)
    return ffi::Error::InvalidArgument(
        "helix_mla_decode: HELIX_MLA_DECODE_LOAD must be auto, cpasync, tma_evict_first, tma or tma_multicast");
  if (kFmt == kFmtNative && SsSchedFromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_SCHED must be auto, seesaw or pair");
  if (kFmt == kFmtNative && PairMcFromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_PAIR_MC must be right, both or left");
  if (TmaL2FromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_TMA_L2 must be 128, 256 or none");
  if (SegCostFromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_SEG_COST must be auto or an integer from 1 to " +
                                       std::to_string(kMaxSegOverhead));
  if (kFmt != kFmtNative && Nv4L2FromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_NV4_L2 must be on or off");
  if (kFmt == kFmtNvfp4 && Nv4MathFromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_NV4_MATH must be auto, f16 or bf16");
  if (kFmt == kFmtNvfp4 && Nv4StageFromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_NV4_STAGE must be auto, on or off");
  if (kFmt == kFmtFp8 && Fp8SFromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_FP8_S must be auto, fast or f32");
  if (kFmt == kFmtFp8 && Fp8QFromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_FP8_Q must be two or one");
  if (kFmt == kFmtFp8 && Mid8FromEnv() < 0)
    return ffi::Error::InvalidArgument("helix_mla_decode: HELIX_MLA_DECODE_MID8 must be auto, seesaw, lockstep or decode");
  if (mode < 0)
    return ffi::Error::InvalidArgument(kFmt == kFmtNative ? "helix_mla_decode: HELIX_MLA_DECODE_KERNEL must be auto, small, seesaw, wgmma or mma"
                                                          : "helix_mla_decode: HELIX_MLA_DECODE_DEQUANT must be auto, small8, small4, small, pipe, tile or fp8qk");
  Params p = base;
  const int mtiles = (p.GH + kRowsTile - 1) / kRowsTile;
  const bool seesaw = kFmt == kFmtNative && (mode == kSeesaw || (mode == kSmallGh && p.GH > kSmRows));
  const int sched = seesaw ? SsSched<kBf16>(p, mtiles) : 0;  // (seesaw implies 16-bit pages)
  const int num_parts = MainParts<kBf16>(p, num_sms, mtiles, seesaw, sched);
  const WsLayout l = Layout(p.B, p.GH);
  // fp8 pages past 16 query rows (the branch below): HELIX_MLA_DECODE_MID8 picks the decoding seesaw (decode, on whole
  // 64-token pages), mla_mid_q8 (lockstep) or mla_mid_q8s (else); the schedule's segment cost depends on it too.
  const bool mid8_decode = Mid8FromEnv() == 1 && p.P % kTokTile == 0;
  const bool mid8s = kFmt == kFmtFp8 && mode == kSmallQ8 && p.GH > kSmRows && Mid8FromEnv() != 0 && !mid8_decode;
  Sched s{reinterpret_cast<int4*>(ws + l.seg), reinterpret_cast<int2*>(ws + l.part), reinterpret_cast<int2*>(ws + l.batch),
          num_parts, SegCost(mid8s)};
  p.lse_part = reinterpret_cast<float*>(ws + l.lse);
  p.o_part = reinterpret_cast<uint16_t*>(ws + l.o);
  p.o_out = nullptr;
  p.lse_out = nullptr;
  if (seesaw) {  // the 16-bit seesaws write a sequence covered by one segment straight into o / lse
    p.o_out = o;
    p.lse_out = lse;
  }
  if (kFmt != kFmtNative && mode == kSmallQ8 && p.GH <= kSmRows) {  // the raw-tile kernel of the page format
    if constexpr (kFmt == kFmtFp8) {
      if (Fp8SF32(p.GH)) HELIX_CUDA_CHECK((LaunchMain<kBf16, kSmallQ8, kFmt, 512>(p, s, num_parts, mtiles, stream, qp)));
      else HELIX_CUDA_CHECK((LaunchMain<kBf16, kSmallQ8, kFmt>(p, s, num_parts, mtiles, stream, qp)));
    }
    if constexpr (kFmt == kFmtNvfp4) HELIX_CUDA_CHECK((LaunchMain<kBf16, kSmallQ4, kFmt>(p, s, num_parts, mtiles, stream, qp)));
  } else if (kFmt == kFmtNvfp4 && mode == kSmallQ8 && p.P % kTokTile == 0) {  // nvfp4, G*H > 16: the decoding seesaw
    if constexpr (kFmt == kFmtNvfp4) {
      const bool f16 = Nv4MathFromEnv() == 1, stage = Nv4StageFromEnv() == 1;
      if (f16 && stage) HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmt, 8 | 16>(p, s, num_parts, mtiles, stream, qp)));
      else if (f16) HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmt, 8>(p, s, num_parts, mtiles, stream, qp)));
      else if (stage) HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmt, 16>(p, s, num_parts, mtiles, stream, qp)));
      else HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmt>(p, s, num_parts, mtiles, stream, qp)));
    }
  } else if (kFmt == kFmtFp8 && mode == kSmallQ8) {  // fp8, G*H > 16: mla_mid_q8s / mla_mid_q8, one CTA per 64 rows
    if constexpr (kFmt == kFmtFp8) {
      // HELIX_MLA_DECODE_MID8 picks the kernel, HELIX_MLA_DECODE_FP8_S its S accumulation (512: chains added in f32).
      const bool one = mid8s && Fp8QFromEnv() != 0, f32 = one ? Fp8SFromEnv() == 1 : Fp8SF32(p.GH);
      if (mid8_decode)
        HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmt>(p, s, num_parts, mtiles, stream, qp)));
      else if (one) {  // one E4M3 term of Q
        if (f32) HELIX_CUDA_CHECK((LaunchMain<kBf16, kMidQ8, kFmt, 16384 | 512 | 65536>(p, s, num_parts, mtiles, stream, qp)));
        else HELIX_CUDA_CHECK((LaunchMain<kBf16, kMidQ8, kFmt, 16384 | 65536>(p, s, num_parts, mtiles, stream, qp)));
      } else if (mid8s && f32) HELIX_CUDA_CHECK((LaunchMain<kBf16, kMidQ8, kFmt, 16384 | 512>(p, s, num_parts, mtiles, stream, qp)));
      else if (mid8s) HELIX_CUDA_CHECK((LaunchMain<kBf16, kMidQ8, kFmt, 16384>(p, s, num_parts, mtiles, stream, qp)));
      else if (f32) HELIX_CUDA_CHECK((LaunchMain<kBf16, kMidQ8, kFmt, 512>(p, s, num_parts, mtiles, stream, qp)));
      else HELIX_CUDA_CHECK((LaunchMain<kBf16, kMidQ8, kFmt>(p, s, num_parts, mtiles, stream, qp)));
    }
  } else if (kFmt != kFmtNative && (mode == kSmallGh || mode == kSmallQ8) && p.GH <= kSmRows) {
    HELIX_CUDA_CHECK((LaunchMain<kBf16, kSmallGh, kFmt>(p, s, num_parts, mtiles, stream, qp)));
  } else if constexpr (kFmt == kFmtFp8) {
    if (mode == kWgmmaFp8Qk) HELIX_CUDA_CHECK((LaunchMain<kBf16, kWgmmaFp8Qk, kFmt>(p, s, num_parts, mtiles, stream, qp)));
    else if (mode == kWgmmaPipe || mode == kSmallGh || mode == kSmallQ8) HELIX_CUDA_CHECK((LaunchMain<kBf16, kWgmmaPipe, kFmt>(p, s, num_parts, mtiles, stream, qp)));
    else HELIX_CUDA_CHECK((LaunchMain<kBf16, kWgmma, kFmt>(p, s, num_parts, mtiles, stream, qp)));
  } else if constexpr (kFmt != kFmtNative) {  // nvfp4: fp8qk is not available, runs pipe (so do small/auto past 16 rows)
    if (mode != kWgmma) HELIX_CUDA_CHECK((LaunchMain<kBf16, kWgmmaPipe, kFmt>(p, s, num_parts, mtiles, stream, qp)));
    else HELIX_CUDA_CHECK((LaunchMain<kBf16, kWgmma, kFmt>(p, s, num_parts, mtiles, stream, qp)));
  } else if (mode == kMma) HELIX_CUDA_CHECK((LaunchMain<kBf16, kMma>(p, s, num_parts, mtiles, stream)));
  else if (seesaw && sched == 2048)
    HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmtNative, 2048>(p, s, num_parts, mtiles, stream)));
  else if (seesaw && sched == (2048 | 4096))
    HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmtNative, 2048 | 4096>(p, s, num_parts, mtiles, stream)));
  else if (seesaw && sched == (2048 | 4096 | 32768))
    HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmtNative, 2048 | 4096 | 32768>(p, s, num_parts, mtiles, stream)));
  else if (seesaw && sched == (2048 | 8192))
    HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw, kFmtNative, 2048 | 8192>(p, s, num_parts, mtiles, stream)));
  else if (seesaw) HELIX_CUDA_CHECK((LaunchMain<kBf16, kSeesaw>(p, s, num_parts, mtiles, stream)));
  else if (mode == kSmallGh) HELIX_CUDA_CHECK((LaunchMain<kBf16, kSmallGh>(p, s, num_parts, mtiles, stream)));
  else HELIX_CUDA_CHECK((LaunchMain<kBf16, kWgmma>(p, s, num_parts, mtiles, stream)));
  LaunchCombine<kBf16>(p, s, num_parts, num_sms, o, lse, stream);
  HELIX_CUDA_CHECK(cudaGetLastError());
  return ffi::Error::Success();
}

int NumSms() {
  static int cached[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return -1;
  if (dev < 64 && cached[dev] > 0) return cached[dev];
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  if (dev < 64) cached[dev] = n;
  return n;
}

ffi::Error MlaDecodeCuda(cudaStream_t stream, ffi::AnyBuffer q_lat,
                         ffi::AnyBuffer q_rope, ffi::AnyBuffer c_lat, ffi::AnyBuffer k_rope,
                         ffi::Buffer<ffi::S32> page_table, ffi::Buffer<ffi::S32> kv_bounds, float softmax_scale,
                         ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                         ffi::Result<ffi::AnyBuffer> workspace) {
  MlaShape s;
  std::string err = CheckMlaShapes(q_lat, q_rope, c_lat, k_rope, page_table.dimensions(), kv_bounds.dimensions(),
                                   o->dimensions(), lse->dimensions(), &s);
  if (!err.empty()) return ffi::Error::InvalidArgument("helix_mla_decode (CUDA): " + err);
  const auto t = q_lat.element_type();
  if ((t != ffi::DataType::BF16 && t != ffi::DataType::F16) || c_lat.element_type() != t || o->element_type() != t)
    return ffi::Error::InvalidArgument("helix_mla_decode (CUDA): q, KV and o must share one dtype, bf16 or f16");
  if (s.Dl != kDl || s.Dr != kDr)
    return ffi::Error::InvalidArgument("helix_mla_decode (CUDA): needs Dl=512 and Dr=64, got Dl=" +
                                       std::to_string(s.Dl) + ", Dr=" + std::to_string(s.Dr));
  if (s.P % 16 != 0)
    return ffi::Error::InvalidArgument("helix_mla_decode (CUDA): page size must be a multiple of 16, got " +
                                       std::to_string(s.P));
  if (s.N * s.P * kDl >= (1LL << 40) || s.npp * s.P >= (1LL << 30) || s.B * s.rows() >= (1LL << 31) ||
      !CostFits(s.B, s.npp * s.P))
    return ffi::Error::InvalidArgument("helix_mla_decode (CUDA): shapes too large");
  if (s.B == 0 || s.rows() == 0) return ffi::Error::Success();
  if (s.N == 0) return ffi::Error::InvalidArgument("helix_mla_decode (CUDA): empty page pool");
  const int num_sms = NumSms();
  if (num_sms <= 0) return ffi::Error::Internal("helix_mla_decode (CUDA): cannot read the multiprocessor count");

  Params p{};
  p.q_lat = static_cast<const uint16_t*>(q_lat.untyped_data());
  p.q_rope = static_cast<const uint16_t*>(q_rope.untyped_data());
  p.c_lat = static_cast<const uint16_t*>(c_lat.untyped_data());
  p.k_rope = static_cast<const uint16_t*>(k_rope.untyped_data());
  p.page_table = page_table.typed_data();
  p.bounds = kv_bounds.typed_data();
  p.B = (int)s.B; p.G = (int)s.G; p.H = (int)s.H; p.GH = (int)s.rows();
  p.P = (int)s.P; p.npp = (int)s.npp; p.N = (int)s.N; p.cap = (int)(s.npp * s.P);
  p.scale_log2 = softmax_scale * kLog2e;
  const size_t need = Layout(s.B, s.rows()).total;
  if (workspace->size_bytes() < need)
    return ffi::Error::InvalidArgument("helix_mla_decode (CUDA): workspace has " + std::to_string(workspace->size_bytes()) +
                                       " bytes, needs " + std::to_string(need) + " (ffi.py workspace_bytes out of sync?)");
  char* ws = static_cast<char*>(workspace->untyped_data());
  auto* out = static_cast<uint16_t*>(o->untyped_data());
  if (t == ffi::DataType::BF16) return Launch<true>(stream, ws, p, num_sms, out, lse->typed_data());
  return Launch<false>(stream, ws, p, num_sms, out, lse->typed_data());
}

// Shared body of the fp8 / nvfp4 CUDA handlers: pools = {c_latent, k_rope[, c_latent_sf, k_rope_sf]}.
template <int kFmt>
ffi::Error MlaDecodeQuantCuda(const char* tgt, cudaStream_t stream, ffi::AnyBuffer q_lat, ffi::AnyBuffer q_rope,
                              std::initializer_list<const ffi::AnyBuffer*> pools, ffi::AnyBuffer scale,
                              ffi::Buffer<ffi::S32> page_table, ffi::Buffer<ffi::S32> kv_bounds, float softmax_scale,
                              ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                              ffi::Result<ffi::AnyBuffer> workspace) {
  const std::string name = std::string(tgt) + " (CUDA): ";
  MlaShape s;
  std::string err = kFmt == kFmtFp8
      ? CheckQuantShapes(q_lat, q_rope, pools, {1, 1}, page_table.dimensions(), kv_bounds.dimensions(),
                         o->dimensions(), lse->dimensions(), &s)
      : CheckQuantShapes(q_lat, q_rope, pools, {2, 2, 16, 16}, page_table.dimensions(), kv_bounds.dimensions(),
                         o->dimensions(), lse->dimensions(), &s);
  if (!err.empty()) return ffi::Error::InvalidArgument(name + err);
  const ffi::AnyBuffer* const* pv = pools.begin();
  if constexpr (kFmt == kFmtFp8) {
    if (pv[0]->element_type() != ffi::DataType::F8E4M3FN || pv[1]->element_type() != ffi::DataType::F8E4M3FN)
      return ffi::Error::InvalidArgument(name + "c_latent/k_rope must be float8_e4m3fn");
  } else {
    if (pv[0]->element_type() != ffi::DataType::U8 || pv[1]->element_type() != ffi::DataType::U8 ||
        pv[2]->element_type() != ffi::DataType::F8E4M3FN || pv[3]->element_type() != ffi::DataType::F8E4M3FN)
      return ffi::Error::InvalidArgument(name + "codes must be uint8 and block scales float8_e4m3fn");
  }
  if (scale.element_type() != ffi::DataType::F32 || scale.element_count() != 1)
    return ffi::Error::InvalidArgument(name + "the per-tensor scale must be one float32");
  const auto t = q_lat.element_type();
  if ((t != ffi::DataType::BF16 && t != ffi::DataType::F16) || q_rope.element_type() != t || o->element_type() != t)
    return ffi::Error::InvalidArgument(name + "q_latent, q_rope and o must share one dtype, bf16 or f16");
  if (s.Dl != kDl || s.Dr != kDr)
    return ffi::Error::InvalidArgument(name + "needs Dl=512 and Dr=64, got Dl=" + std::to_string(s.Dl) +
                                       ", Dr=" + std::to_string(s.Dr));
  if (s.P % 16 != 0) return ffi::Error::InvalidArgument(name + "page size must be a multiple of 16, got " + std::to_string(s.P));
  if (s.N * s.P * kDl >= (1LL << 40) || s.npp * s.P >= (1LL << 30) || s.B * s.rows() >= (1LL << 31) ||
      !CostFits(s.B, s.npp * s.P))
    return ffi::Error::InvalidArgument(name + "shapes too large");
  if (s.B == 0 || s.rows() == 0) return ffi::Error::Success();
  if (s.N == 0) return ffi::Error::InvalidArgument(name + "empty page pool");
  const int num_sms = NumSms();
  if (num_sms <= 0) return ffi::Error::Internal(name + "cannot read the multiprocessor count");

  Params p{};
  p.q_lat = static_cast<const uint16_t*>(q_lat.untyped_data());
  p.q_rope = static_cast<const uint16_t*>(q_rope.untyped_data());
  QParams qp{};
  qp.kv_lat8 = static_cast<const uint8_t*>(pv[0]->untyped_data());
  qp.kv_rope8 = static_cast<const uint8_t*>(pv[1]->untyped_data());
  if constexpr (kFmt == kFmtNvfp4) {
    qp.lat_sf = static_cast<const uint8_t*>(pv[2]->untyped_data());
    qp.rope_sf = static_cast<const uint8_t*>(pv[3]->untyped_data());
  }
  qp.kv_scale = static_cast<const float*>(scale.untyped_data());
  qp.l2_next = Nv4L2FromEnv() == 1;
  p.page_table = page_table.typed_data();
  p.bounds = kv_bounds.typed_data();
  p.B = (int)s.B; p.G = (int)s.G; p.H = (int)s.H; p.GH = (int)s.rows();
  p.P = (int)s.P; p.npp = (int)s.npp; p.N = (int)s.N; p.cap = (int)(s.npp * s.P);
  p.scale_log2 = softmax_scale * kLog2e;
  const size_t need = Layout(s.B, s.rows()).total;
  if (workspace->size_bytes() < need)
    return ffi::Error::InvalidArgument(name + "workspace has " + std::to_string(workspace->size_bytes()) +
                                       " bytes, needs " + std::to_string(need));
  char* ws = static_cast<char*>(workspace->untyped_data());
  auto* out = static_cast<uint16_t*>(o->untyped_data());
  if (t == ffi::DataType::BF16) return Launch<true, kFmt>(stream, ws, p, num_sms, out, lse->typed_data(), qp);
  return Launch<false, kFmt>(stream, ws, p, num_sms, out, lse->typed_data(), qp);
}

ffi::Error MlaDecodeFp8Cuda(cudaStream_t stream, ffi::AnyBuffer q_lat, ffi::AnyBuffer q_rope, ffi::AnyBuffer c_lat,
                            ffi::AnyBuffer k_rope, ffi::AnyBuffer scale, ffi::Buffer<ffi::S32> page_table,
                            ffi::Buffer<ffi::S32> kv_bounds, float softmax_scale, ffi::Result<ffi::AnyBuffer> o,
                            ffi::Result<ffi::Buffer<ffi::F32>> lse, ffi::Result<ffi::AnyBuffer> workspace) {
  return MlaDecodeQuantCuda<kFmtFp8>("helix_mla_decode_fp8", stream, q_lat, q_rope, {&c_lat, &k_rope}, scale,
                                     page_table, kv_bounds, softmax_scale, o, lse, workspace);
}

ffi::Error MlaDecodeNvfp4Cuda(cudaStream_t stream, ffi::AnyBuffer q_lat, ffi::AnyBuffer q_rope, ffi::AnyBuffer c_lat,
                              ffi::AnyBuffer k_rope, ffi::AnyBuffer c_lat_sf, ffi::AnyBuffer k_rope_sf,
                              ffi::AnyBuffer global_scale, ffi::Buffer<ffi::S32> page_table,
                              ffi::Buffer<ffi::S32> kv_bounds, float softmax_scale, ffi::Result<ffi::AnyBuffer> o,
                              ffi::Result<ffi::Buffer<ffi::F32>> lse, ffi::Result<ffi::AnyBuffer> workspace) {
  return MlaDecodeQuantCuda<kFmtNvfp4>("helix_mla_decode_nvfp4", stream, q_lat, q_rope,
                                       {&c_lat, &k_rope, &c_lat_sf, &k_rope_sf}, global_scale, page_table, kv_bounds,
                                       softmax_scale, o, lse, workspace);
}

}  // namespace

// The CUDA handlers' binding starts with the stream (then BindMlaDecode's operand list, shared with the CPU handlers).
inline auto BindWithStream() { return xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>(); }
}  // namespace helix_ffi

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixMlaDecodeCuda, helix_ffi::MlaDecodeCuda,
                              helix_ffi::BindMlaDecode<helix_ffi::kMlaBuffersNative>(helix_ffi::BindWithStream()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixMlaDecodeFp8Cuda, helix_ffi::MlaDecodeFp8Cuda,
                              helix_ffi::BindMlaDecode<helix_ffi::kMlaBuffersFp8>(helix_ffi::BindWithStream()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(HelixMlaDecodeNvfp4Cuda, helix_ffi::MlaDecodeNvfp4Cuda,
                              helix_ffi::BindMlaDecode<helix_ffi::kMlaBuffersNvfp4>(helix_ffi::BindWithStream()));
