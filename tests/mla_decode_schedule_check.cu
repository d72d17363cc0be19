// Host-only check of the split-KV schedule of ffi/src/mla_decode_cuda.cu (compiled and run by
// tests/test_ffi_build.py; needs nvcc, no GPU). For random batches (empty sequences, one long
// sequence beside short ones, B up to 1024, parts 1..160): every (sequence, 64-token tile) below the
// sequence's longest bound is covered exactly once, segments stay inside one sequence, each part's
// segments are contiguous and its cost (tiles + ov per segment, ov the cost of a segment start: 1 by default,
// up to kMaxSegOverhead under HELIX_MLA_DECODE_SEG_COST) is within 2 ov + 1 of an even share; and each
// part's own plan (PlanPartSerial, the serial form of the kernels' per-CTA PlanPart, sharing its PlanSeq) gives the
// table's range and writes exactly the table's segments of that part.
#include "mla_decode_cuda.cu"

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

using namespace helix_ffi;

int main() {
  std::mt19937 rng(1234);
  int cases = 0;
  for (int it = 0; it < 3000; ++it) {
    const int B = 1 + rng() % (it % 10 == 0 ? 1024 : 40);
    const int G = 1 + rng() % 8;
    const int num_parts = 1 + rng() % kMaxParts;
    const int cap = 64 * (1 + rng() % 2048);
    std::vector<int> bounds(B * G);
    const int kind = rng() % 4;
    for (int b = 0; b < B; ++b)
      for (int g = 0; g < G; ++g) {
        int v = kind == 0 ? (int)(rng() % (cap + 1))                          // uniform
              : kind == 1 ? (b == 0 ? cap : (int)(rng() % 300))              // one long beside short ones
              : kind == 2 ? (rng() % 3 == 0 ? 0 : (int)(rng() % 200))        // many empty
                          : (int)(rng() % 5) - 2;                            // tiny / negative (clamped)
        bounds[b * G + g] = v;
      }
    // the cost of a segment start: the default, or any HELIX_MLA_DECODE_SEG_COST
    const int ov = it % 3 == 0 ? kSegOverhead : 1 + (int)(rng() % kMaxSegOverhead);
    std::vector<int4> seg(B + kMaxParts);
    std::vector<int2> part(num_parts), batch(B);
    std::vector<int> scratch(B + kMaxParts);
    SchedTable s{seg.data(), part.data(), batch.data()};
    BuildSchedule(bounds.data(), B, G, cap, num_parts, s, scratch.data(), ov);
    long long total = 0;
    std::vector<int> nblk(B);
    for (int b = 0; b < B; ++b) {
      nblk[b] = (SeqLen(bounds.data(), b, G, cap) + 63) / 64;
      total += nblk[b] ? nblk[b] + ov : 0;
    }
    const long long share = (total + num_parts - 1) / num_parts;
    int prev_end = 0;
    long long max_cost = 0;
    for (int p = 0; p < num_parts; ++p) {
      if (part[p].x != prev_end || part[p].y < part[p].x) { std::printf("FAIL parts not contiguous (case %d)\n", it); return 1; }
      prev_end = part[p].y;
      long long cost = 0;
      for (int i = part[p].x; i < part[p].y; ++i) cost += seg[i].z - seg[i].y + ov;
      if (cost > max_cost) max_cost = cost;
    }
    const int nseg = prev_end;
    if (nseg > B + num_parts) { std::printf("FAIL %d segments > B + parts (case %d)\n", nseg, it); return 1; }
    for (int b = 0; b < B; ++b) {
      int next = 0;
      for (int i = batch[b].x; i < batch[b].x + batch[b].y; ++i) {
        if (seg[i].x != b || seg[i].y != next || seg[i].z <= seg[i].y) { std::printf("FAIL coverage b=%d (case %d)\n", b, it); return 1; }
        next = seg[i].z;
      }
      if (next != nblk[b]) { std::printf("FAIL b=%d covers %d of %d tiles (case %d)\n", b, next, nblk[b], it); return 1; }
    }
    std::vector<int4> planned(seg.size());
    for (int p = 0; p < num_parts; ++p) {
      std::fill(planned.begin(), planned.end(), make_int4(-1, -1, -1, -1));
      const int2 range = PlanPartSerial(bounds.data(), B, G, cap, num_parts, p, planned.data(), ov);
      if (range.x != part[p].x || range.y != part[p].y) {
        std::printf("FAIL part %d plans [%d, %d), table [%d, %d) (case %d)\n", p, range.x, range.y, part[p].x, part[p].y, it);
        return 1;
      }
      for (int i = 0; i < (int)seg.size(); ++i) {  // exactly the part's segments written, equal to the table's
        const int4 g = planned[i];
        const bool mine = i >= range.x && i < range.y;
        if (mine ? (g.x != seg[i].x || g.y != seg[i].y || g.z != seg[i].z) : g.x != -1) {
          std::printf("FAIL part %d segment %d planned as (%d, %d, %d), table (%d, %d, %d) (case %d)\n", p, i, g.x, g.y,
                      g.z, seg[i].x, seg[i].y, seg[i].z, it);
          return 1;
        }
      }
    }
    // Balance: no part exceeds an even share by more than the split overheads the walk can add.
    if (max_cost > share + 2 * ov + 1 + (num_parts == 1 ? total : 0)) {
      std::printf("FAIL unbalanced: max part cost %lld vs share %lld (B=%d parts=%d ov=%d, case %d)\n", max_cost, share, B,
                  num_parts, ov, it);
      return 1;
    }
    ++cases;
  }
  std::printf("schedule ok: %d cases\n", cases);
  // The workspace sizes of Layout, for tests/test_ffi_build.py to compare with ffi.py's workspace_bytes.
  for (long long B : {1LL, 3LL, 64LL, 1000LL})
    for (long long GH : {1LL, 16LL, 64LL, 65LL, 128LL, 1024LL}) std::printf("layout %lld %lld %zu\n", B, GH, Layout(B, GH).total);
  return 0;
}
