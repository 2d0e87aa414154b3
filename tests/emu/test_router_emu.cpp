/* CPU test: the generated router forward kernels (main and small-T) of one
 * spec of tests/gpu/router_specs.h, run on the host under the warp
 * emulation of warp_emu.h, against the CPU reference with the GPU test's
 * checks (router_check.h). Fresh random, tie-heavy and flat inputs, T from
 * 0 to 100 over a grid of 2 or 3 persistent blocks, every index dtype, a
 * counts-only call. It checks the kernels' logic (selection, ties, output
 * layout) where no GPU is; the GPU test still
 * decides: the host's expf and the device's differ by a few ulp, and the
 * memory model is not the GPU's.
 * Usage: test_router_emu SPEC (built per spec with its emitted kernel). */
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <type_traits>
#include <vector>

#include "warp_emu.h"

thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx, gridDim, blockDim = {32, 1, 1};
std::barrier<> *emu_warp;
unsigned long long emu_slots[32];
alignas(16) unsigned char emu_smem[1 << 20];

#include MOEGEN_EMU_KERNEL /* the spec's kernel source (emit_kernel.c), MOEGEN_EMU_SMALL */

extern "C" {
#include "router_ref.h"
}
#include "router_check.h"
#include "router_specs.h"

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

/* Runs kernel over `blocks` one-warp blocks, one block after another. */
template <class Out> static void launch(void (*kernel)(Out, int, int, int), const Out &o, int T,
                                        int index_dtype, int blocks) {
  for (int b = 0; b < blocks; b++) {
    blockIdx = {(unsigned)b, 0, 0};
    gridDim = {(unsigned)blocks, 1, 1};
    emu_run_warp([&] { kernel(o, T, index_dtype, 37); });
  }
}

static int failures;

/* One call of kernel on fresh inputs (ties: 0 random, 1 five values, 2 one
 * value a token); partial: counts only. */
template <class Out>
static void run_case(void (*kernel)(Out, int, int, int), const char *name, const spec *s, int T,
                     int ties, int partial, int blocks) {
  typedef typename std::remove_const<typename std::remove_pointer<decltype(Out::logits)>::type>::type logit_t;
  static const float few[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  const int E = s->E, K = s->K;
  const size_t TE = (size_t)T * E, TK = (size_t)T * K, NB = (size_t)(E + 7) / 8;
  std::vector<float> x(TE + 1), bias(E), w(TK + 1, -7.f), inter(TE + 1, -7.f), cutoff(T + 1, -7.f);
  std::vector<logit_t> lx(TE + 1), probs(TE + 1);
  std::vector<uint8_t> map(TE + 1, 7), bitmap(T * NB + 1, 7);
  std::vector<int64_t> idx(TK + 1, -7);
  std::vector<int32_t> counts(E, -7), hist((size_t)E * 37, 0);
  const float bounds[2] = {-0.3f, 0.9f};
  for (size_t i = 0; i < TE; i++) {
    float v = ties == 2 ? few[i / E % 5] : ties == 1 ? few[rng_u64() % 5] : 2.0f * rng_normal();
    write_dt(s->dt, lx.data(), i, v);
    x[i] = read_dt(s->dt, lx.data(), i);
  }
  for (int e = 0; e < E; e++) bias[e] = ties ? 0.25f * (float)(rng_u64() % 2) : 0.1f * rng_normal();
  for (size_t i = 0; i < TE; i++) write_dt(s->dt, probs.data(), i, -7.f);
  const moegen_index_dtype idt = (moegen_index_dtype)(rng_u64() % 3);
  Out o{};
  o.logits = lx.data();
  o.bias = s->bias ? bias.data() : nullptr;
  o.counts = counts.data();
  if (!partial) {
    o.probs = probs.data();
    o.map = map.data();
    o.bitmap = bitmap.data();
    o.idx = idx.data();
    o.weights = w.data();
    o.inter = inter.data();
  }
  if (s->qb) {
    o.qb_hist = hist.data();
    o.qb_bounds = bounds;
    o.qb_cutoff = partial ? nullptr : cutoff.data();
  }
  for (int e = 0; e < E; e++) counts[e] = 0; /* the host zeroes them before the launch */
  launch(kernel, o, T, (int)idt, blocks);
  router_host_outputs g{};
  g.counts = counts.data();
  if (!partial) {
    g.map = map.data();
    g.bitmap = bitmap.data();
    g.idx = idx.data();
    g.idx_dtype = idt;
    g.weights = w.data();
    g.inter = inter.data();
    g.probs = probs.data();
    g.cutoff = cutoff.data();
  }
  int bad = router_compare(s, T, x.data(), bias.data(), &g);
  if (!bad && s->qb && !partial) { /* the histogram: binned from the kernel's scores and cutoffs */
    std::vector<int32_t> want((size_t)E * 37, 0);
    router_ref_qb_hist(E, T, 37, bounds[0], bounds[1], inter.data(), cutoff.data(), want.data());
    for (size_t i = 0; i < want.size() && !bad; i++)
      if (hist[i] != want[i]) {
        printf("  FAIL: qb histogram[%zu, %zu] = %d, want %d\n", i / 37, i % 37, hist[i], want[i]);
        bad = 1;
      }
  }
  if (bad) printf("  ^ %s kernel, T = %d, ties %d, partial %d, index dtype %d\n", name, T, ties,
                  partial, (int)idt);
  failures += bad;
}

int main(int argc, char **argv) {
  int i = argc == 2 ? atoi(argv[1]) : -1;
  if (i < 0 || (size_t)i >= ROUTER_SPECS) {
    fprintf(stderr, "usage: test_router_emu SPEC (0..%zu)\n", ROUTER_SPECS - 1);
    return 64;
  }
  const spec *s = &router_specs[i];
  rng_state ^= (unsigned long long)time(NULL) * 0x2545f4914f6cdd1dull; /* fresh inputs each run */
  printf("seed %llu\n", rng_state);
  static const int tokens[] = {0, 1, 7, 33, 100};
  for (int T : tokens)
    for (int ties = 0; ties < 3; ties++) {
      run_case(emu_router_fwd, "main", s, T, ties, 0, 2);
#if MOEGEN_EMU_SMALL
      run_case(emu_router_fwd_small, "small-T", s, T, ties, 0, 3);
#endif
    }
  run_case(emu_router_fwd, "main", s, 50, 0, 1, 2);
  printf("%s %s\n", failures ? "FAIL" : "ok  ", s->what);
  return failures != 0;
}
