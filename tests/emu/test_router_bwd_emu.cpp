/* CPU test: the generated router backward kernel of the specs emit_kernel.c
 * lists (BWD_SPECS), in both router_bwd modes, run on the host under the
 * warp emulation of warp_emu.h (a block's warps one after another: the
 * kernel shares nothing between them) against the CPU reference
 * (tests/ref/router_bwd_ref.c; its router_ref_state must give its forward's
 * intermediate), with the GPU test's checks
 * (tests/gpu/test_router_bwd.c): the reference forward's routing and
 * intermediate (saved) or the logits (recompute), dense and compact grads,
 * every routing format bit-identical, recompute within twice the tolerance
 * of saved, fresh random and tie-heavy inputs, T = 0, 1, 33, outputs
 * poisoned. It checks the kernels' logic where no GPU is; the GPU test
 * still decides (the host's expf is not the device's).
 * Usage: test_router_bwd_emu (built with the emitted kernels). */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <type_traits>
#include <vector>

#include "warp_emu.h"

thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx, gridDim, blockDim = {32, 1, 1};
std::barrier<> *emu_warp;
unsigned long long emu_slots[32];
alignas(16) unsigned char emu_smem[1 << 20];

extern "C" {
#include "router_bwd_ref.h"
#include "router_ref.h"
}
#include "dtypes.h"
#include "router_specs.h"

/* One call's device-side buffers, as host memory. */
struct bwd_io {
  const void *grad, *logits, *idx;
  const float *grad_w, *inter;
  const uint8_t *map, *bitmap;
  void *out;
};

/* Runs kernel K (its BwdArgs type A, block THREADS, TOKENS_PER_BLOCK tokens
 * a block) over T tokens: every block, each warp of it in turn but those
 * whose tokens are all past T (they write nothing). */
template <class A, void (*K)(A, int, int), int THREADS, int TPB>
static void run_bwd(const bwd_io &x, int T, int index_dtype) {
  A a{};
  a.grad = (decltype(a.grad))x.grad;
  a.grad_w = x.grad_w;
  a.inter = x.inter;
  a.logits = (decltype(a.logits))x.logits;
  a.map = x.map;
  a.bitmap = x.bitmap;
  a.idx = x.idx;
  a.out = (decltype(a.out))x.out;
  const int blocks = (T + TPB - 1) / TPB;
  blockDim = {THREADS, 1, 1};
  gridDim = {(unsigned)blocks, 1, 1};
  for (int b = 0; b < blocks; b++) {
    blockIdx = {(unsigned)b, 0, 0};
    for (unsigned w = 0; w < THREADS / 32 && b * TPB + (int)w * 32 / (THREADS / TPB) < T; w++)
      emu_run_warp([&] { K(a, T, index_dtype); }, 32 * w);
  }
}

#include MOEGEN_EMU_BWD /* the kernels (emit_kernel.c), EMU_BWD_KERNELS */

struct bwd_kernel {
  int spec, recompute;
  void (*run)(const bwd_io &, int, int);
};
#define EMU_ENTRY(s, m)                                                                      \
  {s, m, &run_bwd<emu_bwd_##s##_##m::rbwd::BwdArgs, emu_bwd_##s##_##m::emu_router_bwd,      \
                  emu_bwd_##s##_##m::rbwd::THREADS, emu_bwd_##s##_##m::rbwd::TOKENS_PER_BLOCK>},
static const bwd_kernel kernels[] = {EMU_BWD_KERNELS(EMU_ENTRY)};

static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static unsigned long long rng_u64() { /* splitmix64 */
  unsigned long long z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float rng_normal() { /* Box-Muller */
  double u = ((rng_u64() >> 11) + 0.5) / 9007199254740992.0, v = (rng_u64() >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static int failures;

/* The routing formats, as in the GPU test. */
enum { FMT_BYTEMAP, FMT_BITMAP, FMT_IDX16, FMT_IDX32, FMT_IDX64, NUM_FMTS };
static const char *const fmt_names[NUM_FMTS] = {"bytemap", "bitmap", "int16 indices",
                                               "int32 indices", "int64 indices"};

/* One (spec, T, ties) case: both modes' kernels (saved, recompute), every
 * format, dense and compact grads. */
static void run_case(const bwd_kernel &saved, const bwd_kernel &recompute, int T, int ties) {
  static const float few[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  const spec *s = &router_specs[saved.spec];
  const moegen_config c = config_of(s);
  const int E = s->E, K = s->K;
  const size_t TE = (size_t)T * E, TK = (size_t)T * K, NB = (size_t)(E + 7) / 8, es = dt_size(s->dt);
  std::vector<float> x(TE + 1), bias(E), inter(TE + 1), state(TE + 1), w(TK + 1), gw(TK + 1);
  std::vector<float> g(TE + 1), want(TE + 1);
  std::vector<unsigned char> lx(TE * es + 4), grad(TE * es + 4);
  std::vector<unsigned char> out[2][NUM_FMTS];
  std::vector<uint8_t> map(TE + 1), bitmap(T * NB + 1, 0);
  std::vector<int32_t> idx32(TK + 1);
  std::vector<int16_t> idx16(TK + 1);
  std::vector<int64_t> idx64(TK + 1);
  for (size_t i = 0; i < TE; i++) {
    write_dt(s->dt, lx.data(), i, ties ? few[rng_u64() % 5] : 2.0f * rng_normal());
    x[i] = read_dt(s->dt, lx.data(), i);
    write_dt(s->dt, grad.data(), i, rng_normal());
  }
  for (int e = 0; e < E; e++) bias[e] = ties ? 0.25f * (float)(rng_u64() % 2) : 0.1f * rng_normal();
  for (size_t i = 0; i < TK; i++) gw[i] = rng_normal();
  router_ref_fwd(&c, T, x.data(), s->bias ? bias.data() : nullptr, nullptr, map.data(),
                 idx32.data(), w.data(), inter.data(), nullptr);
  for (size_t i = 0; i < TE; i++)
    if (map[i]) bitmap[i / E * NB + i % E / 8] |= (uint8_t)(1u << (i % E % 8));
  for (size_t i = 0; i < TK; i++) idx16[i] = (int16_t)idx32[i], idx64[i] = idx32[i];
  router_ref_state(&c, T, x.data(), map.data(), state.data());
  for (size_t i = 0; i < TE; i++) /* the reference both ways: the state it recomputes is its forward's */
    if (isinf(inter[i]) ? state[i] != inter[i] : !close_f32(state[i], inter[i], E)) {
      printf("  FAIL: router_ref_state[%zu,%zu] = %.9g, router_ref_fwd's intermediate %.9g (%s)\n",
             i / E, i % E, state[i], inter[i], s->what);
      failures++;
      return;
    }
  for (int compact = 0; compact < 2; compact++) {
    const int first = compact ? FMT_IDX16 : FMT_BYTEMAP;
    for (int mode = 0; mode < 2; mode++)
      for (int f = first; f < NUM_FMTS; f++) {
        out[mode][f].assign(TE * es + 4, 0xff); /* poisoned: NaN in every dtype */
        bwd_io io{};
        io.grad = compact ? nullptr : grad.data();
        io.grad_w = compact ? gw.data() : nullptr;
        io.inter = mode ? nullptr : inter.data();
        io.logits = mode ? lx.data() : nullptr;
        io.map = f == FMT_BYTEMAP ? map.data() : nullptr;
        io.bitmap = f == FMT_BITMAP ? bitmap.data() : nullptr;
        io.idx = f == FMT_IDX16 ? (const void *)idx16.data()
               : f == FMT_IDX32 ? (const void *)idx32.data()
               : f == FMT_IDX64 ? (const void *)idx64.data() : nullptr;
        io.out = out[mode][f].data();
        const int idt = f == FMT_IDX16 ? MOEGEN_INDEX_INT16 : f == FMT_IDX64 ? MOEGEN_INDEX_INT64 : MOEGEN_INDEX_INT32;
        (mode ? recompute : saved).run(io, T, idt);
      }
    for (size_t i = 0; i < TE; i++) g[i] = 0;
    if (compact)
      for (size_t i = 0; i < TK; i++) g[i / K * E + idx32[i]] = gw[i];
    else
      for (size_t i = 0; i < TE; i++) g[i] = read_dt(s->dt, grad.data(), i);
    for (int mode = 0; mode < 2; mode++) {
      router_ref_bwd(&c, T, g.data(), mode ? state.data() : inter.data(), map.data(), want.data());
      const char *what = mode ? "recompute" : "saved";
      int bad = 0;
      for (size_t i = 0; i < TE && !bad; i++) {
        float v = read_dt(s->dt, out[mode][first].data(), i);
        if (!close_dt(s->dt, v, want[i], E)) {
          printf("  FAIL: grad_logits[%zu,%zu] (%s%s, %s) = %.9g, want %.9g\n", i / E, i % E,
                 fmt_names[first], compact ? ", compact" : "", what, v, want[i]);
          bad = 1;
        }
      }
      for (int f = first + 1; f < NUM_FMTS && !bad; f++)
        if (memcmp(out[mode][f].data(), out[mode][first].data(), TE * es)) {
          printf("  FAIL: grad_logits with %s differs from %s (%s; must be bit-identical)\n",
                 fmt_names[f], fmt_names[first], what);
          bad = 1;
        }
      for (size_t i = 0; i < TE && mode && !bad; i++) {
        float a = read_dt(s->dt, out[1][first].data(), i), b = read_dt(s->dt, out[0][first].data(), i);
        if (!close_pair(s->dt, a, b, E)) {
          printf("  FAIL: grad_logits[%zu,%zu] (%s%s): recompute %.9g, saved %.9g\n", i / E, i % E,
                 fmt_names[first], compact ? ", compact" : "", a, b);
          bad = 1;
        }
      }
      if (bad) printf("  ^ %s, T = %d, ties %d\n", s->what, T, ties);
      failures += bad;
    }
  }
}

int main() {
  rng_state ^= (unsigned long long)time(NULL) * 0x2545f4914f6cdd1dull; /* fresh inputs each run */
  printf("seed %llu\n", rng_state);
  const size_t n = sizeof kernels / sizeof kernels[0];
  for (size_t k = 0; k + 1 < n; k += 2) { /* saved, then recompute, of each spec */
    const int before = failures;
    for (int T : {0, 1, 33})
      for (int ties = 0; ties < 2; ties++) run_case(kernels[k], kernels[k + 1], T, ties);
    printf("%s %s (saved and recompute)\n", failures == before ? "ok  " : "FAIL",
           router_specs[kernels[k].spec].what);
  }
  return failures != 0;
}
