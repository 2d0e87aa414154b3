/* tests/emu/warp_emu.h -- the CUDA built-ins a generated router kernel uses,
 * on the host: a block is one warp of 32 std::threads (threadIdx.x = lane)
 * that meet at a barrier in every warp intrinsic, so warp-synchronous code
 * runs as written. Shared memory is one static buffer (one block at a
 * time); atomics are host atomics. Included by the emulation driver before
 * the kernel text that tests/emu/emit_kernel.c extracts. */
#ifndef MOEGEN_TESTS_WARP_EMU_H
#define MOEGEN_TESTS_WARP_EMU_H

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "half.h"

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__

struct emu_dim3 {
  unsigned x, y, z;
};
extern thread_local emu_dim3 threadIdx;
extern emu_dim3 blockIdx, gridDim, blockDim;
extern std::barrier<> *emu_warp;          /* the running warp's 32 lanes */
extern unsigned long long emu_slots[32];  /* one exchange slot per lane */
extern unsigned char emu_smem[1 << 20];   /* the block's dynamic shared memory */

static inline int emu_lane() { return (int)(threadIdx.x & 31); }

/* Runs body() once on each of the 32 lanes of one warp (threadIdx.x =
 * first + lane, a std::thread each; first: the warp's first thread in its
 * block, a multiple of 32) and returns when all are done. */
template <class F> static inline void emu_run_warp(F &&body, unsigned first = 0) {
  std::barrier<> warp(32);
  emu_warp = &warp;
  std::vector<std::thread> lanes;
  for (unsigned l = 0; l < 32; l++)
    lanes.emplace_back([&, l] {
      threadIdx = {first + l, 0, 0};
      body();
    });
  for (auto &t : lanes) t.join();
}

/* Every lane posts v, all meet, each reads lane src's value, all meet again. */
template <class T> static inline T emu_exchange(int src, T v) {
  unsigned long long b = 0;
  memcpy(&b, &v, sizeof v);
  emu_slots[emu_lane()] = b;
  emu_warp->arrive_and_wait();
  unsigned long long o = emu_slots[src & 31];
  emu_warp->arrive_and_wait();
  T r;
  memcpy(&r, &o, sizeof r);
  return r;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_exchange(src, v); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) {
  return emu_exchange(emu_lane() ^ o, v);
}
template <class T> static inline T __shfl_up_sync(unsigned, T v, int d) {
  return emu_exchange(emu_lane() - d < 0 ? emu_lane() : emu_lane() - d, v);
}
static inline unsigned __ballot_sync(unsigned, int p) {
  emu_slots[emu_lane()] = p != 0;
  emu_warp->arrive_and_wait();
  unsigned m = 0;
  for (int i = 0; i < 32; i++) m |= (unsigned)(emu_slots[i] & 1) << i;
  emu_warp->arrive_and_wait();
  return m;
}
static inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
static inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  emu_slots[emu_lane()] = v;
  emu_warp->arrive_and_wait();
  unsigned m = 0;
  for (int i = 0; i < 32; i++) m = (unsigned)emu_slots[i] > m ? (unsigned)emu_slots[i] : m;
  emu_warp->arrive_and_wait();
  return m;
}
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp->arrive_and_wait(); }
static inline void __syncthreads() { emu_warp->arrive_and_wait(); }

static inline int __ffs(int x) { return x ? __builtin_ctz((unsigned)x) + 1 : 0; }
static inline int __ffsll(long long x) { return x ? __builtin_ctzll((unsigned long long)x) + 1 : 0; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned atomicOr(unsigned *p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
struct float2 {
  float x, y;
};
static inline float2 make_float2(float x, float y) { return {x, y}; }

/* The kernel text's inline PTX (one input, one output), rewritten by
 * emit_kernel.c into EMU_ASM("op", out, in). */
template <class O, class I> static inline void emu_asm(std::string_view op, O &out, I in) {
  if (op == "rcp.approx.ftz.f32") out = (O)(1.0f / (float)in); /* the kernel's Newton step keeps it */
  else if (op == "ex2.approx.ftz.f32") out = (O)exp2f((float)in);
  else if (op == "cvt.f32.f16") out = (O)fp16_to_f32((uint16_t)in);
  else if (op == "cvt.rn.f16.f32") out = (O)f32_to_fp16((float)in);
  else if (op == "cvt.rn.bf16.f32") out = (O)f32_to_bf16((float)in);
  else {
    fprintf(stderr, "warp_emu.h: no emulation of \"%.*s\"\n", (int)op.size(), op.data());
    abort();
  }
}
#define EMU_ASM(op, out, in) emu_asm(op, out, in)

#endif
