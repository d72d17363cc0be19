// racecheck probe: is a bar.arrive / bar.sync hand-off between two warpgroups (third warpgroup exited) reported?
#include <cstdio>
__global__ void probe(float* out, int mode) {
  __shared__ float buf[2][128];
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  if (wg == 2) return;
  for (int it = 0; it < 4; ++it) {
    if (wg == (it & 1)) {
      buf[it & 1][t] = it + t;
      asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (it & 1)) : "memory");
    } else {
      asm volatile("bar.sync %0, 256;\n" ::"r"(1 + (it & 1)) : "memory");
      out[it * 128 + t] = buf[it & 1][t];
    }
  }
  // sL-style: both write their half, sync, both read both halves (after a full hand-off barrier)
  asm volatile("bar.sync 4, 256;\n" ::: "memory");
  buf[wg][t] = wg * 1000 + t;
  if (mode) asm volatile("bar.sync 3, 256;\n" ::: "memory"); else __syncthreads();
  out[512 + threadIdx.x] = buf[1 - wg][t];
}
int main() {
  float* o; cudaMalloc(&o, 1024 * 4);
  probe<<<1, 384>>>(o, 1); cudaDeviceSynchronize();
  float h[768]; cudaMemcpy(h, o, 768 * 4, cudaMemcpyDeviceToHost);
  printf("probe %s\n", (h[3 * 128 + 5] == 8 && h[512 + 5] == 1005) ? "values ok" : "values WRONG");
  return 0;
}
