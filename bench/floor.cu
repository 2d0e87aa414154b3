// moegen-floor: what moegen-bench's per-call method (bench/moegen_bench.c:
// flush the L2 with a 256 MiB memset, time one call alone with events,
// median of 200) reports for kernels that do nothing but launch or move
// bytes, so a stage's time can be read against the best any kernel could
// get there:
//   empty     one block of 32 threads that does nothing;
//   stream    a one-wave grid-stride kernel with the router forward's dense
//             traffic: read N bf16 (the logits), write N bf16 (probs) and
//             N bytes (map), 16-byte accesses, N = T x E;
//   stream4   the same traffic, each thread loading 4 chunks before it
//             stores any (4x the bytes in flight a thread);
//   flat      the same traffic, one chunk a thread, a block per 256 chunks
//             (no loop: the hardware's block scheduler spreads the work).
// The floor of a stage is the fastest of the three.
// Prints one JSON line per (kernel, model, tokens), "stage": "floor".
// Built by CMake where nvcc is found (target moegen-floor); exits 77
// without a GPU.
#include <algorithm>
#include <vector>

#include "example.h" /* CUDA_CHECK, example_device_or_skip */

__global__ void empty_kernel() {}

// One chunk's outputs (see stream_kernel).
__device__ __forceinline__ void stream_one(uint4 v, uint4 *probs, uint2 *map, long long i) {
  probs[i] = make_uint4(v.x >> 1, v.y >> 1, v.z >> 1, v.w >> 1);
  map[i] = make_uint2(v.x & 0x01010101u, v.y & 0x01010101u);
}

// n16: 16-byte chunks of the bf16 input (8 elements each). Each chunk's
// probs are written as the input shifted by one bit (any function of it
// keeps the compiler from dropping the reads), its map bytes as 8 zeros
// or ones.
__global__ void stream_kernel(const uint4 *in, uint4 *probs, uint2 *map, long long n16) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16;
       i += (long long)gridDim.x * blockDim.x) {
    stream_one(in[i], probs, map, i);
  }
}

// stream_kernel with 4 loads in flight a thread: chunk i + j * stride, j < 4.
__global__ void stream4_kernel(const uint4 *in, uint4 *probs, uint2 *map, long long n16) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (i + j * stride < n16) v[j] = in[i + j * stride];
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (i + j * stride < n16) stream_one(v[j], probs, map, i + j * stride);
  }
}

// One chunk a thread, as many blocks as it takes.
__global__ void flat_kernel(const uint4 *in, uint4 *probs, uint2 *map, long long n16) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n16) stream_one(in[i], probs, map, i);
}

static const size_t FLUSH = 256u << 20;

template <typename F> static float time_call(F launch, void *flush) {
  const int reps = 200;
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < 20; i++) launch();
  for (int i = 0; i < reps; i++) {
    CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, FLUSH));
    CUDA_CHECK(cudaEventRecord(ev[2 * i]));
    launch();
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1]));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; i++) CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto &e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

int main() {
  example_device_or_skip();
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  void *flush;
  CUDA_CHECK(cudaMalloc(&flush, FLUSH));
  struct { const char *name; int E; } models[] = {
      {"deepseek-v3", 256}, {"qwen3-30b-a3b", 128}, {"mixtral-8x7b", 8}, {"gpt-oss-120b", 128}};
  const int tokens[] = {256, 1024, 4096, 16384};
  float empty = time_call([] { empty_kernel<<<1, 32>>>(); }, flush);
  printf("{\"stage\": \"floor\", \"peer\": \"empty\", \"ms\": %.6f}\n", empty);
  for (auto &m : models) {
    for (int T : tokens) {
      long long n = (long long)T * m.E, n16 = (n + 7) / 8;
      uint4 *in, *probs;
      uint2 *map;
      CUDA_CHECK(cudaMalloc(&in, n16 * 16));
      CUDA_CHECK(cudaMalloc(&probs, n16 * 16));
      CUDA_CHECK(cudaMalloc(&map, n16 * 8));
      CUDA_CHECK(cudaMemset(in, 0x3c, n16 * 16));
      const int threads = 256;
      const long long chunks_blocks = (n16 + threads - 1) / threads;
      const int wave = (int)std::min<long long>(chunks_blocks, 8LL * sms);
      const double bytes = 5.0 * n;
      struct { const char *name; float ms; } runs[] = {
          {"stream", time_call([&] { stream_kernel<<<wave, threads>>>(in, probs, map, n16); }, flush)},
          {"stream4", time_call([&] { stream4_kernel<<<wave, threads>>>(in, probs, map, n16); }, flush)},
          {"flat", time_call([&] { flat_kernel<<<(unsigned)chunks_blocks, threads>>>(in, probs, map, n16); },
                             flush)}};
      for (auto &r : runs)
        printf("{\"stage\": \"floor\", \"peer\": \"%s\", \"model\": \"%s\", \"tokens\": %d, "
               "\"ms\": %.6f, \"gbps\": %.1f, \"bytes\": %.0f}\n",
               r.name, m.name, T, r.ms, bytes / r.ms / 1e6, bytes);
      CUDA_CHECK(cudaFree(in));
      CUDA_CHECK(cudaFree(probs));
      CUDA_CHECK(cudaFree(map));
    }
  }
  CUDA_CHECK(cudaFree(flush));
  return 0;
}
